"""Gymnasium wrappers that give any env the spaces ez-robot trains on.  Each works on its
own, on any Gymnasium env, and takes its bounds from the env's Box action space.

Actions, one wrapper per action mode (``env.action_mode``):

- :class:`JointDiscreteActions` (joint, the paper's DMC setting): ``bins`` evenly spaced
  values per dimension, both bounds included; the action space is the product,
  ``Discrete(bins ** D)``; index i stands for row i of ``action_table``;
- :class:`NormalizedActions` (gaussian and factorized, the sampled modes): ``Box(-1, 1, (D,))``
  mapped linearly onto the bounds, values outside clipped.  The factorized mode's
  per-dimension grid lies inside this box (its policy picks the grid values);
- :class:`FactorizedActions` (the factorized mode as its own space, for other tools):
  ``MultiDiscrete([bins] * D)``, index k of dimension d is ``values_per_dim[d, k]``.

An action Box of any shape is flattened to D = its size, row-major, and reshaped back on
the way to the env.

:class:`RepeatAction` holds each action for ``repeat`` env steps (``env.action_repeat``).

Observations: :class:`FlatObservations` turns a Box of any shape, or a Dict of them,
into one float32 vector.  The order is Gymnasium's ``spaces.flatten``: a Dict's keys in
the order of the space (a Dict made from a plain ``dict`` sorts its keys), each value
flattened row-major; nested Dicts the same way, Discrete values one-hot.  The wrapper
checks every observation against the space and raises
:class:`ez_robot.errors.ObservationError` when one changes shape.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ez_robot.errors import ConfigError, ObservationError

__all__ = ["JointDiscreteActions", "NormalizedActions", "FactorizedActions", "FlatObservations", "RepeatAction",
           "TrainingReward", "TASK_REWARD",
           "discrete_action_table", "action_bounds", "observation_layout", "find_wrapper"]


def discrete_action_table(low: np.ndarray, high: np.ndarray, bins: int) -> np.ndarray:
    """[bins^d, d] float64: row i is the continuous action of discrete index i.

    The index is read as a base-``bins`` number whose first digit is dimension 0.
    """
    low, high = np.asarray(low, np.float64), np.asarray(high, np.float64)
    values = np.linspace(low, high, bins, axis=1)  # [d, bins], both bounds included
    digits = np.indices((bins,) * len(low)).reshape(len(low), -1)  # [d, bins^d]
    return values[np.arange(len(low))[:, None], digits].T


def action_bounds(space: gym.Space, what: str = "the env") -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of a Box action space, flattened to [D] float64; a clear error for an
    action space the continuous wrappers cannot take."""
    if not isinstance(space, spaces.Box):
        raise ConfigError(f"{what} has actions {space}: ez-robot trains on Discrete actions or a bounded Box "
                          f"(MultiDiscrete, Tuple and Dict actions are not supported; a wrapper can map them "
                          f"onto one of these)")
    low, high = space.low.astype(np.float64).reshape(-1), space.high.astype(np.float64).reshape(-1)
    if low.size == 0:
        raise ConfigError(f"{what} has an empty action Box {space}")
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        raise ConfigError(f"{what} has unbounded actions {space}: the action modes map onto the bounds, so every "
                          f"dimension needs a finite low and high (a RescaleAction or ClipAction wrapper can "
                          f"give them)")
    if (high <= low).any():
        raise ConfigError(f"{what} has an action Box whose high is not above its low in every dimension: {space}")
    return low, high


class _BoxActions(gym.ActionWrapper, gym.utils.RecordConstructorArgs):
    """Common part of the action wrappers: the wrapped Box's bounds, flattened."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.action_low, self.action_high = action_bounds(env.action_space, _name(env))
        self._inner = env.action_space

    def _to_inner(self, vector: np.ndarray):
        return np.clip(vector, self.action_low, self.action_high).reshape(self._inner.shape).astype(self._inner.dtype)


class JointDiscreteActions(_BoxActions):
    """A Box of D dimensions as ``Discrete(bins ** D)``: ``bins`` evenly spaced values per
    dimension (both bounds included), every combination one action.  Refuses more than
    ``max_actions`` joint actions, with the way out in the message."""

    def __init__(self, env: gym.Env, bins: int = 5, max_actions: int = 1024):
        gym.utils.RecordConstructorArgs.__init__(self, bins=bins, max_actions=max_actions)
        super().__init__(env)
        if bins < 2:
            raise ConfigError(f"bins must be >= 2 (both action bounds are included), got {bins}")
        dims = len(self.action_low)
        if bins ** dims > max_actions:
            raise ConfigError(
                f"{_name(env)} has {dims} action dimensions: {bins} bins each make {bins}^{dims} = "
                f"{bins ** dims:,} discrete actions, above the limit of {max_actions:,}. Lower env.bins or raise "
                f"env.max_discrete_actions, or search sampled actions: --set env.action_mode=gaussian "
                f"(or factorized).")
        self.bins = bins
        self.action_table = discrete_action_table(self.action_low, self.action_high, bins)
        self.action_space = spaces.Discrete(len(self.action_table))

    def action(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        return self._to_inner(self.action_table[int(action)])


class NormalizedActions(_BoxActions):
    """A Box as ``Box(-1, 1, (D,), float32)``: -1 and 1 are the bounds in every dimension,
    the map is linear, values outside [-1, 1] are clipped."""

    def __init__(self, env: gym.Env):
        gym.utils.RecordConstructorArgs.__init__(self)
        super().__init__(env)
        dims = len(self.action_low)
        self.action_space = spaces.Box(-1.0, 1.0, (dims,), np.float32)

    def action(self, action):
        normalized = np.asarray(action, np.float64).reshape(-1)
        if normalized.shape != self.action_space.shape or not np.isfinite(normalized).all():
            raise ValueError(f"action {action!r} is not a finite vector of shape {self.action_space.shape}")
        normalized = np.clip(normalized, -1.0, 1.0)
        return self._to_inner(self.action_low + (normalized + 1.0) * 0.5 * (self.action_high - self.action_low))


class FactorizedActions(_BoxActions):
    """A Box as ``MultiDiscrete([bins] * D)``: each dimension its own choice of ``bins``
    evenly spaced values (both bounds included), ``values_per_dim`` [D, bins]."""

    def __init__(self, env: gym.Env, bins: int = 11):
        gym.utils.RecordConstructorArgs.__init__(self, bins=bins)
        super().__init__(env)
        if bins < 2:
            raise ConfigError(f"bins must be >= 2 (both action bounds are included), got {bins}")
        self.bins = bins
        self.values_per_dim = np.linspace(self.action_low, self.action_high, bins, axis=1)
        self.action_space = spaces.MultiDiscrete([bins] * len(self.action_low))

    def action(self, action):
        indices = np.asarray(action)
        if not self.action_space.contains(indices.astype(self.action_space.dtype, copy=False)) \
                or not np.issubdtype(indices.dtype, np.integer):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        return self._to_inner(self.values_per_dim[np.arange(len(indices)), indices])


class FlatObservations(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """A Box of any shape or a Dict of them as one float32 vector (Gymnasium's flatten
    order, see the module docstring); each observation is checked against the space."""

    def __init__(self, env: gym.Env):
        gym.utils.RecordConstructorArgs.__init__(self)
        super().__init__(env)
        space = env.observation_space
        _check_observation_space(space, _name(env))
        self.raw_observation_space = space  # the env's own space, before flattening
        flat = spaces.flatten_space(space)
        self.observation_space = spaces.Box(flat.low.astype(np.float32), flat.high.astype(np.float32),
                                            dtype=np.float32)

    def observation(self, observation):
        return flatten_observation(self.raw_observation_space, observation, _name(self.env))


class RepeatAction(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Each action held for ``repeat`` steps of the wrapped env, rewards summed; stops
    early when the episode ends.  ``info["env_frames"]`` counts the steps taken."""

    def __init__(self, env: gym.Env, repeat: int):
        gym.utils.RecordConstructorArgs.__init__(self, repeat=repeat)
        super().__init__(env)
        if repeat < 1:
            raise ConfigError(f"action_repeat must be >= 1, got {repeat}")
        self.repeat = repeat

    def step(self, action):
        total = 0.0
        for frames in range(1, self.repeat + 1):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        return obs, total, terminated, truncated, {**info, "env_frames": frames}


TASK_REWARD = "task_reward"
"""The ``info`` key where :class:`TrainingReward` keeps the task's own reward."""


class TrainingReward(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Training rewards, ``scale * (reward + offset * steps)`` with ``steps`` the simulator
    steps the decision took (``info["env_frames"]``, 1 where the env does not report them):
    ``env.reward_scale`` and ``env.reward_offset``, training envs only.  The task's own
    reward goes on in ``info[TASK_REWARD]``, so training returns are logged in the task's units."""

    def __init__(self, env: gym.Env, scale: float = 1.0, offset: float = 0.0):
        gym.utils.RecordConstructorArgs.__init__(self, scale=scale, offset=offset)
        super().__init__(env)
        self.scale, self.offset = float(scale), float(offset)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        steps = info.get("env_frames", 1)
        info = {**info, TASK_REWARD: float(reward)}
        return obs, self.scale * (float(reward) + self.offset * steps), terminated, truncated, info


def flatten_observation(space: gym.Space, observation, what: str = "the env") -> np.ndarray:
    """One raw observation of ``space`` as the float32 vector :class:`FlatObservations` gives."""
    _check_observation(space, observation, what, "observation")
    return np.asarray(spaces.flatten(space, observation), np.float32)


def observation_layout(space: gym.Space, prefix: str = "") -> list[dict]:
    """Where each part of a raw observation lands in the flat vector: ``[{"key", "shape",
    "start", "size"}]`` in order (one entry, key "", for a Box); a Discrete part is one-hot
    (``one_hot_start``: the value of its first slot)."""
    layout: list[dict] = []

    def walk(sub, key):
        if isinstance(sub, spaces.Dict):
            for name, inner in sub.spaces.items():
                walk(inner, f"{key}.{name}" if key else name)
        else:
            size = int(spaces.flatdim(sub))
            start = layout[-1]["start"] + layout[-1]["size"] if layout else 0
            entry = {"key": key, "shape": list(sub.shape), "start": start, "size": size}
            if isinstance(sub, spaces.Discrete):  # one-hot over n values counted from start
                entry.update(shape=[], one_hot_start=int(sub.start))
            layout.append(entry)

    walk(space, prefix)
    return layout


def _check_observation_space(space: gym.Space, what: str) -> None:
    if isinstance(space, spaces.Dict):
        for key, inner in space.spaces.items():
            _check_observation_space(inner, f"{what}'s observation {key!r}")
        return
    if isinstance(space, spaces.Discrete):
        return
    if not isinstance(space, spaces.Box):
        raise ConfigError(f"{what} has observations {space}: ez-robot takes a Box or a Dict of Boxes "
                          f"(Tuple, Sequence, Graph and Text observations are not supported)")
    if space.dtype == np.uint8 and len(space.shape) == 3:
        raise ConfigError(f"{what} has image observations {space}: the gym: and custom tasks train on state "
                          f"vectors; pixels are for DMControl (--obs pixels) and Atari")


def _check_observation(space: gym.Space, value, what: str, key: str) -> None:
    if isinstance(space, spaces.Dict):
        if not isinstance(value, dict) or set(value) != set(space.spaces):
            got = sorted(value) if isinstance(value, dict) else type(value).__name__
            raise ObservationError(f"{what} gave a {key} that does not match its Dict space: keys "
                                   f"{sorted(space.spaces)} expected, got {got}")
        for name, inner in space.spaces.items():
            _check_observation(inner, value[name], what, f"{key}[{name!r}]")
    elif isinstance(space, spaces.Box):
        shape = np.shape(value)
        if shape != space.shape:
            raise ObservationError(f"{what} gave a {key} of shape {shape}, but its observation space says "
                                   f"{space.shape}; observations must keep one shape")


def find_wrapper(env: gym.Env, kind: type | tuple[type, ...]) -> gym.Wrapper | None:
    """The outermost wrapper of type ``kind`` (or one of the types) in ``env``'s stack
    (None if there is none)."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, kind):
            return env
        env = env.env
    return None


def _name(env: gym.Env) -> str:
    spec = getattr(env, "spec", None)
    return spec.id if spec is not None and spec.id else type(env.unwrapped).__name__
