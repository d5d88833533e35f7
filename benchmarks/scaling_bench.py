"""Ray scaling: training steps per second on 1 and on 2 nodes of one CPU each.

    python benchmarks/scaling_bench.py [--seconds 90] [--task gym:CartPole-v1] [--rounds 2]

Each round builds a Ray cluster on this machine with Ray's own test utility
(``ray.cluster_utils.Cluster``, every node bound to 127.0.0.1), first of one node and then
of two, each node of one logical CPU and its processes pinned to one core of its own
(``sched_setaffinity`` before the node starts: its raylet and every worker it forks
inherit it), so two nodes have twice the compute of one.  The driver joins it as
``ez-robot train --address`` does and runs one training session cut at ``--seconds``,
resumed from the same warmed-up run (``trainer_bench.warm_up``: a filled replay, the
learner counted as caught up), with the defaults a cluster gets: one self-play worker,
one reanalyze worker per CPU, the plan of :class:`ez_robot.ray_cluster.Placement`.

Printed: per session, the training steps per second of its training phase, and the
ratio of two nodes to one within each round (the rounds alternate, so that a neighbour's
load falls on both).  Needs 2 cores.
"""
import argparse
import contextlib
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

import ray
import torch

from ez_robot import ray_trainer
from ez_robot.checkpoint import read_checkpoint
from ez_robot.config import load_config
from ez_robot.ray_cluster import init_ray
from ez_robot.progress import interrupt_on_sigterm
from trainer_bench import TASKS, warm_up


@contextlib.contextmanager
def pinned(core: int):
    """Processes started inside run on ``core`` only."""
    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})
    try:
        yield
    finally:
        os.sched_setaffinity(0, saved)


def session(config, warm: Path, nodes: int, seconds: float) -> dict:
    """One training session on a fresh cluster of ``nodes`` one-CPU nodes."""
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    cluster = Cluster()
    try:
        for core in range(nodes):
            with pinned(core):
                cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1",
                                 **({"include_dashboard": False} if core == 0 else {}))
        init_ray(cluster.address)
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = Path(shutil.copytree(warm, Path(tmp) / "run"))
            return ray_trainer.train(config, run_dir, workers=1, address=cluster.address, device="cpu",
                                     progress=False, checkpoint_interval=10**9, eval_interval=10**9,
                                     max_seconds=seconds, resume=read_checkpoint(run_dir))
    finally:
        ray.shutdown()
        cluster.shutdown()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=90.0, help="length of each training session")
    parser.add_argument("--task", default="gym:CartPole-v1", choices=[t for t in TASKS if ":pixels" not in t])
    parser.add_argument("--rounds", type=int, default=2, help="rounds of (1 node, 2 nodes)")
    args = parser.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("scaling_bench: needs 2 cores to pin two nodes to")
    config = load_config(args.task, budget="1M", overrides=TASKS[args.task])
    print(f"{time.strftime('%Y-%m-%d')}, {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"load average {os.getloadavg()[0]:.1f}, {args.task}, sessions of {args.seconds:.0f} s")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        warm = Path(tmp) / "warm"
        warm_up(config, warm, "cpu")
        for round_ in range(args.rounds):
            rates = {}
            for nodes in (1, 2):
                result = session(config, warm, nodes, args.seconds)
                phase = result["training_phase"] or {"train_steps_per_second": float("nan"), "seconds": 0.0}
                rates[nodes] = phase["train_steps_per_second"]
                rows.append(f"| {round_ + 1} | {nodes} x 1 CPU | {nodes} | {phase['seconds']:.0f} s | "
                            f"{result['train_steps'] - read_checkpoint(warm)['counters']['train_steps']} | "
                            f"{rates[nodes]:.3f} | {os.getloadavg()[0]:.1f} |")
            rows[-1] += f" {rates[2] / rates[1]:.2f}x |"
            rows[-2] += " |"
    print("\n| round | cluster | reanalyze workers | training phase | train steps | train steps/s | load after | "
          "2 nodes / 1 |\n|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    try:
        with interrupt_on_sigterm():
            main()
    except KeyboardInterrupt:
        raise SystemExit("\nscaling_bench: stopped by a signal or Ctrl-C; the session that was running is lost") \
            from None
