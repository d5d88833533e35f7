"""Small user-style envs for the custom-task tests (``tests.custom_envs:make_point``)."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class PointEnv(gym.Env):
    """A point on a plane driven towards a goal: Dict observations in millimetres (large
    values, for the normalizer), actions in [-2, 2]^2 (not [-1, 1], for the bounds map)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, horizon: int = 20, scale: float = 1000.0, render_mode: str | None = None):
        self.horizon, self.scale, self.render_mode = horizon, scale, render_mode
        box = spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.observation_space = spaces.Dict({"position": box, "goal": box})
        self.action_space = spaces.Box(-2.0, 2.0, (2,), np.float32)
        self.control_period = 0.1

    def _obs(self):
        return {"position": (self.position * self.scale).astype(np.float32),
                "goal": (self.goal * self.scale).astype(np.float32)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = self.np_random.uniform(-1, 1, 2)
        self.goal = self.np_random.uniform(-1, 1, 2)
        self.steps = 0
        return self._obs(), {}

    def step(self, action):
        self.position = np.clip(self.position + 0.1 * np.asarray(action, np.float64), -1.5, 1.5)
        self.steps += 1
        distance = float(np.linalg.norm(self.position - self.goal))
        return self._obs(), -distance, False, self.steps >= self.horizon, {"is_success": distance < 0.1}

    def render(self):
        frame = np.zeros((32, 32, 3), np.uint8)
        x, y = ((self.position + 1.5) / 3 * 31).astype(int)
        frame[y, x] = 255
        return frame


def make_point(horizon: int = 20, scale: float = 1000.0, render_mode: str | None = None) -> PointEnv:
    return PointEnv(horizon, scale, render_mode)


def make_raises():
    raise RuntimeError("the robot is not connected")


def make_not_an_env():
    return {"not": "an env"}


class _ShapeChanger(PointEnv):
    def _obs(self):
        obs = super()._obs()
        if getattr(self, "steps", 0) >= 3:
            obs["goal"] = np.zeros(3, np.float32)
        return obs


def make_shape_changer():
    return _ShapeChanger()


def make_multidiscrete():
    env = PointEnv()
    env.action_space = spaces.MultiDiscrete([3, 3])
    return env


def make_unbounded():
    env = PointEnv()
    env.action_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)
    return env


def make_tuple_observations():
    env = PointEnv()
    env.observation_space = spaces.Tuple((spaces.Discrete(2), spaces.Discrete(3)))
    return env


class _FaultyPoint(PointEnv):
    """A PointEnv whose simulator raises at step ``fail_at`` of an episode: of every episode,
    or only of those reset with a seed in ``fail_seeds`` (evaluation's seeds, say)."""

    def __init__(self, fail_at: int, fail_seeds, horizon: int):
        super().__init__(horizon)
        self.fail_at, self.fail_seeds, self.failing = fail_at, fail_seeds, False

    def reset(self, *, seed=None, options=None):
        self.failing = self.fail_seeds is None or seed in self.fail_seeds
        return super().reset(seed=seed, options=options)

    def step(self, action):
        if self.failing and self.steps + 1 == self.fail_at:
            raise RuntimeError("the motor driver stopped answering")
        return super().step(action)


def make_faulty_point(fail_at: int = 3, fail_seeds: list | None = None, horizon: int = 10) -> PointEnv:
    return _FaultyPoint(fail_at, fail_seeds, horizon)


class _BadValuePoint(PointEnv):
    """A PointEnv that returns ``value`` (nan, inf) at step ``at_step`` of its first episode,
    in its reward or in the observation's ``goal[1]``."""

    def __init__(self, field: str, at_step: int, value: float, horizon: int):
        super().__init__(horizon)
        self.field, self.at_step, self.value, self.episodes = field, at_step, value, 0

    def reset(self, *, seed=None, options=None):
        self.episodes += 1
        return super().reset(seed=seed, options=options)

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        if self.episodes == 1 and self.steps == self.at_step:
            if self.field == "reward":
                reward = self.value
            else:
                obs["goal"][1] = self.value
        return obs, reward, terminated, truncated, info


def make_bad_value_point(field: str = "observation", at_step: int = 4, value: float = float("nan"),
                         horizon: int = 10) -> PointEnv:
    return _BadValuePoint(field, at_step, float(value), horizon)
