"""DeepMind Control as a Gymnasium env.

A thin adapter of our own over ``dm_control.suite`` (no Shimmy layer in the step path):

- actions are the task's own Box (its bounds, float32); the action mode's wrapper
  (:mod:`ez_robot.envs.wrappers`: joint bins or a normalized Box) goes on top;
- one agent step repeats the action ``action_repeat`` times and sums the rewards;
- observations are the task's state features flattened to float32, or rendered RGB
  frames (square, channel-first uint8, the last ``frame_stack`` frames stacked);
- suite episodes end by time limit, which is ``truncated`` (value targets keep
  bootstrapping); only a zero discount from the task would be ``terminated``.

:class:`DMControlSuite` is the registry's suite of these tasks (``<domain>_<task>``).
"""
from __future__ import annotations

import functools
import logging
import os
from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np

from ez_robot.envs.suite import Suite

__all__ = ["DMControlEnv", "DMControlSuite", "dmc_tasks"]


def _dm_control_suite():
    """``dm_control.suite``, with headless rendering chosen first: EGL works on a CPU
    without OS packages, GLFW needs a display, and dm_control (and so mujoco's GL backend)
    reads ``MUJOCO_GL`` when it is imported."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    from dm_control import suite

    return suite


@functools.cache
def dmc_tasks() -> dict[str, tuple[str, str]]:
    """Every task of ``dm_control.suite`` by its ez-robot name: ``{"walker_walk": ("walker", "walk")}``."""
    return {f"{domain}_{task}": (domain, task) for domain, task in _dm_control_suite().ALL_TASKS}


@functools.cache
def _domain_action_dims(domain: str) -> int:
    """The tasks of a dm_control domain share its model, and so its actuators."""
    name = next(task for d, task in dmc_tasks().values() if d == domain)
    return int(np.prod(_dm_control_suite().load(domain, name).action_spec().shape))


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
        suite = _dm_control_suite()
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


class DMControlSuite(Suite):
    """``<domain>_<task>``: every task of ``dm_control.suite`` (``cartpole_swingup``,
    ``ball_in_cup_catch``), from states (preset ``dmc_state``) or pixels (``dmc_pixels``)."""

    kind = "dmc"

    def claims(self, task: str) -> bool:
        return ":" not in task

    def task_names(self) -> list[str]:
        return sorted(dmc_tasks())

    def knows(self, task: str) -> bool:
        return task in dmc_tasks()

    def preset_family(self, task: str, obs: str) -> str:
        return "dmc_pixels" if obs == "pixels" else "dmc_state"

    def make(self, env_config: Any, *, seed: int | None, mode: str) -> gym.Env:
        domain, name = dmc_tasks()[env_config.task]
        return DMControlEnv(domain, name, seed=seed, obs=env_config.obs, action_repeat=env_config.action_repeat,
                            frame_size=env_config.frame_size, frame_stack=env_config.frame_stack)

    def action_dims(self, task: str, kwargs: dict) -> int | None:
        return _domain_action_dims(dmc_tasks()[task][0])

    def made(self, env: gym.Env) -> bool:
        return isinstance(env.unwrapped, DMControlEnv)

    def control_period(self, env: gym.Env, env_config: Any) -> float | None:
        return float(env.unwrapped.control_period)  # the simulator's control step, action repeat included
