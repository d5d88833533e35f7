"""Where a trained example arm fails: one line per episode, then failures by kind.

    python benchmarks/arm_failures.py runs/arm --episodes 100 --seed 100
    python benchmarks/arm_failures.py runs/arm --set num_simulations=128 --set num_candidates=32

Runs the run's greedy search (``ez_robot.load``, as ``ez-robot eval``) on the example arm
and records, per episode, the target (distance from the base, angle from +x), the
fingertip's closest approach and final distance, and the decisions spent on the target.
``--set`` changes a search setting at evaluation only: if more simulations or candidates
rescue the failures, the search is short; if not, the learned model or value is.
Its success count can differ from ``ez-robot eval``'s on the same seeds by a few episodes:
eval plays every episode in one batch drawing candidates from one generator, this script
one episode at a time from the agent's, so the sampled candidates (not the targets) differ.
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "arm"))

import ez_robot  # noqa: E402
from reach_arm import make_arm  # noqa: E402

NEAR_BASE = 0.15  # m: targets closer than this make the arm fold far from its home pose


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="a run directory of the example arm")
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--seed", type=int, default=100, help="seed of the first episode (then +1 each)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a search setting for evaluation, e.g. num_simulations=64")
    args = parser.parse_args()

    agent = ez_robot.load(args.run, trust_task=True)  # the example arm, a factory task: the user named the run
    changes = {}
    for item in args.set:
        key, _, value = item.partition("=")
        changes[key] = ast.literal_eval(value)
    agent._search = agent._search.replace(**changes)
    env = make_arm(**agent.config.env.kwargs)
    rows = []
    print("episode  radius  angle  start  closest  final  on-target  solved")
    for episode in range(args.episodes):
        obs, info = env.reset(seed=args.seed + episode)
        target = env.target
        radius, angle = float(np.linalg.norm(target)), float(np.degrees(np.arctan2(target[1], target[0])))
        start, distances, on_target, done = info["distance"], [], 0, False
        while not done:
            obs, _, terminated, truncated, info = env.step(agent.act(obs))
            distances.append(info["distance"])
            on_target += bool(info["is_success"])
            done = terminated or truncated
        solved = bool(info["is_success"])
        rows.append((radius, angle, start, min(distances), distances[-1], on_target, solved))
        print(f"{episode:7d}  {radius:6.3f}  {angle:5.0f}  {start:5.3f}  {min(distances):7.3f}  "
              f"{distances[-1]:5.3f}  {on_target:9d}  {solved}", flush=True)
    env.close()

    rows = np.array(rows, dtype=float)
    solved, radius = rows[:, 6] > 0, rows[:, 0]
    failed = rows[~solved]
    radius_m = env.success_radius
    print(f"\nsolved {solved.sum():.0f} of {len(rows)} ({solved.mean():.0%})")
    print(f"failed: {len(failed)}; reached the target and left or hovered outside it: "
          f"{(failed[:, 3] < radius_m).sum()} (ending {radius_m * 1000:.0f}-60 mm away: "
          f"{((failed[:, 4] >= radius_m) & (failed[:, 4] < 0.06)).sum()}, farther: {(failed[:, 4] >= 0.06).sum()}); "
          f"never reached it: {(failed[:, 3] >= radius_m).sum()}")
    near, clockwise = radius < NEAR_BASE, rows[:, 1] < 0
    for name, mask in ((f"targets nearer than {NEAR_BASE} m", near), ("the others", ~near),
                       ("targets clockwise of +x (angle < 0; the fingertip starts near +41 deg)", clockwise),
                       ("targets counter-clockwise of +x (angle >= 0)", ~clockwise)):
        if mask.any():
            print(f"{name}: {mask.sum()} episodes, {solved[mask].mean():.0%} solved")


if __name__ == "__main__":
    main()
