"""Where a cartpole_swingup agent's return goes: one line per episode, then the means.

    python benchmarks/cartpole_episodes.py runs/cartpole_swingup --episodes 10
    python benchmarks/cartpole_episodes.py runs/cartpole_swingup --set num_simulations=200

Runs the run's greedy search (``ez_robot.load``, as ``ez-robot eval``) on the task and
records, per episode, the return, the decision at which the pole is first upright
(cosine > 0.95), and from there on the mean of each factor of dm_control's reward
(reward = upright x centered x small_control x small_velocity, read from the physics
after each decision), the forces chosen, and how many of the 5 root actions the search
visited (a search that visits one action only returns the policy prior's choice).  A
return near 800 with the swing-up at ~21 decisions leaves ~1000 - 8 x 21 = 830 to the
balance: what the balance loses is then in the factors.  ``--set`` changes a search
setting at evaluation only (``root_unvisited_q=mean``, ``num_simulations=200``): if the
return does not move, the learned policy and value limit it, not the search.
"""
from __future__ import annotations

import argparse
import ast
from collections import Counter

import numpy as np
from dm_control.utils import rewards

import ez_robot
from ez_robot.envs.dmc import DMControlEnv
from ez_robot.inference import run_search

UPRIGHT = 0.95  # pole-angle cosine counted as swung up


def reward_factors(physics, force: float) -> np.ndarray:
    """dm_control's cartpole (swingup) reward factors: upright, centered, small_control,
    small_velocity (their product is the reward of one physics step)."""
    upright = (physics.pole_angle_cosine().mean() + 1) / 2
    centered = (1 + rewards.tolerance(physics.cart_position(), margin=2)) / 2
    control = (4 + rewards.tolerance(np.array([force]), margin=1, value_at_margin=0, sigmoid="quadratic")[0]) / 5
    velocity = (1 + rewards.tolerance(physics.angular_vel(), margin=5).min()) / 2
    return np.array([upright, centered, control, velocity], dtype=float)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="a run directory of cartpole_swingup")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--seed", type=int, default=100, help="seed of the first episode (then +1 each)")
    parser.add_argument("--checkpoint", default=None, help="a checkpoint file (default: the latest)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a search setting for evaluation, e.g. num_simulations=200")
    args = parser.parse_args()

    agent = ez_robot.load(args.run, checkpoint=args.checkpoint)
    if agent.task != "cartpole_swingup":
        parser.error(f"{args.run} trained {agent.task}, not cartpole_swingup")
    changes = {}
    for item in args.set:
        key, _, value = item.partition("=")
        try:
            changes[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):  # a bare word: root_unvisited_q=mean
            changes[key] = value
    agent._search = agent._search.replace(**changes)
    repeat = agent.config.env.action_repeat
    rows, forces, visited = [], Counter(), []
    print("episode  return  upright at  upright  centered  control  velocity  forces after")
    for episode in range(args.episodes):
        env = DMControlEnv("cartpole", "swingup", seed=args.seed + episode, action_repeat=repeat)
        obs, _ = env.reset(seed=args.seed + episode)
        total, up_at, factors, used, decision, done = 0.0, None, [], Counter(), 0, False
        while not done:
            out = run_search(agent._inference, np.asarray(obs, np.float32)[None], agent._search, agent._rng)
            action = agent._actions.action(int(out.actions[0]))  # what Agent.act returns
            obs, reward, terminated, truncated, _ = env.step(action)
            force = float(np.asarray(action).reshape(-1)[0])
            physics = env._env.physics
            if up_at is None and physics.pole_angle_cosine().mean() > UPRIGHT:
                up_at = decision
            if up_at is not None:
                factors.append(reward_factors(physics, force))
                used[round(force, 2)] += 1
                visited.append(int((out.visit_counts[0] > 0).sum()))
            total += reward
            decision += 1
            done = terminated or truncated
        env.close()
        mean = np.mean(factors, axis=0) if factors else np.full(4, np.nan)
        rows.append((total, np.nan if up_at is None else up_at, *mean))
        forces.update(used)
        print(f"{episode:7d}  {total:6.1f}  {str(up_at):>10}  {mean[0]:7.3f}  {mean[1]:8.3f}  {mean[2]:7.3f}  "
              f"{mean[3]:8.3f}  {dict(sorted(used.items()))}", flush=True)
    rows = np.array(rows)
    print(f"\nmean return {rows[:, 0].mean():.1f} (std {rows[:, 0].std():.1f}); upright at decision "
          f"{np.nanmean(rows[:, 1]):.1f} on average ({int(np.isnan(rows[:, 1]).sum())} episodes never); after it: "
          f"upright {np.nanmean(rows[:, 2]):.3f}, centered {np.nanmean(rows[:, 3]):.3f}, "
          f"small_control {np.nanmean(rows[:, 4]):.3f}, small_velocity {np.nanmean(rows[:, 5]):.3f}")
    balanced = sum(forces.values())  # decisions after the swing-up, all episodes
    print(f"root actions the search visited after the swing-up: {np.mean(visited):.2f} of 5 on average, "
          f"one only in {np.mean(np.array(visited) == 1):.0%} of the decisions")
    print("forces after the swing-up: " + ", ".join(f"{f:+.2f}: {n / balanced:.0%}" for f, n in sorted(forces.items())))


if __name__ == "__main__":
    main()
