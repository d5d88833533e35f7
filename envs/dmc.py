"""DeepMind Control as a Gymnasium env.

A thin adapter of our own over ``dm_control.suite`` (no Shimmy layer in the step path):

- joint discrete actions (the paper): each of the d action dimensions is split into K
  evenly spaced values spanning its bounds, both ends included; the discrete action space
  is the product, K^d, and an index maps to its vector through a precomputed [K^d, d]
  table;
- continuous actions (``continuous=True``, for the sampled action modes): a Box [-1, 1]^d
  mapped linearly onto the task's bounds (values outside are clipped);
- one agent step repeats the action ``action_repeat`` times and sums the rewards;
- observations are the task's state features flattened to float32, or rendered RGB
  frames (square, channel-first uint8, the last ``frame_stack`` frames stacked);
- suite episodes end by time limit, which is ``truncated`` (value targets keep
  bootstrapping); only a zero discount from the task would be ``terminated``.
"""
from __future__ import annotations

import os
from collections import deque

# Headless rendering on CPU: EGL works here without OS packages, GLFW needs a display.
# It must be set before dm_control (and so mujoco's GL backend) is imported.
os.environ.setdefault("MUJOCO_GL", "egl")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

from ez_robot.errors import ConfigError  # noqa: E402

__all__ = ["DMControlEnv", "discrete_action_table"]


def discrete_action_table(low: np.ndarray, high: np.ndarray, bins: int) -> np.ndarray:
    """[bins^d, d] float64: row i is the continuous action of discrete index i.

    The index is read as a base-``bins`` number whose first digit is dimension 0.
    """
    low, high = np.asarray(low, np.float64), np.asarray(high, np.float64)
    values = np.linspace(low, high, bins, axis=1)  # [d, bins], both bounds included
    digits = np.indices((bins,) * len(low)).reshape(len(low), -1)  # [d, bins^d]
    return values[np.arange(len(low))[:, None], digits].T


class DMControlEnv(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, domain: str, task: str, *, seed: int | None = None, obs: str = "state",
                 action_repeat: int = 1, continuous: bool = False, bins: int = 5, max_discrete_actions: int = 1024,
                 frame_size: int = 84, frame_stack: int = 3, camera_id: int | None = None,
                 render_size: tuple[int, int] = (240, 320)):
        from dm_control import suite

        self._kwargs = dict(domain=domain, task=task, seed=seed, obs=obs, action_repeat=action_repeat,
                            continuous=continuous, bins=bins,
                            max_discrete_actions=max_discrete_actions, frame_size=frame_size,
                            frame_stack=frame_stack, camera_id=camera_id, render_size=render_size)
        if obs not in ("state", "pixels"):
            raise ValueError(f"obs must be 'state' or 'pixels', got {obs!r}")
        if action_repeat < 1:
            raise ValueError(f"action_repeat must be >= 1, got {action_repeat}")
        if bins < 2:
            raise ValueError(f"bins must be >= 2 (both action bounds are included), got {bins}")
        self._env = suite.load(domain, task, task_kwargs={"random": seed})
        spec = self._env.action_spec()
        dims = int(np.prod(spec.shape))
        if not continuous and bins ** dims > max_discrete_actions:
            raise ConfigError(
                f"{domain}_{task} has {dims} action dimensions: {bins} bins each make {bins}^{dims} = "
                f"{bins ** dims:,} discrete actions, above the limit of {max_discrete_actions:,}. "
                f"Lower env.bins or raise env.max_discrete_actions, or search sampled actions: "
                f"--set env.action_mode=gaussian (or factorized).")
        self.task_name = f"{domain}_{task}"
        self.obs_kind = obs
        self.action_repeat = action_repeat
        self.bins = bins
        self.action_low = spec.minimum.astype(np.float64).reshape(-1)
        self.action_high = spec.maximum.astype(np.float64).reshape(-1)
        self.continuous = continuous
        if continuous:  # normalized: [-1, 1] maps linearly onto [low, high] in every dimension
            self.action_table = None
            self.action_space = gym.spaces.Box(-1.0, 1.0, (dims,), np.float32, seed=seed)
        else:
            self.action_table = discrete_action_table(self.action_low, self.action_high, bins)
            self.action_space = gym.spaces.Discrete(len(self.action_table), seed=seed)
        self.render_mode = "rgb_array"
        self._camera_id = camera_id if camera_id is not None else (2 if domain == "quadruped" else 0)
        self._render_size = render_size
        self._frame_size = frame_size
        self._frames: deque = deque(maxlen=frame_stack)
        # Shadows dominate CPU rendering time (~4x); the agent does not need them.
        self._env.physics.model.vis.quality.shadowsize = 0
        self._env.physics.model.vis.quality.offsamples = 0
        if obs == "state":
            size = sum(int(np.prod(s.shape)) for s in self._env.observation_spec().values())
            self.observation_space = gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)
        else:
            self.observation_space = gym.spaces.Box(0, 255, (3 * frame_stack, frame_size, frame_size), np.uint8)

    @property
    def control_period(self) -> float:
        """Seconds of simulated time between two agent decisions."""
        return float(self._env.control_timestep()) * self.action_repeat

    def continuous_action(self, action) -> np.ndarray:
        """The simulator's action vector for an agent action: a discrete index (joint), or
        a normalized vector in [-1, 1]^D (continuous)."""
        if self.continuous:
            normalized = np.clip(np.asarray(action, np.float64).reshape(-1), -1.0, 1.0)
            return self.action_low + (normalized + 1.0) * 0.5 * (self.action_high - self.action_low)
        return self.action_table[int(action)]

    def _observe(self, time_step, first: bool) -> np.ndarray:
        if self.obs_kind == "state":
            return np.concatenate([np.asarray(v, np.float32).reshape(-1) for v in time_step.observation.values()])
        frame = self._env.physics.render(self._frame_size, self._frame_size, camera_id=self._camera_id)
        frame = np.ascontiguousarray(frame.transpose(2, 0, 1))
        if first:
            self._frames.extend([frame] * self._frames.maxlen)
        else:
            self._frames.append(frame)
        return np.concatenate(self._frames, axis=0)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self._env.task.random.seed(seed)
            self.action_space.seed(seed)
        time_step = self._env.reset()
        return self._observe(time_step, first=True), {}

    def step(self, action):
        if self.continuous:
            action = np.asarray(action, np.float32)
            if action.shape != self.action_space.shape or not np.isfinite(action).all():
                raise ValueError(f"action {action!r} is not a finite vector of shape {self.action_space.shape}")
        elif not self.action_space.contains(action):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        vector = self.continuous_action(action)
        reward, frames = 0.0, 0
        for _ in range(self.action_repeat):
            time_step = self._env.step(vector)
            reward += time_step.reward or 0.0
            frames += 1
            if time_step.last():
                break
        terminated = bool(time_step.last() and time_step.discount == 0.0)
        truncated = bool(time_step.last() and not terminated)
        return self._observe(time_step, first=False), reward, terminated, truncated, {"env_frames": frames}

    def render(self):
        height, width = self._render_size
        return self._env.physics.render(height, width, camera_id=self._camera_id)

    def __reduce__(self):
        # Ray ships envs by pickling: send the recipe, and build a fresh simulator there.
        return _rebuild, (self._kwargs,)


def _rebuild(kwargs: dict) -> DMControlEnv:
    return DMControlEnv(**kwargs)
