"""DeepMind Control as a Gymnasium env.

A thin adapter of our own over ``dm_control.suite`` (no Shimmy layer in the step path):

- actions are the task's own Box (its bounds, float32); the action mode's wrapper
  (:mod:`ez_robot.envs.wrappers`: joint bins or a normalized Box) goes on top;
- one agent step repeats the action ``action_repeat`` times and sums the rewards;
- observations are the task's state features flattened to float32, or rendered RGB
  frames (square, channel-first uint8, the last ``frame_stack`` frames stacked);
- suite episodes end by time limit, which is ``truncated`` (value targets keep
  bootstrapping); only a zero discount from the task would be ``terminated``.
"""
from __future__ import annotations

import logging
import os
from collections import deque

# Headless rendering on CPU: EGL works here without OS packages, GLFW needs a display.
# It must be set before dm_control (and so mujoco's GL backend) is imported.
os.environ.setdefault("MUJOCO_GL", "egl")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402


__all__ = ["DMControlEnv"]


class _DropSettotalmass(logging.Filter):
    """Drops MuJoCo's deprecation warning for ``<compiler settotalmass>``.

    dm_control's cheetah model sets it, and MuJoCo 3.x warns once per model load, which
    dm_control forwards to the ``absl`` logger: one line per env built, ~120 in a cheetah
    training log.  The attribute still takes effect; other warnings pass.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return "settotalmass" not in record.getMessage()


logging.getLogger("absl").addFilter(_DropSettotalmass())


class DMControlEnv(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, domain: str, task: str, *, seed: int | None = None, obs: str = "state",
                 action_repeat: int = 1, frame_size: int = 84, frame_stack: int = 3, camera_id: int | None = None,
                 render_size: tuple[int, int] = (240, 320)):
        from dm_control import suite

        self._kwargs = dict(domain=domain, task=task, seed=seed, obs=obs, action_repeat=action_repeat,
                            frame_size=frame_size,
                            frame_stack=frame_stack, camera_id=camera_id, render_size=render_size)
        if obs not in ("state", "pixels"):
            raise ValueError(f"obs must be 'state' or 'pixels', got {obs!r}")
        if action_repeat < 1:
            raise ValueError(f"action_repeat must be >= 1, got {action_repeat}")
        self._env = suite.load(domain, task, task_kwargs={"random": seed})
        spec = self._env.action_spec()
        self.task_name = f"{domain}_{task}"
        self.obs_kind = obs
        self.action_repeat = action_repeat
        self.action_space = gym.spaces.Box(spec.minimum.astype(np.float32).reshape(-1),
                                           spec.maximum.astype(np.float32).reshape(-1), dtype=np.float32, seed=seed)
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
        vector = np.asarray(action, np.float64).reshape(-1)
        if vector.shape != self.action_space.shape or not np.isfinite(vector).all():
            raise ValueError(f"action {action!r} is not a finite vector of shape {self.action_space.shape}")
        vector = np.clip(vector, self.action_space.low, self.action_space.high)
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
