"""What the control loop drives: a :class:`Robot` (numpy only; no torch).

A robot reads its sensors (an observation and the time it was measured), takes actions,
and stops safely.  :class:`SimulatedRobot` is a task's simulated env as a robot (what
``ez-robot run`` drives); :class:`FakeRobot` is a robot without hardware whose faults
are scripted tick by tick, for tests and dry runs of a deployment.  For real hardware,
subclass :class:`Robot` (docs/export_and_runtime.md, "Your own robot").

Timestamps are ``time.monotonic()`` seconds: the loop takes a reading's age as
``time.monotonic() - reading.stamp``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

__all__ = ["Reading", "Robot", "SimulatedRobot", "FakeRobot", "FAULTS"]


@dataclass(frozen=True)
class Reading:
    """One sensor reading."""

    observation: Any
    """What the policy takes: a vector, or the task's Dict of raw sensor values."""
    stamp: float
    """When the sensors measured it, in ``time.monotonic()`` seconds."""


class Robot:
    """The interface the control loop drives; subclass it for your hardware.

    The loop calls ``begin(episode)`` once per episode, then on every tick ``read()`` and
    ``write(action)`` until ``done`` (or a stop), and last ``write(stop action)`` and
    ``stop()``.  ``write`` takes the robot's own units: a float64 vector within the
    bundle's bounds, or an int for discrete actions.
    """

    blocking_read = True
    """True: ``read`` may block (it waits for a bus or a device), so the loop calls it on a
    thread of its own and gives up at the tick's end (a stalled sensor); ``write`` always
    runs on the loop's thread, so a driver whose read and write share a connection must
    lock it.  False: ``read`` returns at once (the latest reading, kept by a callback, or
    a simulator's state), and the loop calls it on its own thread."""

    episode_return: float | None = None
    """The return of the episode so far, where the robot knows its reward (a simulator)."""

    def begin(self, episode: int) -> None:
        """Gets ready for an episode (a simulator resets; hardware may enable its drives)."""

    def read(self) -> Reading:
        """The latest sensor reading and when it was measured."""
        raise NotImplementedError

    def write(self, action) -> None:
        """Sends the actuator command."""
        raise NotImplementedError

    @property
    def done(self) -> bool:
        """The episode is over (a simulator's end); hardware runs until stopped."""
        return False

    def stop(self) -> None:
        """Brings the robot to rest after the loop's last action, the stop action (brakes,
        disabling the drives); called once, also after an error."""

    def close(self) -> None:
        """Releases the robot's resources."""


class SimulatedRobot(Robot):
    """A task's simulated env as a robot: ``make(seed)`` gives the env taking the robot's
    own actions (a Box within the bundle's bounds, or Discrete).

    The simulated world waits for the loop, so a reading is stamped when it is read.  An
    env that raises is made again (:class:`ez_robot.envs.guard.RemakeOnError`): the
    episode ends there and ``env_errors`` keeps the error.  ``on_step(episode, env)`` runs
    after each reset and step (a video recorder, say).
    """

    blocking_read = False

    def __init__(self, make: Callable[[int], Any], *, seed: int = 0, on_step: Callable | None = None):
        from ez_robot.envs.guard import ENV_ERROR, RemakeOnError  # the simulator's packages, never the runtime's

        self._error_key = ENV_ERROR
        self.env = RemakeOnError(make, seed)
        self.seed, self.on_step = seed, on_step
        self.env_errors: list[str] = []
        self._discrete = not hasattr(self.env.action_space, "low")
        self._dtype = None if self._discrete else self.env.action_space.dtype
        self._obs, self._done, self._episode, self.episode_return = None, True, 0, 0.0

    def begin(self, episode: int) -> None:
        self._obs, _ = self.env.reset(seed=self.seed + episode)
        self._done, self._episode, self.episode_return = False, episode, 0.0
        if self.on_step is not None:
            self.on_step(episode, self.env)

    def read(self) -> Reading:
        return Reading(self._obs, time.monotonic())

    def write(self, action) -> None:
        if self._done:  # an ended episode holds still (a stop action after the last step)
            return
        action = int(action) if self._discrete else np.asarray(action, self._dtype)
        self._obs, reward, terminated, truncated, info = self.env.step(action)
        self.episode_return += float(reward)
        self._done = bool(terminated or truncated)
        if self._error_key in info:
            self.env_errors.append(info[self._error_key])
        if self.on_step is not None:
            self.on_step(self._episode, self.env)

    @property
    def done(self) -> bool:
        return self._done

    def close(self) -> None:
        self.env.close()


FAULTS = ("stale", "nan", "error", "stall")
"""What :class:`FakeRobot` can be told to do on a tick's read: a reading ``stale_s`` old,
a NaN in the observation, a read that raises ``OSError``, a read that blocks ``stall_s``."""


class FakeRobot(Robot):
    """A robot without hardware, for tests and dry runs: ``observe(tick)`` gives the
    observation of each read (default: a fixed sequence of standard-normal vectors of
    ``observation_shape``), ``faults`` maps read numbers (0, 1, ...) to one of
    :data:`FAULTS`, and every action written is kept in ``written`` with its time.

    The episode is done after ``steps`` writes (None: never; the loop runs until stopped).
    ``on_write(robot)`` runs after each write (a test stops the loop from there, say).
    ``blocking_read`` as :attr:`Robot.blocking_read` (a stall needs it True).
    """

    def __init__(self, observation_shape=None, *, observe: Callable[[int], Any] | None = None,
                 faults: dict[int, str] | None = None, steps: int | None = None, stale_s: float = 1.0,
                 stall_s: float = 0.5, on_write: Callable | None = None, seed: int = 0, blocking_read: bool = True):
        if observe is None:
            if observation_shape is None:
                raise ValueError("give observation_shape or observe")
            rng = np.random.default_rng(seed)
            shape = tuple(observation_shape)
            observe = lambda tick: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
        unknown = {tick: kind for tick, kind in (faults or {}).items() if kind not in FAULTS}
        if unknown:
            raise ValueError(f"unknown faults {unknown}; FakeRobot knows {FAULTS}")
        self.observe, self.faults, self.steps = observe, dict(faults or {}), steps
        self.stale_s, self.stall_s, self.on_write, self.blocking_read = stale_s, stall_s, on_write, blocking_read
        self.reads = 0
        self.written: list[tuple[float, Any]] = []
        """(time.monotonic(), action) of every write, the stop action last."""
        self.stopped = self.closed = False

    def read(self) -> Reading:
        tick, self.reads = self.reads, self.reads + 1
        fault = self.faults.get(tick)
        if fault == "error":
            raise OSError(f"sensor bus timeout (read {tick})")
        if fault == "stall":
            time.sleep(self.stall_s)
        observation = np.array(self.observe(tick), copy=True)
        if fault == "nan":
            observation.reshape(-1)[0] = np.nan
        stamp = time.monotonic() - (self.stale_s if fault == "stale" else 0.0)
        return Reading(observation, stamp)

    def write(self, action) -> None:
        self.written.append((time.monotonic(), np.array(action, copy=True)))
        if self.on_write is not None:
            self.on_write(self)

    @property
    def done(self) -> bool:
        return self.steps is not None and len(self.written) >= self.steps

    @property
    def actions(self) -> np.ndarray:
        """Every action written, in order ([n, d] or [n])."""
        return np.asarray([action for _, action in self.written])

    def stop(self) -> None:
        self.stopped = True

    def close(self) -> None:
        self.closed = True
