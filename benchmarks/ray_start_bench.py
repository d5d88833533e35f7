"""Ray trainer start-up benchmark: what a Ray run costs before and around its training.

    python benchmarks/ray_start_bench.py [--runs 3]

Runs ``ez-robot train --task gym:CartPole-v1 --budget 120`` with the test suite's tiny
settings (``--workers 1``, an embedded local Ray, 2 reanalyze workers on 2 cores) ``--runs``
times and prints each run's wall time from start to exit: almost all of it is starting Ray
and the worker processes, and shutting them down.  During the first run it reads each Ray
worker process from /proc (Linux): its resident memory, and whether torch is loaded in it
(``libtorch_cpu`` mapped).  Compare two versions by running the script in each checkout.
"""
import argparse
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

TINY = ["--set", "replay.min_replay_size=60", "--set", "train.batch_size=8", "--set", "search.num_simulations=4",
        "--set", "train.train_steps_per_agent_step=0.25", "--set", "train.eval_episodes=2"]
EXPECTED = ("ray::LearnerWorker", "ray::Reanalyzer", "ray::SelfPlayWorker", "ray::SharedStorage", "ray::ReplayWorker")


def _parent(pid: str) -> str:
    return (Path("/proc") / pid / "stat").read_text().rsplit(")", 1)[1].split()[1]


def ray_workers(driver: int) -> dict[str, tuple[float, bool]]:
    """{process name: (RSS in MB, torch loaded)} of the Ray workers of the embedded Ray that
    the process ``driver`` started (children of its raylet, which is the driver's child)."""
    found = {}
    for proc in Path("/proc").iterdir():
        try:
            if not proc.name.isdigit() or _parent(_parent(proc.name)) != str(driver):
                continue
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if not cmdline.startswith("ray::") or "Agent" in cmdline:
                continue
            rss = int(re.search(r"VmRSS:\s+(\d+)", (proc / "status").read_text()).group(1)) / 1024
            torch = "libtorch_cpu" in (proc / "maps").read_text()
            found[cmdline.split()[0].split(".")[0]] = (rss, torch)
        except (OSError, IndexError, AttributeError):
            continue  # gone while being read
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    walls, workers = [], {}
    for run in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            command = [sys.executable, "-m", "ez_robot.cli", "train", "--task", "gym:CartPole-v1", "--budget", "120",
                       "--quiet", "--run-dir", str(Path(tmp) / "run"), *TINY]
            start = time.perf_counter()
            process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if run == 0 and sys.platform.startswith("linux"):
                def sample():
                    while process.poll() is None:
                        seen = ray_workers(process.pid)
                        if set(EXPECTED) <= set(seen):
                            workers.update(seen)
                            return
                        time.sleep(0.5)
                sampler = threading.Thread(target=sample)
                sampler.start()
            _, stderr = process.communicate()
            walls.append(time.perf_counter() - start)
            if process.returncode != 0:
                sys.exit(f"the run failed:\n{stderr}")
    print(f"tiny Ray run, start to exit: {', '.join(f'{w:.1f}' for w in walls)} s "
          f"(mean {sum(walls) / len(walls):.1f})")
    if workers:
        print("\n| Ray worker process | RSS (MB) | torch loaded |\n|---|---|---|")
        for name, (rss, torch) in sorted(workers.items()):
            print(f"| {name} | {rss:.0f} | {'yes' if torch else 'no'} |")


if __name__ == "__main__":
    main()
