"""The fault guard of every env training and evaluation step: self-play (both trainers),
the evaluations during training, ``ez-robot eval`` and :func:`ez_robot.evaluate`.

An env that raises is made again, so that one simulator fault does not stop a run; an env
that keeps raising, or that returns a non-finite observation or reward, stops it with a
message that names the env and what went wrong.
"""
from __future__ import annotations

import math
from typing import Callable

import gymnasium as gym
import numpy as np

from ez_robot.envs.wrappers import FlatObservations, find_wrapper, observation_layout
from ez_robot.errors import EnvironmentFailed, EnvValueError, EzRobotError

__all__ = ["RemakeOnError", "ENV_ERROR"]

ENV_ERROR = "env_error"
"""The ``info`` key of a step that failed: the error, in words."""


class RemakeOnError(gym.Wrapper):
    """Wraps the env ``make(seed)`` returns, and makes it again (with another seed) when it
    raises.

    A step that raises returns the last good observation, reward 0, ``truncated=True``
    and ``info[ENV_ERROR]``: the episode is over, and its caller drops it (self-play its
    unfinished part, evaluation the whole episode, which it plays again) rather than keep
    a move that never happened.  A reset that raises is tried again on a new env.

    A failure streak ends when an episode ends on its own (terminated or truncated by the
    env): an env that fails in every episode, however late, is a broken env.  More than
    ``max_failures_in_a_row`` failures in a streak raise
    :class:`ez_robot.errors.EnvironmentFailed` with the last error.

    With ``check_finite`` (the default), every observation and reward the env returns is
    checked: a NaN or an infinity raises :class:`ez_robot.errors.EnvValueError` naming
    ``name`` (the task), the step and the field, before it reaches a search or the replay.
    Integer observations (pixels) are not checked: they cannot hold one.
    ``check_finite=False`` leaves bad values to a caller with its own policy for them (a
    robot loop's fallback action).
    """

    def __init__(self, make: Callable[[int], gym.Env], seed: int, max_failures_in_a_row: int = 5, *,
                 name: str | None = None, check_finite: bool = True):
        super().__init__(make(seed))
        self.make, self.seed, self.max_failures_in_a_row = make, seed, max_failures_in_a_row
        self.name = name or _env_name(self.env)
        self.check_finite = check_finite
        self.failures = self.failures_in_a_row = 0
        self.episodes = self.episode_steps = 0  # for messages: the episode (from 1) and its agent steps
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
            self.episodes, self.episode_steps = self.episodes + 1, 0
            if self.check_finite:
                self._check_finite(obs, None)
            return obs, info

    def step(self, action):
        try:
            obs, reward, terminated, truncated, info = self.env.step(action)
        except EzRobotError:
            raise
        except Exception as error:  # noqa: BLE001
            self._remake(error)
            return self._last_obs, 0.0, False, True, {ENV_ERROR: f"{type(error).__name__}: {error}"}
        self.episode_steps += 1
        if self.check_finite:
            self._check_finite(obs, reward)
        if terminated or truncated:  # an episode the env finished itself ends a failure streak
            self.failures_in_a_row = 0
        self._last_obs = obs
        return obs, reward, terminated, truncated, info

    def _remake(self, error: Exception) -> None:
        self.failures += 1
        self.failures_in_a_row += 1
        if self.failures_in_a_row > self.max_failures_in_a_row:
            raise EnvironmentFailed(f"the env {self.name} failed {self.failures_in_a_row} times in a row (made again "
                                    f"after each), the last with {type(error).__name__}: {error}") from error
        try:
            self.env.close()
        except Exception:  # noqa: BLE001 - it is broken already
            pass
        self._reseed = self.seed + 7919 * self.failures
        self.env = self.make(self._reseed)

    def _check_finite(self, obs, reward) -> None:
        """Raises :class:`EnvValueError` for a non-finite reward or observation element."""
        if reward is not None and not math.isfinite(float(reward)):
            raise EnvValueError(f"the env {self.name} returned a non-finite reward ({float(reward)}) at "
                                f"{self._where(reward)}; ez-robot stops rather than learn from it: check the env's "
                                "reward")
        element = _first_non_finite(obs)
        if element is not None:
            raise EnvValueError(f"the env {self.name} returned a non-finite observation at {self._where(reward)}: "
                                f"{self._describe(element)}; ez-robot stops rather than search or learn from "
                                "it: check the env's sensors or simulator state")

    def _where(self, reward) -> str:
        if reward is None:
            return f"the reset of episode {self.episodes}"
        return f"agent step {self.episode_steps} of episode {self.episodes}"

    def _describe(self, element: tuple) -> str:
        """``observation[3] = nan (goal[1] of the env's own observation)``."""
        key, index, value = element
        position = f"[{', '.join(map(str, index))}]" if index else ""
        text = f"observation{key}{position} = {value}"
        flat = find_wrapper(self.env, FlatObservations)
        if key or flat is None or len(index) != 1:
            return text
        for part in observation_layout(flat.raw_observation_space):  # where the flat element came from
            if part["start"] <= index[0] < part["start"] + part["size"] and part["key"]:
                offset = index[0] - part["start"]
                inner = np.unravel_index(offset, part["shape"]) if part["shape"] else ()
                return f"{text} ({part['key']}{''.join(f'[{i}]' for i in inner)} of the env's own observation)"
        return text


def _first_non_finite(obs) -> tuple[str, tuple, float] | None:
    """``(key, index, value)`` of the first NaN or infinity in an observation (``key`` ""
    for an array, ``['goal']`` in a Dict observation); None when every element is finite."""
    if isinstance(obs, dict):
        for key, value in obs.items():
            found = _first_non_finite(value)
            if found is not None:
                return f"[{key!r}]{found[0]}", found[1], found[2]
        return None
    array = np.asarray(obs)
    if array.dtype.kind not in "fc":  # integers and booleans are always finite
        return None
    finite = np.isfinite(array)
    if finite.all():
        return None
    index = tuple(int(i) for i in np.unravel_index(int(np.argmin(finite)), array.shape))
    return "", index, array[index]


def _env_name(env: gym.Env) -> str:
    spec = getattr(env, "spec", None)
    return spec.id if spec is not None and spec.id else type(env.unwrapped).__name__
