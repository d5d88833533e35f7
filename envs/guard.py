"""An env that is made again when it raises, so that one simulator fault does not stop a run."""
from __future__ import annotations

from typing import Callable

import gymnasium as gym

from ez_robot.errors import EnvironmentFailed, EzRobotError

__all__ = ["RemakeOnError", "ENV_ERROR"]

ENV_ERROR = "env_error"
"""The ``info`` key of a step that failed: the error, in words."""


class RemakeOnError(gym.Wrapper):
    """Wraps the env ``make(seed)`` returns, and makes it again (with another seed) when it
    raises.

    A step that raises returns the last good observation, reward 0, ``truncated=True``
    and ``info[ENV_ERROR]``: the episode is over, and self-play drops its unfinished part
    rather than store a move that never happened.  A reset that raises is tried again on
    a new env.  More than ``max_failures_in_a_row`` failures without a good step between
    them raise :class:`ez_robot.errors.EnvironmentFailed` with the last error.
    """

    def __init__(self, make: Callable[[int], gym.Env], seed: int, max_failures_in_a_row: int = 5):
        super().__init__(make(seed))
        self.make, self.seed, self.max_failures_in_a_row = make, seed, max_failures_in_a_row
        self.failures = self.failures_in_a_row = 0
        self._reseed: int | None = None
        self._last_obs = None

    @property
    def spec(self):
        """The wrapped env's spec: the guard changes no behaviour a spec describes (and it
        is made from a factory, which a spec cannot hold)."""
        return self.env.spec

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        while True:
            try:
                obs, info = self.env.reset(seed=seed if seed is not None else self._reseed, options=options)
            except EzRobotError:  # a user's mistake (an observation of the wrong shape): no retry mends it
                raise
            except Exception as error:  # noqa: BLE001 - whatever the simulator raises
                self._remake(error)
                continue
            self._reseed, self._last_obs = None, obs
            return obs, info

    def step(self, action):
        try:
            obs, reward, terminated, truncated, info = self.env.step(action)
        except EzRobotError:
            raise
        except Exception as error:  # noqa: BLE001
            self._remake(error)
            return self._last_obs, 0.0, False, True, {ENV_ERROR: f"{type(error).__name__}: {error}"}
        self.failures_in_a_row, self._last_obs = 0, obs
        return obs, reward, terminated, truncated, info

    def _remake(self, error: Exception) -> None:
        self.failures += 1
        self.failures_in_a_row += 1
        if self.failures_in_a_row > self.max_failures_in_a_row:
            raise EnvironmentFailed(f"an environment failed {self.failures_in_a_row} times in a row, the last "
                                    f"with {type(error).__name__}: {error}") from error
        try:
            self.env.close()
        except Exception:  # noqa: BLE001 - it is broken already
            pass
        self._reseed = self.seed + 7919 * self.failures
        self.env = self.make(self._reseed)
