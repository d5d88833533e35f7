"""Learning benchmark: seeded training runs, their evaluation curves and a results row.

    python benchmarks/learning.py --task gym:CartPole-v1 --budget 30k --seeds 0
    python benchmarks/learning.py --task cartpole_swingup --budget 100k --seeds 0 --workers 1 --reanalyze-workers 2

Each run trains with the single-process trainer (``--workers 0``, the default here) or the
Ray trainer, evaluating every ``--eval-every`` agent steps (greedy search, eval-mode env).
A run directory that already holds a checkpoint is resumed, not started again, so an
interrupted benchmark goes on where it stopped; ``--no-train`` only reads the runs.
Writes ``benchmarks/results/<task>.png`` (return vs env frames, one line per seed) and
prints a Markdown row for ``benchmarks/README.md``: final and best mean evaluation
return, the env frames at which a ``--target`` return was first reached, and wall time
(the sum of the training sessions, read from the run's metrics).
"""
import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from ez_robot.checkpoint import checkpoint_path, read_checkpoint, resume_config
from ez_robot.config import load_config

RESULTS = Path(__file__).resolve().parent / "results"


def run(task, budget, seed, overrides, eval_every, eval_episodes, run_root, num_envs, threads, workers,
        reanalyze_workers, train_it=True):
    run_dir = run_root / f"{task.replace(':', '-')}{'-ray' if workers else ''}-seed{seed}"
    config = load_config(task, budget=budget, seed=seed, overrides=overrides)
    if train_it:
        options = dict(device="cpu", num_envs=num_envs, eval_interval=eval_every, eval_episodes=eval_episodes,
                       progress=True, threads=threads)
        state = None
        if checkpoint_path(run_dir).exists():
            state = read_checkpoint(run_dir)
            config = resume_config(state, budget=budget, overrides=overrides)
            print(f"resuming {run_dir} at {state['counters']['env_frames']} env frames")
        if state is None or state["counters"]["agent_steps"] < config.agent_steps_budget:
            if workers:
                from ez_robot.ray_trainer import train
                options.update(workers=workers, reanalyze_workers=reanalyze_workers)
            else:
                from ez_robot.trainer import train
            train(config, run_dir, resume=state, **options)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return config, [r for r in records if r["kind"] == "eval"], wall_seconds(records)


def wall_seconds(records) -> float:
    """Training time summed over sessions: a run resumed after a stop has a ``resume``
    record at the start of each later session (the first session's start is its first
    record, a few seconds late)."""
    total, start, last = 0.0, None, None
    for record in records:
        if record["kind"] == "resume" and start is not None:
            total += last - start
            start = None
        start = record["time"] if start is None else start
        last = record["time"]
    return total + (last - start if start is not None else 0.0)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="gym:CartPole-v1")
    parser.add_argument("--budget", default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--eval-every", type=int, default=None, help="agent steps between evaluations")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--target", type=float, default=None, help="return that counts as solved")
    parser.add_argument("--envs", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--run-root", type=Path, default=Path("runs/benchmarks"))
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--workers", type=int, default=0, help="Ray self-play workers (0: single-process)")
    parser.add_argument("--reanalyze-workers", type=int, default=None, help="Ray reanalyze workers")
    parser.add_argument("--no-train", dest="train", action="store_false",
                        help="only read the existing runs: curve and rows")
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    RESULTS.mkdir(exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4))
    rows = []
    for seed in args.seeds:
        probe = load_config(args.task, budget=args.budget, overrides=args.overrides)
        eval_every = args.eval_every or max(probe.agent_steps_budget // 20, 1)
        config, evals, wall = run(args.task, args.budget, seed, args.overrides, eval_every, args.eval_episodes,
                                  args.run_root, args.envs, args.threads, args.workers, args.reanalyze_workers,
                                  args.train)
        frames = [e["env_frames"] for e in evals]
        means = [e["mean"] for e in evals]
        ax.plot(frames, means, marker=".", label=f"seed {seed}")
        reached = next((f for f, m in zip(frames, means) if args.target is not None and m >= args.target), None)
        rows.append((seed, means[-1] if means else float("nan"), max(means) if means else float("nan"), reached,
                     wall, config.env_frames_budget))
    ax.set_xlabel("env frames")
    ax.set_ylabel(f"mean eval return ({args.eval_episodes} episodes)")
    ax.set_title(args.task)
    if args.target is not None:
        ax.axhline(args.target, color="gray", linestyle="--", linewidth=1)
    ax.legend()
    png = RESULTS / f"{args.task.replace(':', '-')}.png"
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    print(f"curve: {png}")
    print(f"machine: {platform.machine()}, {platform.processor() or 'cpu'}, date {time.strftime('%Y-%m-%d')}")
    print("| task | seed | env frames | final eval | best eval | target reached at | wall (2 cores) |")
    print("|---|---|---|---|---|---|---|")
    for seed, final, best, reached, wall, budget in rows:
        where = f"{reached:,} frames" if reached is not None else "not reached"
        print(f"| {args.task} | {seed} | {budget:,} | {final:.1f} | {best:.1f} | {where} | {wall / 60:.0f} min |")
    if len(rows) > 1:
        finals = np.array([r[1] for r in rows])
        print(f"mean final over {len(rows)} seeds: {finals.mean():.1f} +- {finals.std():.1f}")


if __name__ == "__main__":
    main()
