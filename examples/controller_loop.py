"""A robot's control loop: an exported bundle drives a robot at a fixed rate, using only the
onboard runtime (numpy + onnxruntime; no torch, no training code).

    ez-robot export runs/reach_arm-make_arm-... -o arm-bundle
    python examples/controller_loop.py arm-bundle --episodes 2

The robot here is a simulator standing in for the hardware: the bundle's task env (a
DMControl task through dm_control, a ``gym:`` id, or your own factory, e.g. the example arm
``examples/arm/reach_arm.py:make_arm``), behind :class:`ez_robot.export.robot.Robot`, the
interface the guarded loop (:func:`ez_robot.export.controller.run_loop`) drives.  On a real
robot, replace the methods of :class:`SimulatorRobot`: ``read`` returns the raw readings (a
dict of arrays in the units training saw; the bundle normalizes them itself) with the time
they were measured, ``write`` sends the actuator command (a vector inside the bounds the
robot was trained with), ``stop`` brings the robot to rest.

Each tick the loop reads the sensors, asks the policy for the command with the time left
in the tick as its search deadline, guards it (bounds, ``--max-change`` per tick), writes
it, and waits for the next tick.  A stale, failed or non-finite reading, or a decision not
ready by the tick's end, sends the fallback (the last command) instead; Ctrl-C sends the
stop action (neutral) first.  Every tick goes to the tick log (``--ticks``; ``ez-robot
report --ticks FILE`` sums it up).  Reports the achieved rate, the missed deadlines, the
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
from ez_robot.export.controller import run_loop  # noqa: E402
from ez_robot.export.guards import Guards  # noqa: E402
from ez_robot.export.robot import Reading, Robot  # noqa: E402
from ez_robot.export.runtime import BundleError, Policy  # noqa: E402


class SimulatorRobot(Robot):
    """The hardware interface, here a simulator.  On a robot, ``read`` reads the joint
    encoders and other sensors, and ``write`` sends the motor command."""

    blocking_read = False  # the simulator's state is there at once (a sensor bus may block: leave it True)

    def __init__(self, policy: Policy, seed: int, trust_task: bool = False):
        self.policy, self.seed, self.trust_task = policy, seed, trust_task
        self.steps_per_command = int(policy.manifest["action_repeat"])  # held as long as in training
        self.successes: list[bool] = []

    def begin(self, episode: int) -> None:
        """A new simulated episode (hardware: enable the drives, move to the start pose)."""
        self.episode_return, self._done, self.success = 0.0, False, None
        seed, task = self.seed + episode, self.policy.task
        if ":" not in task:  # a DMControl task: dm_control itself, as a robot's driver would be
            from dm_control import suite

            domain, name = next((d, t) for d, t in suite.ALL_TASKS if f"{d}_{t}" == task)
            self.env = suite.load(domain, name, task_kwargs={"random": seed})
            self.time_step = self.env.reset()
            self.kind = "dmc"
        else:  # gym:<id> or a factory of your own: the env, without ez-robot's wrappers
            kwargs = self.policy.manifest["config"]["env"].get("kwargs", {})
            if task.startswith("gym:"):
                import gymnasium

                self.env = gymnasium.make(task[4:], **kwargs)
            else:
                from ez_robot.envs import require_trusted_task
                from ez_robot.envs.custom import make_custom  # imports gymnasium and your module only

                require_trusted_task(task, kwargs, trusted=self.trust_task,
                                     origin=f"the manifest of {self.policy.bundle}")
                self.env = make_custom(task, kwargs)
            self.observation, _ = self.env.reset(seed=seed)
            self.kind = "gym"

    def read(self) -> Reading:
        """The raw readings and when they were measured: DMControl's state features as one
        vector (the suite's order), or the env's observation (a dict of arrays, or a vector)."""
        if self.kind == "dmc":
            observation = np.concatenate([np.asarray(v, np.float32).reshape(-1)
                                          for v in self.time_step.observation.values()])
        else:
            observation = self.observation
        return Reading(observation, time.monotonic())

    def write(self, command: np.ndarray) -> None:
        """Sends the command (within the trained bounds) and holds it for the trained number
        of control steps."""
        if self._done:  # the stop action after the episode's end: nothing left to move
            return
        for _ in range(self.steps_per_command):
            if self.kind == "dmc":
                self.time_step = self.env.step(command)
                self.episode_return += self.time_step.reward or 0.0
                self._done = self.time_step.last()
            else:
                self.observation, reward, terminated, truncated, info = self.env.step(command.astype(np.float32))
                self.episode_return += float(reward)
                self._done = terminated or truncated
                self.success = info.get("is_success")
            if self._done:
                if self.success is not None:
                    self.successes.append(bool(self.success))
                break

    @property
    def done(self) -> bool:
        return self._done


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", help="a bundle directory written by `ez-robot export` (continuous actions, states)")
    parser.add_argument("--episodes", type=int, default=1)
    parser.add_argument("--rate", type=float, default=None, help="control rate in Hz (default: the trained one)")
    parser.add_argument("--margin-ms", type=float, default=1.0, help="slack kept in each tick for sensing and acting")
    parser.add_argument("--max-change", type=float, default=None,
                        help="rate limit: the most each command dimension may change per tick (default: none)")
    parser.add_argument("--ticks", default=None, help="write the tick log (JSON lines) to this file")
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
    print(f"{policy.task}: {policy.num_simulations} simulations per decision at {rate:.1f} Hz "
          f"(tick {1000 / rate:.1f} ms)")

    robot = SimulatorRobot(policy, args.seed, args.trust_task)
    try:
        report = run_loop(policy, robot, rate_hz=rate, episodes=args.episodes, margin_ms=args.margin_ms,
                          guards=Guards(max_change=args.max_change), ticks=args.ticks)
    except EzRobotError as error:  # the task's module is not importable here, a rate limit that does not fit, say
        sys.exit(f"error: {error}")
    for episode, episode_return in enumerate(report.returns):
        line = f"episode {episode}: return {episode_return:.2f}"
        if episode < len(robot.successes):
            line += f", success {robot.successes[episode]}"
        print(line)

    ms = np.asarray(report.decision_ms or [0.0])
    print(f"achieved {report.achieved_hz:.1f} Hz (target {rate:.1f} Hz) over {report.decisions} decisions; "
          f"missed deadlines: {report.missed_deadlines}; fallbacks: {sum(report.fallbacks.values())}; "
          f"stopped: {report.stop_reason}")
    print(f"decision latency p50 {np.percentile(ms, 50):.2f} ms, p99 {np.percentile(ms, 99):.2f} ms; "
          f"simulations per decision: mean {np.mean(report.simulations or [0]):.1f}, "
          f"min {min(report.simulations or [0])}")
    successes = robot.successes
    print(f"mean return {np.mean(report.returns):.2f}" + (f", success rate {np.mean(successes):.0%}" if successes else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
