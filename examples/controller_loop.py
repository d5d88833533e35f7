"""A robot-style control loop: a dm_control task driven at a fixed rate by an exported
bundle, using only the onboard runtime (numpy + onnxruntime; no torch, no training code).

    ez-robot export runs/cartpole -o cartpole-bundle
    python examples/controller_loop.py cartpole-bundle --episodes 2

Each tick reads the sensors (the task's state features, flattened in the order training
saw them), asks the policy for the continuous action vector with the time left in the
tick as its search deadline, and holds that command for ``action_repeat`` physics
control steps, as in training.  On a robot the simulator calls become your sensor read
and actuator write.  Reports the achieved rate, the missed deadlines and the return.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("MUJOCO_GL", "egl")  # headless; dm_control reads it at import

import numpy as np  # noqa: E402
from dm_control import suite  # noqa: E402

from ez_robot.export.runtime import BundleError, Policy  # noqa: E402


def read_sensors(time_step) -> np.ndarray:
    """The state features as one float32 vector (the task env's order: the suite's keys)."""
    return np.concatenate([np.asarray(v, np.float32).reshape(-1) for v in time_step.observation.values()])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", help="a bundle directory written by `ez-robot export` (a DMControl state task)")
    parser.add_argument("--episodes", type=int, default=1)
    parser.add_argument("--rate", type=float, default=None, help="control rate in Hz (default: the trained one)")
    parser.add_argument("--margin-ms", type=float, default=1.0, help="slack kept in each tick for sensing and acting")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    try:
        policy = Policy.load(args.bundle, preset="latency")
    except BundleError as error:
        sys.exit(f"error: {error}")
    domains = {f"{domain}_{task}": (domain, task) for domain, task in suite.ALL_TASKS}
    if policy.task not in domains or not policy.continuous or policy.manifest["observation"]["kind"] != "state":
        sys.exit(f"error: this example drives DMControl state policies; the bundle is for {policy.task!r} "
                 f"({policy.manifest['observation']['kind']} observations); try `ez-robot run`")
    action_repeat = int(policy.manifest["action_repeat"])
    rate = args.rate or 1.0 / policy.control_period_s
    period = 1.0 / rate
    print(f"{policy.task}: {policy.num_simulations} simulations per decision at {rate:.1f} Hz "
          f"(tick {period * 1000:.1f} ms), action held for {action_repeat} control steps")

    returns, decision_ms, simulations, missed, decisions, running = [], [], [], 0, 0, 0.0
    for episode in range(args.episodes):
        env = suite.load(*domains[policy.task], task_kwargs={"random": args.seed + episode})
        time_step, total = env.reset(), 0.0
        tick = first_tick = time.perf_counter()
        while not time_step.last():
            # --- decide within the tick ---
            budget_ms = (tick + period - time.perf_counter()) * 1000.0 - args.margin_ms
            action = policy.act(read_sensors(time_step), deadline_ms=max(budget_ms, 0.0))
            decision_ms.append(policy.last.elapsed_ms)
            simulations.append(int(policy.last.simulations[0]))
            # --- act: hold the command for action_repeat control steps ---
            for _ in range(action_repeat):
                time_step = env.step(action)
                total += time_step.reward or 0.0
                if time_step.last():
                    break
            # --- wait for the next tick; an overrun restarts the schedule from now ---
            decisions += 1
            tick += period
            now = time.perf_counter()
            if now > tick:
                missed, tick = missed + 1, now
            else:
                time.sleep(tick - now)
        running += time.perf_counter() - first_tick  # resets and loading are not control time
        returns.append(total)
        print(f"episode {episode}: return {total:.2f}")

    ms = np.asarray(decision_ms)
    print(f"achieved {decisions / running:.1f} Hz (target {rate:.1f} Hz) over {decisions} decisions; "
          f"missed deadlines: {missed}")
    print(f"decision latency p50 {np.percentile(ms, 50):.2f} ms, p99 {np.percentile(ms, 99):.2f} ms; "
          f"simulations per decision: mean {np.mean(simulations):.1f}, min {min(simulations)}")
    print(f"mean return {np.mean(returns):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
