"""``gym:<id>``: any registered Gymnasium env with Discrete or bounded Box actions and Box
or Dict observations: classic control (``gym:CartPole-v1``, ``gym:Pendulum-v1``),
Gymnasium's MuJoCo tasks (``gym:Hopper-v5``), or a user's own registered id.
"""
from __future__ import annotations

import os

import gymnasium as gym

from ez_robot.envs.suite import StateSuite
from ez_robot.errors import ConfigError

__all__ = ["GymSuite", "gym_family", "CLASSIC_TASKS", "MUJOCO_TASKS"]

CLASSIC_TASKS = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1", "MountainCarContinuous-v0")
MUJOCO_TASKS = ("Hopper-v5", "HalfCheetah-v5", "Walker2d-v5", "Ant-v5", "Humanoid-v5", "InvertedPendulum-v5",
                "InvertedDoublePendulum-v5", "Reacher-v5", "Pusher-v5", "Swimmer-v5")
PREFIX = "gym:"


def gym_family(task: str) -> str:
    """The preset family of a ``gym:`` task: classic (classic control), gym_mujoco
    (Gymnasium's MuJoCo tasks) or custom (any other registered id)."""
    entry = getattr(gym.registry.get(task.removeprefix(PREFIX)), "entry_point", "")
    entry = entry if isinstance(entry, str) else getattr(entry, "__module__", "")
    if "classic_control" in entry:
        return "classic"
    if "gymnasium.envs.mujoco" in entry:
        return "gym_mujoco"
    return "custom"


class GymSuite(StateSuite):
    """Registered Gymnasium ids; ``ez-robot tasks`` lists classic control and MuJoCo, and
    every other id in ``gymnasium.registry`` is accepted too."""

    kind = "gym"

    def claims(self, task: str) -> bool:
        return task.startswith(PREFIX)

    def task_names(self) -> list[str]:
        return [f"{PREFIX}{name}" for name in CLASSIC_TASKS + MUJOCO_TASKS]

    def hint_names(self) -> list[str]:
        return [f"{PREFIX}{name}" for name in gym.registry]

    def knows(self, task: str) -> bool:
        return task.removeprefix(PREFIX) in gym.registry

    def preset_family(self, task: str, obs: str) -> str:
        return gym_family(task)

    def base_env(self, task: str, kwargs: dict, *, render: bool) -> gym.Env:
        if render:  # frames for videos (only drawn when asked), off screen: pygame needs no display that way
            os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
            os.environ.setdefault("MUJOCO_GL", "egl")
        try:
            return gym.make(task.removeprefix(PREFIX), render_mode="rgb_array" if render else None, **kwargs)
        except TypeError as error:  # a keyword the env does not take
            raise ConfigError(f"{task} with env.kwargs {kwargs}: {error}") from None
