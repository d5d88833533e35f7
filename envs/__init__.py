"""The task registry (``ez_robot.envs``): every task a user names becomes a Gymnasium 1.x
env, with a discrete action space, or (DMControl in the sampled action modes) a
normalized Box [-1, 1]^D.

Names:
- ``<domain>_<task>`` for every task of ``dm_control.suite`` (``cartpole_swingup``,
  ``walker_walk``, ``ball_in_cup_catch``);
- ``atari:<Game>`` for every game ale-py ships (``atari:Pong``, ``atari:MsPacman``);
- ``gym:<id>`` for Gymnasium classic control with discrete actions (``gym:CartPole-v1``).
"""
from __future__ import annotations

import dataclasses
import difflib
import os
import fnmatch
import functools

import gymnasium as gym

from ez_robot.errors import ConfigError, UnknownTaskError

__all__ = ["make", "make_from_config", "render_frame", "task_names", "action_dims", "UnknownTaskError", "CLASSIC_TASKS"]

CLASSIC_TASKS = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0")
MODES = ("train", "eval")


@functools.cache
def _dmc_tasks() -> dict[str, tuple[str, str]]:
    from ez_robot.envs import dmc  # noqa: F401  (sets MUJOCO_GL before dm_control loads)
    from dm_control import suite

    return {f"{domain}_{task}": (domain, task) for domain, task in suite.ALL_TASKS}


@functools.cache
def _atari_tasks() -> tuple[str, ...]:
    from ez_robot.envs.atari import atari_games

    return tuple(f"atari:{game}" for game in atari_games())


def task_names(pattern: str | None = None) -> list[str]:
    """All task names, optionally filtered by a glob (``walker_*``) or a substring (``pong``)."""
    names = sorted(_dmc_tasks()) + list(_atari_tasks()) + [f"gym:{t}" for t in CLASSIC_TASKS]
    if not pattern:
        return names
    if any(ch in pattern for ch in "*?["):
        return [n for n in names if fnmatch.fnmatch(n.lower(), pattern.lower())]
    return [n for n in names if pattern.lower() in n.lower()]


def _unknown(task: str) -> UnknownTaskError:
    names = task_names()
    by_lower = {n.lower(): n for n in names}
    close = [by_lower[c] for c in difflib.get_close_matches(task.lower(), list(by_lower), n=3, cutoff=0.6)]
    hint = f"; did you mean: {', '.join(close)}?" if close else "; `ez-robot tasks` lists them"
    return UnknownTaskError(f"unknown task {task!r}{hint}")


def make(task: str, *, seed: int | None = None, mode: str = "train", obs: str = "state", **options) -> gym.Env:
    """Makes a task's env with its preset's settings (``configs/``), ``options`` overriding
    any field of :class:`ez_robot.config.EnvConfig` (``action_repeat=2``, ``bins=3``)."""
    from ez_robot.config import EnvConfig, load_config

    validate_task(task)
    env_config = load_config(task, obs=obs).env
    unknown = set(options) - {f for f in EnvConfig.__dataclass_fields__}
    if unknown:
        raise TypeError(f"make() got unknown option(s) {sorted(unknown)}; options are EnvConfig fields")
    options.setdefault("action_mode", "auto")  # decided again with the options (bins=3 may fit joint)
    return make_from_config(dataclasses.replace(env_config, **options), seed=seed, mode=mode)


def validate_task(task: str) -> None:
    """Raises :class:`UnknownTaskError` unless ``task`` names a registered task."""
    if task.startswith("atari:"):
        if task not in _atari_tasks():
            raise _unknown(task)
    elif task.startswith("gym:"):
        if task[4:] not in CLASSIC_TASKS:
            raise _unknown(task)
    elif task not in _dmc_tasks():
        raise _unknown(task)


def make_from_config(env_config, *, seed: int | None = None, mode: str = "train") -> gym.Env:
    """Makes the env an :class:`ez_robot.config.EnvConfig` describes."""
    if mode not in MODES:
        raise ValueError(f"mode must be 'train' or 'eval', got {mode!r}")
    task = env_config.task
    validate_task(task)
    if task.startswith("atari:"):
        from ez_robot.envs.atari import make_atari

        return make_atari(task[6:], seed=seed, mode=mode, frame_size=env_config.frame_size,
                          frame_stack=env_config.frame_stack, frame_skip=env_config.action_repeat,
                          noop_max=env_config.noop_max, max_episode_frames=env_config.max_episode_frames)
    if task.startswith("gym:"):
        if env_config.obs != "state":
            raise ConfigError(f"{task} has state observations only, got obs={env_config.obs!r}")
        # evaluation renders frames for videos (only when asked: render_mode alone draws nothing),
        # off screen: pygame needs no display that way
        if mode == "eval":
            os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        env = gym.make(task[4:], render_mode="rgb_array" if mode == "eval" else None)
        env.action_space.seed(seed)
        return env
    from ez_robot.envs.dmc import DMControlEnv

    from ez_robot.config import resolved_action_mode

    domain, name = _dmc_tasks()[task]
    continuous = resolved_action_mode(env_config) != "joint"
    return DMControlEnv(domain, name, seed=seed, obs=env_config.obs, action_repeat=env_config.action_repeat,
                        continuous=continuous, bins=env_config.bins, max_discrete_actions=env_config.max_discrete_actions,
                        frame_size=env_config.frame_size, frame_stack=env_config.frame_stack)


@functools.cache
def action_dims(task: str) -> int | None:
    """Dimensions of a task's continuous actions, None for a discrete action space."""
    validate_task(task)
    if task.startswith(("atari:", "gym:")):
        return None
    return _domain_action_dims(_dmc_tasks()[task][0])


@functools.cache
def _domain_action_dims(domain: str) -> int:
    """The tasks of a dm_control domain share its model, and so its actuators."""
    import numpy as np
    from dm_control import suite

    name = next(task for d, task in _dmc_tasks().values() if d == domain)
    return int(np.prod(suite.load(domain, name).action_spec().shape))


def render_frame(env):
    """The frame a human would watch, [H, W, 3] uint8: the game screen (Atari), the rendered
    camera (DMControl), or what a Gymnasium env made with ``render_mode="rgb_array"``
    renders (the evaluation envs of ``gym:`` tasks)."""
    import numpy as np

    base = env.unwrapped
    if hasattr(base, "ale"):
        return base.ale.getScreenRGB()
    if getattr(env, "render_mode", None) == "rgb_array" or getattr(base, "render_mode", None) == "rgb_array":
        frame = env.render()
        if isinstance(frame, np.ndarray) and frame.ndim == 3:
            return frame
    raise ConfigError(f"{env.spec.id if env.spec else type(base).__name__} has no renderer ez-robot can record: "
                      "videos need an env that renders rgb_array frames")
