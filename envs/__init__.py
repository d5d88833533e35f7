"""The task registry (``ez_robot.envs``): every task a user names becomes a Gymnasium 1.x
env with a Discrete action space, or (continuous actions in the sampled action modes) a
normalized Box [-1, 1]^D.

Names:
- ``<domain>_<task>`` for every task of ``dm_control.suite`` (``cartpole_swingup``,
  ``walker_walk``, ``ball_in_cup_catch``);
- ``atari:<Game>`` for every game ale-py ships (``atari:Pong``, ``atari:MsPacman``);
- ``gym:<id>`` for any registered Gymnasium env with Discrete or bounded Box actions and
  Box or Dict observations: classic control (``gym:CartPole-v1``, ``gym:Pendulum-v1``),
  Gymnasium's MuJoCo tasks (``gym:Hopper-v5``), or a user's own registered id;
- ``package.module:factory`` or ``path/to/file.py:factory`` for a user's own env: a
  callable returning a ``gymnasium.Env``, called with ``env.kwargs`` (:mod:`ez_robot.envs.custom`).

Continuous actions are given the action mode's wrapper (:mod:`ez_robot.envs.wrappers`):
joint bins for ``joint``, a normalized Box for the sampled modes; ``gym:`` and custom
observations are flattened to one float32 vector (Dict keys in the space's order).
Terminations (a robot that falls) and truncations (time limits) pass through as the env
reports them.
"""
from __future__ import annotations

import difflib
import fnmatch
import functools
import json
import os

import gymnasium as gym
import numpy as np

from ez_robot.envs.custom import is_custom_task, make_custom
from ez_robot.envs.wrappers import (FlatObservations, JointDiscreteActions, NormalizedActions, RepeatAction,
                                    TrainingReward, action_bounds)
from ez_robot.errors import ConfigError, UnknownTaskError

__all__ = ["make", "make_from_config", "render_frame", "task_names", "action_dims", "task_kind", "task_slug", "gym_family", "control_period",
           "UnknownTaskError", "CLASSIC_TASKS", "MUJOCO_TASKS"]

CLASSIC_TASKS = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1", "MountainCarContinuous-v0")
MUJOCO_TASKS = ("Hopper-v5", "HalfCheetah-v5", "Walker2d-v5", "Ant-v5", "Humanoid-v5", "InvertedPendulum-v5",
                "InvertedDoublePendulum-v5", "Reacher-v5", "Pusher-v5", "Swimmer-v5")
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


def task_kind(task: str) -> str:
    """``atari``, ``gym``, ``custom`` (a factory) or ``dmc``."""
    if task.startswith("atari:"):
        return "atari"
    if task.startswith("gym:"):
        return "gym"
    if is_custom_task(task):
        return "custom"
    return "dmc"


def task_slug(task: str) -> str:
    """A file or directory name for a task: ``gym-Hopper-v5``, ``atari-Pong``,
    ``reach_arm-make_arm`` (a factory: its file or module's last part, and its name)."""
    if is_custom_task(task):
        from ez_robot.envs.custom import split_task

        source, name = split_task(task)
        stem = source.replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".py") if source.endswith(".py") \
            else source.rsplit(".", 1)[-1]
        return f"{stem}-{name}"
    return task.replace(":", "-").replace("/", "-")


def gym_family(task: str) -> str:
    """The preset family of a ``gym:`` task: classic (classic control), gym_mujoco
    (Gymnasium's MuJoCo tasks) or custom (any other registered id)."""
    entry = getattr(gym.registry.get(task[4:]), "entry_point", "")
    entry = entry if isinstance(entry, str) else getattr(entry, "__module__", "")
    if "classic_control" in entry:
        return "classic"
    if "gymnasium.envs.mujoco" in entry:
        return "gym_mujoco"
    return "custom"


def task_names(pattern: str | None = None) -> list[str]:
    """The listed task names (every registered Gymnasium id is also accepted as gym:<id>),
    optionally filtered by a glob (``walker_*``) or a substring (``pong``)."""
    names = sorted(_dmc_tasks()) + list(_atari_tasks()) + [f"gym:{t}" for t in CLASSIC_TASKS + MUJOCO_TASKS]
    if not pattern:
        return names
    if any(ch in pattern for ch in "*?["):
        return [n for n in names if fnmatch.fnmatch(n.lower(), pattern.lower())]
    return [n for n in names if pattern.lower() in n.lower()]


def _unknown(task: str) -> UnknownTaskError:
    names = task_names()
    if task.startswith("gym:"):
        names += [f"gym:{id_}" for id_ in gym.registry]
    by_lower = {n.lower(): n for n in names}
    close = [by_lower[c] for c in difflib.get_close_matches(task.lower(), list(by_lower), n=3, cutoff=0.6)]
    hint = f"; did you mean: {', '.join(close)}?" if close else "; `ez-robot tasks` lists them"
    return UnknownTaskError(f"unknown task {task!r}{hint}")


def make(task: str, *, seed: int | None = None, mode: str = "train", obs: str = "state", **options) -> gym.Env:
    """Makes a task's env with its preset's settings (``configs/``), ``options`` overriding
    any field of :class:`ez_robot.config.EnvConfig` (``action_repeat=2``, ``bins=3``,
    ``kwargs={...}`` for a factory)."""
    from ez_robot.config import EnvConfig, load_config

    validate_task(task)
    unknown = set(options) - {f for f in EnvConfig.__dataclass_fields__}
    if unknown:
        raise TypeError(f"make() got unknown option(s) {sorted(unknown)}; options are EnvConfig fields")
    if "task" in options:
        raise TypeError("make() takes the task as its first argument, not as an option")
    try:  # as --set overrides: the preset's per-mode settings follow the mode the options give
        overrides = [f"env.{key}={json.dumps(value)}" for key, value in options.items()]
    except TypeError as error:
        raise TypeError(f"make() options must be config values (numbers, strings, lists, mappings): {error}") from None
    return make_from_config(load_config(task, obs=obs, overrides=overrides).env, seed=seed, mode=mode)


def validate_task(task: str) -> None:
    """Raises :class:`UnknownTaskError` unless ``task`` names a registered task (for a
    custom task: unless its factory can be found)."""
    kind = task_kind(task)
    if kind == "atari":
        if task not in _atari_tasks():
            raise _unknown(task)
    elif kind == "gym":
        if task[4:] not in gym.registry:
            raise _unknown(task)
    elif kind == "custom":
        from ez_robot.envs.custom import load_factory

        load_factory(task)
    elif task not in _dmc_tasks():
        raise _unknown(task)


def make_from_config(env_config, *, seed: int | None = None, mode: str = "train") -> gym.Env:
    """Makes the env an :class:`ez_robot.config.EnvConfig` describes."""
    if mode not in MODES:
        raise ValueError(f"mode must be 'train' or 'eval', got {mode!r}")
    task = env_config.task
    kind = task_kind(task)
    validate_task(task)
    if kind == "atari":
        from ez_robot.envs.atari import make_atari

        env = make_atari(task[6:], seed=seed, mode=mode, frame_size=env_config.frame_size,
                         frame_stack=env_config.frame_stack, frame_skip=env_config.action_repeat,
                         noop_max=env_config.noop_max, max_episode_frames=env_config.max_episode_frames)
    elif kind == "dmc":
        from ez_robot.envs.dmc import DMControlEnv

        domain, name = _dmc_tasks()[task]
        env = DMControlEnv(domain, name, seed=seed, obs=env_config.obs, action_repeat=env_config.action_repeat,
                           frame_size=env_config.frame_size, frame_stack=env_config.frame_stack)
    else:
        if env_config.obs != "state":
            raise ConfigError(f"{task} has state observations only, got obs={env_config.obs!r}")
        env = _make_base(task, env_config.kwargs, render=mode == "eval")
        env = FlatObservations(env)
        if env_config.action_repeat > 1:
            env = RepeatAction(env, env_config.action_repeat)
    env = _action_mode_wrapper(env, env_config)
    if mode == "train" and (env_config.reward_scale != 1.0 or env_config.reward_offset != 0.0):
        env = TrainingReward(env, env_config.reward_scale, env_config.reward_offset)  # evaluation: the task's returns
    env.action_space.seed(seed)
    return env


def _make_base(task: str, kwargs: dict, *, render: bool) -> gym.Env:
    """The user's or Gymnasium's env, before any of our wrappers."""
    if task_kind(task) == "custom":
        return make_custom(task, kwargs, render=render)
    if render:  # frames for videos (only drawn when asked), off screen: pygame needs no display that way
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        os.environ.setdefault("MUJOCO_GL", "egl")
    try:
        return gym.make(task[4:], render_mode="rgb_array" if render else None, **kwargs)
    except TypeError as error:  # a keyword the env does not take
        raise ConfigError(f"{task} with env.kwargs {kwargs}: {error}") from None


def _action_mode_wrapper(env: gym.Env, env_config) -> gym.Env:
    space = env.action_space
    if isinstance(space, gym.spaces.Discrete):
        if int(space.start) != 0:
            raise ConfigError(f"{env_config.task} has actions {space} starting at {space.start}; ez-robot's "
                              f"discrete actions start at 0 (a gymnasium ActionWrapper can shift them)")
        return env
    from ez_robot.config import resolved_action_mode

    action_bounds(space, env_config.task)  # a clear error for MultiDiscrete, Tuple, unbounded Boxes
    if resolved_action_mode(env_config) == "joint":
        return JointDiscreteActions(env, env_config.bins, env_config.max_discrete_actions)
    return NormalizedActions(env)


_ACTION_DIMS: dict = {}


def action_dims(task: str, kwargs: dict | None = None) -> int | None:
    """Dimensions of a task's continuous actions, None for a discrete action space
    (``kwargs``: a factory's or a gym id's keyword arguments)."""
    validate_task(task)
    kind = task_kind(task)
    if kind == "atari":
        return None
    if kind == "dmc":
        return _domain_action_dims(_dmc_tasks()[task][0])
    key = (task, repr(sorted((kwargs or {}).items())))
    if key not in _ACTION_DIMS:
        env = _make_base(task, kwargs or {}, render=False)
        try:
            space = env.action_space
            if isinstance(space, gym.spaces.Discrete):
                _ACTION_DIMS[key] = None
            else:
                _ACTION_DIMS[key] = len(action_bounds(space, task)[0])
        finally:
            env.close()
    return _ACTION_DIMS[key]


@functools.cache
def _domain_action_dims(domain: str) -> int:
    """The tasks of a dm_control domain share its model, and so its actuators."""
    from dm_control import suite

    name = next(task for d, task in _dmc_tasks().values() if d == domain)
    return int(np.prod(suite.load(domain, name).action_spec().shape))


def control_period(env: gym.Env, env_config) -> float | None:
    """Seconds between two agent decisions in ``env`` (action repeat included), or None
    where the task has no clock: DMControl's control step; a custom env's own
    ``control_period`` (per env step); Gymnasium MuJoCo's ``dt``; CartPole's ``tau``;
    the ALE's 60 frames per second."""
    base = env.unwrapped
    if hasattr(base, "ale"):
        return env_config.action_repeat / 60.0
    if hasattr(base, "control_period") and hasattr(base, "action_repeat"):  # DMControlEnv: repeat included
        return float(base.control_period)
    for name in ("control_period", "dt", "tau"):
        value = getattr(base, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return float(value) * env_config.action_repeat
    return None


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
