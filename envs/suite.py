"""What a task suite is: one object per family of task names.

A suite claims the task names it owns (a prefix such as ``atari:``, or a shape such as
``<domain>_<task>``) and answers everything the rest of ez-robot asks about them: which
tasks it lists, whether a name is one of them, the preset family its tasks train with
(``configs/<family>.yaml``), how to build the base env, how many continuous action
dimensions a task has, a file name for it, the seconds between two decisions and the
frame a video shows.  :mod:`ez_robot.envs.registry` holds the registered suites and
asks them; nothing else branches on a task's prefix.

The env config a suite reads (``env_config``) is an :class:`ez_robot.config.EnvConfig`,
or any object with its fields: the envs never import the config, which asks them.
"""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from ez_robot.envs.wrappers import FlatObservations, RepeatAction, action_bounds
from ez_robot.errors import ConfigError

__all__ = ["Suite", "StateSuite", "continuous_dims"]


class Suite:
    """A family of tasks; subclasses override what their tasks need."""

    kind: str = ""
    """A short name for the family (``dmc``, ``atari``, ``gym``, ``custom``)."""

    def claims(self, task: str) -> bool:
        """Whether ``task`` belongs to this suite (known to it or not): the registry gives a
        task to the first suite that claims it."""
        raise NotImplementedError

    def task_names(self) -> list[str]:
        """The tasks ``ez-robot tasks`` lists."""
        return []

    def hint_names(self) -> list[str]:
        """Names beyond every suite's listed ones that a misspelt task of this suite may have
        meant (for "did you mean")."""
        return []

    def knows(self, task: str) -> bool:
        """Whether a claimed ``task`` names one of this suite's tasks (a suite whose tasks can
        fail in more specific ways raises its own ConfigError)."""
        return task in self.task_names()

    def preset_family(self, task: str, obs: str) -> str:
        """The preset (``configs/<family>.yaml``) ``task`` trains with from ``obs``."""
        raise NotImplementedError

    def slug(self, task: str) -> str:
        """A file or directory name for ``task``."""
        return task.replace(":", "-").replace("/", "-")

    def make(self, env_config: Any, *, seed: int | None, mode: str) -> gym.Env:
        """The task's env with the suite's own wrappers (observations, action repeat, a
        game's protocol), before the action mode's wrapper and the training rewards."""
        raise NotImplementedError

    def action_dims(self, task: str, kwargs: dict) -> int | None:
        """Dimensions of the task's continuous actions, None for a discrete action space."""
        raise NotImplementedError

    def made(self, env: gym.Env) -> bool:
        """Whether this suite built ``env`` and so knows its clock and its frames; envs no
        suite recognizes are read as plain Gymnasium envs."""
        return False

    def control_period(self, env: gym.Env, env_config: Any) -> float | None:
        """Seconds between two agent decisions in ``env`` (action repeat included), or None
        where the task has no clock.  A plain env's own ``control_period`` (per env step),
        ``dt`` (Gymnasium MuJoCo) or ``tau`` (CartPole)."""
        base = env.unwrapped
        for name in ("control_period", "dt", "tau"):
            value = getattr(base, name, None)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                return float(value) * env_config.action_repeat
        return None

    def render_frame(self, env: gym.Env) -> np.ndarray:
        """The frame a human would watch, [H, W, 3] uint8: what an env made with
        ``render_mode="rgb_array"`` renders."""
        base = env.unwrapped
        if getattr(env, "render_mode", None) == "rgb_array" or getattr(base, "render_mode", None) == "rgb_array":
            frame = env.render()
            if isinstance(frame, np.ndarray) and frame.ndim == 3:
                return frame
        raise ConfigError(f"{env.spec.id if env.spec else type(base).__name__} has no renderer ez-robot can "
                          "record: videos need an env that renders rgb_array frames")


class StateSuite(Suite):
    """A suite of plain Gymnasium envs with state observations (``gym:`` ids, a user's
    factories): observations flattened to one float32 vector (Dict keys in the space's
    order), an action repeated by a wrapper."""

    def base_env(self, task: str, kwargs: dict, *, render: bool) -> gym.Env:
        """The env before any of ez-robot's wrappers (``render``: frames for videos)."""
        raise NotImplementedError

    def make(self, env_config: Any, *, seed: int | None, mode: str) -> gym.Env:
        if env_config.obs != "state":
            raise ConfigError(f"{env_config.task} has state observations only, got obs={env_config.obs!r}")
        env = FlatObservations(self.base_env(env_config.task, env_config.kwargs, render=mode == "eval"))
        if env_config.action_repeat > 1:
            env = RepeatAction(env, env_config.action_repeat)
        return env

    def action_dims(self, task: str, kwargs: dict) -> int | None:
        env = self.base_env(task, kwargs, render=False)  # nothing tells the actions short of building it
        try:
            return continuous_dims(env.action_space, task)
        finally:
            env.close()


def continuous_dims(space: gym.Space, task: str) -> int | None:
    """Dimensions of a continuous action space, None for a Discrete one; a clear error for
    the spaces ez-robot cannot act in (MultiDiscrete, Tuple, unbounded Boxes)."""
    if isinstance(space, gym.spaces.Discrete):
        return None
    return len(action_bounds(space, task)[0])
