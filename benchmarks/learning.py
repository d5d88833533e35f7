"""Learning benchmark: seeded training runs, their evaluation curves and a results row.

    python benchmarks/learning.py --task gym:CartPole-v1 --budget 30k --seeds 0
    python benchmarks/learning.py --task cartpole_swingup --budget 100k --seeds 0

Each run trains with the single-process trainer, evaluating every ``--eval-every``
agent steps (greedy search, eval-mode env).  Writes ``benchmarks/results/<task>.png``
(return vs env frames, one line per seed) and prints a Markdown row for
``benchmarks/README.md``: final and best mean evaluation return, the env frames at which
a ``--target`` return was first reached, and wall time.
"""
import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from ez_robot.config import load_config
from ez_robot.trainer import train

RESULTS = Path(__file__).resolve().parent / "results"


def run(task, budget, seed, overrides, eval_every, eval_episodes, run_root, num_envs, threads):
    config = load_config(task, budget=budget, seed=seed, overrides=overrides)
    run_dir = run_root / f"{task.replace(':', '-')}-seed{seed}"
    start = time.time()
    train(config, run_dir, device="cpu", num_envs=num_envs, eval_interval=eval_every, eval_episodes=eval_episodes,
          progress=True, threads=threads)
    wall = time.time() - start
    evals = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [e for e in evals if e["kind"] == "eval"]
    return config, evals, wall


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
                                  args.run_root, args.envs, args.threads)
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
