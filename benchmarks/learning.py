"""Learning benchmark: seeded training runs, their evaluation curves and a results row.

    python benchmarks/learning.py --task gym:CartPole-v1 --budget 30k --seeds 0
    python benchmarks/learning.py --task cartpole_swingup --budget 100k --seeds 0 --workers 1 --reanalyze-workers 2
    python benchmarks/learning.py --task gym:CartPole-v1 --budget 2k --seeds 0 1 2 --trainers single ray \
        --reanalyze-workers 0 --set replay.min_replay_size=500 --eval-every 250 --name parity-2k

Each run trains with the single-process trainer (``--workers 0``, the default here) or the
Ray trainer, evaluating every ``--eval-every`` agent steps (greedy search, eval-mode env);
``--trainers single ray`` runs both on the same seeds and draws them side by side.
A run directory that already holds a checkpoint is resumed, not started again, so an
interrupted benchmark goes on where it stopped; ``--no-train`` only reads the runs.
Writes ``benchmarks/results/<name or task>.png`` (return vs env frames, one line per seed
and trainer, and each trainer's mean) and prints Markdown rows for ``benchmarks/README.md``:
final and best mean evaluation return, the env frames at which a ``--target`` return was
first reached, and wall time (the sum of the training sessions, read from the run's
metrics); with several seeds, each trainer's mean curve as a table.
"""
import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from ez_robot.checkpoint import checkpoint_path, read_checkpoint, resume_config
from ez_robot.config import load_config



def run(task, budget, seed, overrides, eval_every, eval_episodes, run_root, num_envs, threads, workers,
        reanalyze_workers, train_it=True):
    run_dir = run_root / f"{task.replace(':', '-')}-{budget or 'preset'}{'-ray' if workers else ''}-seed{seed}"
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
    parser.add_argument("--workers", type=int, default=1, help="Ray self-play workers (with --trainers ray)")
    parser.add_argument("--reanalyze-workers", type=int, default=None, help="Ray reanalyze workers")
    parser.add_argument("--trainers", nargs="+", choices=["single", "ray"], default=["single"])
    parser.add_argument("--name", default=None, help="file name of the curve (default: the task)")
    parser.add_argument("--no-train", dest="train", action="store_false",
                        help="only read the existing runs: curve and rows")
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    args.run_root.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    rows, curves = [], {}
    probe = load_config(args.task, budget=args.budget, overrides=args.overrides)
    eval_every = args.eval_every or max(probe.agent_steps_budget // 20, 1)
    for trainer, color in zip(args.trainers, ("tab:blue", "tab:orange")):
        workers = args.workers if trainer == "ray" else 0
        for seed in args.seeds:
            config, evals, wall = run(args.task, args.budget, seed, args.overrides, eval_every, args.eval_episodes,
                                      args.run_root, args.envs, args.threads, workers, args.reanalyze_workers,
                                      args.train)
            frames = [e["env_frames"] for e in evals]
            means = [e["mean"] for e in evals]
            ax.plot(frames, means, color=color, alpha=0.35, linewidth=1)
            curves.setdefault(trainer, []).append((frames, means))
            reached = next((f for f, m in zip(frames, means) if args.target is not None and m >= args.target), None)
            rows.append((trainer, seed, means[-1] if means else float("nan"), max(means) if means else float("nan"),
                         reached, wall, config.env_frames_budget))
        grid, mean_curve = _mean_curve(curves[trainer], eval_every * probe.env.action_repeat)
        ax.plot(grid, mean_curve, color=color, linewidth=2.5,
                label=f"{'single-process' if trainer == 'single' else 'Ray'} (mean of {len(args.seeds)} seeds)")
    ax.set_xlabel("env frames")
    ax.set_ylabel(f"mean eval return ({args.eval_episodes} episodes)")
    ax.set_title(args.task + (f", {args.budget}" if args.budget else ""))
    if args.target is not None:
        ax.axhline(args.target, color="gray", linestyle="--", linewidth=1)
    ax.legend()
    png = args.run_root / f"{args.name or args.task.replace(':', '-')}.png"
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    print(f"curve: {png}")
    print(f"machine: {platform.machine()}, {platform.processor() or 'cpu'}, date {time.strftime('%Y-%m-%d')}")
    print("| task | trainer | seed | env frames | final eval | best eval | target reached at | wall (2 cores) |")
    print("|---|---|---|---|---|---|---|---|")
    for trainer, seed, final, best, reached, wall, budget in rows:
        where = f"{reached:,} frames" if reached is not None else "not reached"
        print(f"| {args.task} | {trainer} | {seed} | {budget:,} | {final:.1f} | {best:.1f} | {where} | "
              f"{wall / 60:.0f} min |")
    for trainer in args.trainers:
        finals = np.array([r[2] for r in rows if r[0] == trainer])
        if len(finals) > 1:
            print(f"{trainer}: mean final over {len(finals)} seeds {finals.mean():.1f} +- {finals.std():.1f}")
    if len(args.seeds) > 1:
        print("\n| env frames | " + " | ".join(f"{t} mean" for t in args.trainers) + " |")
        print("|---" * (len(args.trainers) + 1) + "|")
        tables = {t: _mean_curve(curves[t], eval_every * probe.env.action_repeat) for t in args.trainers}
        grid = tables[args.trainers[0]][0]
        for i, frames in enumerate(grid):
            print(f"| {frames:,} | " + " | ".join(f"{tables[t][1][i]:.1f}" for t in args.trainers) + " |")


def _mean_curve(curves: list, step: int):
    """Seeds' curves on a common grid (evaluations at multiples of ``step`` env frames,
    each seed's evaluation taken at or just after the point), averaged."""
    grid = sorted({(f // step) * step for frames, _ in curves for f in frames})
    mean = []
    for point in grid:
        values = [next(m for f, m in zip(frames, means) if (f // step) * step == point) for frames, means in curves
                  if any((f // step) * step == point for f in frames)]
        mean.append(float(np.mean(values)))
    return grid, mean


if __name__ == "__main__":
    main()
