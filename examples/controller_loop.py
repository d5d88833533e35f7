"""A robot's control loop: an exported bundle drives a robot at a fixed rate, using only the
onboard runtime (numpy + onnxruntime; no torch, no training code).

    ez-robot export runs/reach_arm-make_arm-... -o arm-bundle
    python examples/controller_loop.py arm-bundle --episodes 2

The robot here is a simulator standing in for the hardware: the bundle's task env (a
DMControl task through dm_control, a ``gym:`` id, or your own factory, e.g. the example arm
``examples/arm/reach_arm.py:make_arm``).  On a real robot, replace the two methods of
:class:`Robot`: ``read_sensors`` returns the raw readings (a dict of arrays in the units
training saw; the bundle normalizes them itself) and ``apply`` writes the actuator
command, a vector inside the bounds the robot was trained with.

Each tick: read the sensors, ask the policy for the command with the time left in the tick
as its search deadline, apply it, then wait for the next tick.  A missed deadline is two
things: the search stops early and acts on what it found (the anytime search returns its
best action so far; ``policy.last.simulations`` says how many simulations it ran); and a
tick that overran its period is counted, and the schedule restarts from now instead of
firing the late ticks in a burst.  Reports the achieved rate, the missed deadlines, the
decision latency and the return.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("MUJOCO_GL", "egl")  # headless; dm_control and mujoco read it at import

import numpy as np  # noqa: E402

from ez_robot.errors import EzRobotError  # noqa: E402
from ez_robot.export.runtime import BundleError, Policy  # noqa: E402


class Robot:
    """The hardware interface, here a simulator.  On a robot, ``read_sensors`` reads the
    joint encoders and other sensors, and ``apply`` sends the motor command."""

    def __init__(self, policy: Policy, seed: int, trust_task: bool = False):
        self.reward, self.done, self.success = 0.0, False, None
        task = policy.task
        if ":" not in task:  # a DMControl task: dm_control itself, as a robot's driver would be
            from dm_control import suite

            domain, name = next((d, t) for d, t in suite.ALL_TASKS if f"{d}_{t}" == task)
            self.env = suite.load(domain, name, task_kwargs={"random": seed})
            self.time_step = self.env.reset()
            self.kind = "dmc"
        else:  # gym:<id> or a factory of your own: the env, without ez-robot's wrappers
            kwargs = policy.manifest["config"]["env"].get("kwargs", {})
            if task.startswith("gym:"):
                import gymnasium

                self.env = gymnasium.make(task[4:], **kwargs)
            else:
                from ez_robot.envs import require_trusted_task
                from ez_robot.envs.custom import make_custom  # imports gymnasium and your module only

                require_trusted_task(task, kwargs, trusted=trust_task, origin=f"the manifest of {policy.bundle}")
                self.env = make_custom(task, kwargs)
            self.observation, _ = self.env.reset(seed=seed)
            self.kind = "gym"
        self.steps_per_command = int(policy.manifest["action_repeat"])  # held as long as in training

    def read_sensors(self):
        """The raw readings: DMControl's state features as one vector (the suite's order),
        or the env's observation (a dict of arrays, or a vector) as it gives it."""
        if self.kind == "dmc":
            return np.concatenate([np.asarray(v, np.float32).reshape(-1)
                                   for v in self.time_step.observation.values()])
        return self.observation

    def apply(self, command: np.ndarray) -> None:
        """Sends the command (within the trained bounds) and holds it for the trained number
        of control steps."""
        for _ in range(self.steps_per_command):
            if self.kind == "dmc":
                self.time_step = self.env.step(command)
                self.reward += self.time_step.reward or 0.0
                self.done = self.time_step.last()
            else:
                self.observation, reward, terminated, truncated, info = self.env.step(command.astype(np.float32))
                self.reward += float(reward)
                self.done = terminated or truncated
                self.success = info.get("is_success")
            if self.done:
                break


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", help="a bundle directory written by `ez-robot export` (continuous actions, states)")
    parser.add_argument("--episodes", type=int, default=1)
    parser.add_argument("--rate", type=float, default=None, help="control rate in Hz (default: the trained one)")
    parser.add_argument("--margin-ms", type=float, default=1.0, help="slack kept in each tick for sensing and acting")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trust-task", action="store_true",
                        help="allow the bundle's task, when a factory (module:factory), to import and call its code")
    args = parser.parse_args(argv)

    try:
        policy = Policy.load(args.bundle, preset="latency")
    except BundleError as error:
        sys.exit(f"error: {error}")
    if not policy.continuous or policy.manifest["observation"]["kind"] != "state":
        sys.exit(f"error: this example drives robots (continuous actions, state observations); the bundle for "
                 f"{policy.task!r} has {policy.manifest['action']['kind']} actions and "
                 f"{policy.manifest['observation']['kind']} observations; try `ez-robot run`")
    if args.rate is None and not policy.control_period_s:
        sys.exit("error: the bundle does not give its task's control rate; give --rate HZ")
    rate = args.rate or 1.0 / policy.control_period_s
    period = 1.0 / rate
    print(f"{policy.task}: {policy.num_simulations} simulations per decision at {rate:.1f} Hz "
          f"(tick {period * 1000:.1f} ms)")

    returns, successes, decision_ms, simulations, missed, decisions, running = [], [], [], [], 0, 0, 0.0
    for episode in range(args.episodes):
        try:
            robot = Robot(policy, args.seed + episode, args.trust_task)
        except EzRobotError as error:  # the task's module is not importable here, say
            sys.exit(f"error: {error}")
        tick = first_tick = time.perf_counter()
        while not robot.done:
            # --- sense, decide within the tick, act ---
            budget_ms = (tick + period - time.perf_counter()) * 1000.0 - args.margin_ms
            command = policy.act(robot.read_sensors(), deadline_ms=max(budget_ms, 0.0))
            decision_ms.append(policy.last.elapsed_ms)
            simulations.append(int(policy.last.simulations[0]))
            robot.apply(command)
            # --- wait for the next tick; an overrun restarts the schedule from now ---
            decisions += 1
            tick += period
            now = time.perf_counter()
            if now > tick:
                missed, tick = missed + 1, now
            else:
                time.sleep(tick - now)
        running += time.perf_counter() - first_tick  # resets and loading are not control time
        returns.append(robot.reward)
        line = f"episode {episode}: return {robot.reward:.2f}"
        if robot.success is not None:
            successes.append(bool(robot.success))
            line += f", success {bool(robot.success)}"
        print(line)

    ms = np.asarray(decision_ms)
    print(f"achieved {decisions / running:.1f} Hz (target {rate:.1f} Hz) over {decisions} decisions; "
          f"missed deadlines: {missed}")
    print(f"decision latency p50 {np.percentile(ms, 50):.2f} ms, p99 {np.percentile(ms, 99):.2f} ms; "
          f"simulations per decision: mean {np.mean(simulations):.1f}, min {min(simulations)}")
    print(f"mean return {np.mean(returns):.2f}" + (f", success rate {np.mean(successes):.0%}" if successes else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
