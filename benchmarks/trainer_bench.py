"""Trainer throughput: the single-process trainer and the Ray trainer side by side.

    python benchmarks/trainer_bench.py [--seconds 90] [--tasks cartpole_swingup atari:Pong gym:CartPole-v1]
                                       [--ray 1x2 1x1] [--device cuda] [--paper-batch]
                                       [--no-single] [--envs N]

Each measurement is one training session cut at ``--seconds`` (``max_seconds``): real
self-play, replay, reanalyze and learning at the preset's ratio of training steps to
agent steps, no periodic evaluation.  Every session resumes the same warmed-up run: a
replay buffer filled by self-play with fresh weights (one cartpole episode, one Pong
segment), and the training-step counter set to where the learner would have caught up
with it, so the session measures the steady state in which self-play and learning
alternate (from an empty replay, both trainers would first spend minutes catching the
learner up to 1.2 steps per stored move).  On CPU, Atari uses a batch of 16 and 50-move
segments, or one training step would take minutes; ``--paper-batch`` keeps the paper's
batch of 256 (for a GPU, ``--device cuda``: the learner and reanalyze inference on the GPU,
self-play on CPU).  ``--ray WxR`` adds a Ray run with W self-play workers and R reanalyze
workers (R = 0: the learner reanalyzes in its own process), each stepping ``--envs``
environments together; ``--no-single`` skips the single-process session.
``cartpole_swingup:pixels`` is the DMC-pixels preset (a GPU task).

Printed per task: agent steps/s, env frames/s and training steps/s over the whole session
and over its training phase (from the first training step on: the replay is full, the
steady state), then where each trainer's time went, as a share of wall time summed over
its processes (more than 100% for Ray: the processes run in parallel).
"""
import argparse
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

import torch

from ez_robot import ray_trainer, trainer
from ez_robot.checkpoint import ReplayFiles, read_checkpoint
from ez_robot.config import load_config
from ez_robot.device import set_threads
from ez_robot.run_files import RunFiles
from ez_robot.progress import interrupt_on_sigterm

TASKS = {
    "cartpole_swingup": ["replay.min_replay_size=100"],
    "gym:CartPole-v1": ["replay.min_replay_size=100"],
    "atari:Pong": ["replay.min_replay_size=50", "replay.segment_length=50", "train.batch_size=16"],
    # from pixels (dmc_pixels.yaml: the ResNet on 3 stacked 84x84 frames, batch 256): a GPU task
    "cartpole_swingup:pixels": ["replay.min_replay_size=100"],
}


def warm_up(config, run_dir: Path, device: str) -> None:
    """A run directory whose checkpoint holds a filled replay, and a learner counted as
    caught up with it (train_steps = 1.2 x agent steps)."""
    run = trainer._Run(config, torch.device(device), 1, replay_files=ReplayFiles(run_dir / "checkpoints/replay"))
    files = RunFiles(run_dir, config)
    while not run.replay.ready():
        run.collect(files)
    run.counters.train_steps = run.learner.train_steps = int(
        run.counters.agent_steps * config.train.train_steps_per_agent_step)
    run.save(files)
    files.close()


def measure(config, warm: Path, trainer_name: str, seconds: float, workers: int, reanalyze_workers: int,
            device: str, num_envs: int = 1) -> dict:
    options = dict(device=device, progress=False, checkpoint_interval=10**9, eval_interval=10**9, max_seconds=seconds)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(shutil.copytree(warm, Path(tmp) / "run"))
        options["resume"] = read_checkpoint(run_dir)
        start = time.perf_counter()
        if trainer_name == "single":
            result = trainer.train(config, run_dir, **options)
        else:
            result = ray_trainer.train(config, run_dir, workers=workers, reanalyze_workers=reanalyze_workers,
                                       num_envs=num_envs, **options)
        result["total_seconds"] = time.perf_counter() - start  # Ray: with its start and shutdown
    result["action_repeat"] = config.env.action_repeat
    return result


def row(name: str, r: dict) -> str:
    phase = r["training_phase"] or {"agent_steps_per_second": float("nan"), "train_steps_per_second": float("nan"),
                                    "seconds": 0.0}
    agent_steps, train_steps = (round(r[f"{kind}_per_second"] * r["wall_seconds"]) for kind in ("agent_steps",
                                                                                                "train_steps"))
    return (f"| {name} | {r['wall_seconds']:.0f} s | {agent_steps} | {train_steps} | "
            f"{r['agent_steps_per_second']:.2f} | {r['agent_steps_per_second'] * r['action_repeat']:.1f} | "
            f"{r['train_steps_per_second']:.3f} | {phase['seconds']:.0f} s | {phase['agent_steps_per_second']:.2f} | "
            f"{phase['train_steps_per_second']:.3f} |")


def breakdown(name: str, r: dict) -> str:
    """Seconds per phase as a share of the session's wall time; search = phase - inference."""
    s, wall = dict(r["seconds"]), r["wall_seconds"]
    parts = []
    for phase in ("selfplay", "reanalyze"):
        if phase in s:
            inference = s.pop(f"{phase}.inference", 0.0)
            parts.append(f"{phase} {100 * s.pop(phase) / wall:.0f}% (inference {100 * inference / wall:.0f}%)")
    parts += [f"{name_} {100 * value / wall:.0f}%" for name_, value in sorted(s.items(), key=lambda kv: -kv[1])
              if value / wall >= 0.005]
    return f"| {name} | " + ", ".join(parts) + " |"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=90.0, help="length of each training session")
    parser.add_argument("--tasks", nargs="+", default=["cartpole_swingup", "atari:Pong"], choices=list(TASKS))
    parser.add_argument("--ray", nargs="+", default=["1x2", "1x1"], metavar="WxR",
                        help="Ray runs: W self-play workers x R reanalyze workers")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--paper-batch", action="store_true",
                        help="Atari: the paper's batch of 256 and full segments (for a GPU)")
    parser.add_argument("--envs", type=int, default=1, help="Ray: environments stepped together per self-play worker")
    parser.add_argument("--no-single", action="store_true", help="skip the single-process session (Ray runs only)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        help="config overrides for every task, e.g. reanalyze.mode=batch")
    args = parser.parse_args()
    if args.paper_batch:
        TASKS["atari:Pong"] = ["replay.min_replay_size=400"]
    set_threads(1)
    print(f"{time.strftime('%Y-%m-%d')}, {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"load average {os.getloadavg()[0]:.1f}, sessions of {args.seconds:.0f} s, device {args.device}"
          + (f" ({torch.cuda.get_device_name()})" if args.device == "cuda" else ""))
    for task in args.tasks:
        name, pixels = task.removesuffix(":pixels"), task.endswith(":pixels")
        config = load_config(name, obs="pixels" if pixels else "state", budget="1M",
                             overrides=TASKS[task] + args.overrides)
        with tempfile.TemporaryDirectory() as tmp:
            warm = Path(tmp) / "warm"
            warm_up(config, warm, args.device)
            results = {} if args.no_single else {
                "single-process": measure(config, warm, "single", args.seconds, 0, 0, args.device)}
            for spec in args.ray:
                workers, reanalyzers = (int(x) for x in spec.split("x"))
                envs = f" x {args.envs} envs" if args.envs > 1 else ""
                results[f"Ray {workers} self-play{envs} + {reanalyzers} reanalyze"] = measure(
                    config, warm, "ray", args.seconds, workers, reanalyzers, args.device, args.envs)
        print(f"\n{task} ({', '.join(TASKS[task] + args.overrides)}; reanalyze.mode={config.reanalyze.mode})\n")
        print("| trainer | session | agent steps | train steps | agent steps/s | env frames/s | train steps/s "
              "| training phase | agent steps/s | train steps/s |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for name, result in results.items():
            print(row(name, result))
        print("\n| trainer | where the time went (share of session wall time, summed over processes) |\n|---|---|")
        for name, result in results.items():
            print(breakdown(name, result))
        for name, result in results.items():
            if "Ray" in name:
                print(f"\n{name}: {result['total_seconds'] - result['wall_seconds']:.1f} s of Ray start-up and "
                      f"shutdown around the session")


if __name__ == "__main__":
    try:
        with interrupt_on_sigterm():  # `timeout` or a scheduler: one line, not Ray's traceback
            main()
    except KeyboardInterrupt:
        raise SystemExit("\ntrainer_bench: stopped by a signal or Ctrl-C; the tables printed above are complete, "
                         "the session that was running is lost") from None
