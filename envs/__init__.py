"""The tasks (``ez_robot.envs``): every task a user names becomes a Gymnasium 1.x env with
a Discrete action space, or (continuous actions in the sampled action modes) a
normalized Box [-1, 1]^D.

Names, one suite each (:mod:`ez_robot.envs.registry`):
- ``<domain>_<task>`` for every task of ``dm_control.suite`` (``cartpole_swingup``,
  ``walker_walk``, ``ball_in_cup_catch``): :mod:`ez_robot.envs.dmc`;
- ``atari:<Game>`` for every game ale-py ships (``atari:Pong``, ``atari:MsPacman``):
  :mod:`ez_robot.envs.atari`;
- ``gym:<id>`` for any registered Gymnasium env with Discrete or bounded Box actions and
  Box or Dict observations: classic control (``gym:CartPole-v1``, ``gym:Pendulum-v1``),
  Gymnasium's MuJoCo tasks (``gym:Hopper-v5``), or a user's own registered id:
  :mod:`ez_robot.envs.gym_ids`;
- ``package.module:factory`` or ``path/to/file.py:factory`` for a user's own env: a
  callable returning a ``gymnasium.Env``, called with ``env.kwargs`` (:mod:`ez_robot.envs.custom`).

Continuous actions are given the action mode's wrapper (:mod:`ez_robot.envs.wrappers`):
joint bins for ``joint``, a normalized Box for the sampled modes; ``gym:`` and custom
observations are flattened to one float32 vector (Dict keys in the space's order).
Terminations (a robot that falls) and truncations (time limits) pass through as the env
reports them.

The functions here take an :class:`ez_robot.config.EnvConfig` (or any object with its
fields) where they need settings; the config asks them, never the other way round.
``ez_robot.config.make_env`` makes a task's env with its preset's settings.
"""
from __future__ import annotations

import fnmatch
from typing import Any

import gymnasium as gym
import numpy as np

from ez_robot.envs import registry
from ez_robot.envs.gym_ids import CLASSIC_TASKS, MUJOCO_TASKS, gym_family
from ez_robot.envs.wrappers import JointDiscreteActions, NormalizedActions, TrainingReward, action_bounds
from ez_robot.errors import ConfigError, UnknownTaskError, UntrustedTaskError

__all__ = ["make_from_config", "render_frame", "task_names", "action_dims", "task_kind", "task_slug", "gym_family",
           "preset_family", "control_period", "validate_task", "is_custom_task", "require_trusted_task",
           "resolved_action_mode",
           "UnknownTaskError", "CLASSIC_TASKS", "MUJOCO_TASKS"]

MODES = ("train", "eval")


def task_kind(task: str) -> str:
    """``atari``, ``gym``, ``custom`` (a factory) or ``dmc``: the kind of the suite that owns it."""
    return registry.suite_for(task).kind


def is_custom_task(task: str) -> bool:
    """``module:factory`` or ``file.py:factory``: a task the factory suite owns."""
    return task_kind(task) == "custom"


def require_trusted_task(task: str, kwargs: dict, *, trusted: bool, origin: str, also: str = "") -> None:
    """:class:`UntrustedTaskError` unless ``task``, read from ``origin`` (a run's saved
    config, a bundle's manifest: files someone else may have written), is safe to use or
    ``trusted``.  Registered suites' tasks (DMControl, ``atari:``, ``gym:``) are names the
    registry looks up; a factory task imports its module and calls its factory with
    ``kwargs``, which can run any code, so it is used only when the user allows it for
    that command.  ``also`` names another way the command allows it (" or give the same --task")."""
    if trusted or not is_custom_task(task):
        return
    source, _, name = task.rpartition(":")
    call = f"{name}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})"
    call = call if len(call) <= 120 else call[:117] + "..."
    raise UntrustedTaskError(f"{origin} names the task {task}: using it would import {source} and call {call}, "
                             f"code named by that file, not by you; if you trust it, add --trust-task{also} "
                             f"(trust_task=True in Python)")


def task_slug(task: str) -> str:
    """A file or directory name for a task: ``gym-Hopper-v5``, ``atari-Pong``,
    ``reach_arm-make_arm`` (a factory: its file or module's last part, and its name)."""
    return registry.suite_for(task).slug(task)


def preset_family(task: str, obs: str = "state") -> str:
    """The preset (``configs/<family>.yaml``) a task trains with: atari, classic (Gymnasium
    classic control), gym_mujoco (Gymnasium's MuJoCo tasks), custom (a factory or another
    gym id), dmc_state or dmc_pixels."""
    return registry.suite_for(task).preset_family(task, obs)


def task_names(pattern: str | None = None) -> list[str]:
    """The listed task names (every registered Gymnasium id is also accepted as gym:<id>),
    optionally filtered by a glob (``walker_*``) or a substring (``pong``)."""
    names = registry.listed_tasks()
    if not pattern:
        return names
    if any(ch in pattern for ch in "*?["):
        return [n for n in names if fnmatch.fnmatch(n.lower(), pattern.lower())]
    return [n for n in names if pattern.lower() in n.lower()]


def validate_task(task: str) -> None:
    """Raises :class:`UnknownTaskError` unless ``task`` names a registered task (for a
    custom task: unless its factory can be found)."""
    registry.validate_task(task)


def make_from_config(env_config: Any, *, seed: int | None = None, mode: str = "train") -> gym.Env:
    """Makes the env an :class:`ez_robot.config.EnvConfig` describes: the suite's env, the
    action mode's wrapper, and (training envs) the training rewards."""
    if mode not in MODES:
        raise ValueError(f"mode must be 'train' or 'eval', got {mode!r}")
    suite = registry.validate_task(env_config.task)
    env = suite.make(env_config, seed=seed, mode=mode)
    env = _action_mode_wrapper(env, env_config)
    if mode == "train" and (env_config.reward_scale != 1.0 or env_config.reward_offset != 0.0):
        env = TrainingReward(env, env_config.reward_scale, env_config.reward_offset)  # evaluation: the task's returns
    env.action_space.seed(seed)
    return env


def _action_mode_wrapper(env: gym.Env, env_config: Any) -> gym.Env:
    space = env.action_space
    if isinstance(space, gym.spaces.Discrete):
        if int(space.start) != 0:
            raise ConfigError(f"{env_config.task} has actions {space} starting at {space.start}; ez-robot's "
                              f"discrete actions start at 0 (a gymnasium ActionWrapper can shift them)")
        return env
    action_bounds(space, env_config.task)  # a clear error for MultiDiscrete, Tuple, unbounded Boxes
    if resolved_action_mode(env_config) == "joint":
        return JointDiscreteActions(env, env_config.bins, env_config.max_discrete_actions)
    return NormalizedActions(env)


def resolved_action_mode(env_config: Any) -> str:
    """The action mode ``env_config.action_mode`` means for its task: ``auto`` becomes joint
    for discrete action spaces and for continuous ones whose bins^dims fits
    ``max_discrete_actions``, gaussian otherwise; discrete action spaces refuse the others."""
    dims = action_dims(env_config.task, env_config.kwargs)  # None: a discrete action space
    if dims is None:
        if env_config.action_mode not in ("auto", "joint"):
            raise ConfigError(f"{env_config.task} has discrete actions: env.action_mode must be joint (or auto), "
                              f"got {env_config.action_mode!r}")
        return "joint"
    if env_config.action_mode != "auto":
        return env_config.action_mode
    return "joint" if env_config.bins ** dims <= env_config.max_discrete_actions else "gaussian"


_ACTION_DIMS: dict = {}


def action_dims(task: str, kwargs: dict | None = None) -> int | None:
    """Dimensions of a task's continuous actions, None for a discrete action space
    (``kwargs``: a factory's or a gym id's keyword arguments).  A suite that cannot tell
    without building the env builds it once per task and kwargs."""
    suite = registry.validate_task(task)
    key = (task, repr(sorted((kwargs or {}).items())))
    if key not in _ACTION_DIMS:
        _ACTION_DIMS[key] = suite.action_dims(task, kwargs or {})
    return _ACTION_DIMS[key]


def control_period(env: gym.Env, env_config: Any) -> float | None:
    """Seconds between two agent decisions in ``env`` (action repeat included), or None
    where the task has no clock: DMControl's control step; a custom env's own
    ``control_period`` (per env step); Gymnasium MuJoCo's ``dt``; CartPole's ``tau``;
    the ALE's 60 frames per second."""
    return registry.suite_of_env(env).control_period(env, env_config)


def render_frame(env: gym.Env) -> np.ndarray:
    """The frame a human would watch, [H, W, 3] uint8: the game screen (Atari), the rendered
    camera (DMControl), or what a Gymnasium env made with ``render_mode="rgb_array"``
    renders (the evaluation envs of ``gym:`` tasks)."""
    return registry.suite_of_env(env).render_frame(env)
