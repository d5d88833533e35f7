"""What the config asks the task registry (:mod:`ez_robot.envs`), in one place.

The dependency runs one way: the config asks the registry for a task's preset family,
its action dimensions (to resolve ``env.action_mode=auto``) and its env; the envs never
import the config.  The registry is imported when first asked rather than with the
config, so that a saved run's or a bundle's config loads where the training extras
(gymnasium, dm_control) are not installed.
"""
from __future__ import annotations

from typing import Any

__all__ = ["task_family", "resolved_action_mode", "absolute_task", "validate_task", "make_from_config"]


def task_family(task: str, obs: str = "state") -> str:
    """The preset a task uses: atari, classic (Gymnasium classic control), gym_mujoco
    (Gymnasium's MuJoCo tasks), custom (a factory or another gym id), dmc_state or
    dmc_pixels: what the task's suite answers."""
    from ez_robot import envs

    return envs.preset_family(task, obs)


def resolved_action_mode(env: Any) -> str:
    """The action mode ``env.action_mode`` (an EnvConfig's) means for its task: ``auto``
    becomes joint for discrete action spaces and for continuous ones whose bins^dims fits
    ``max_discrete_actions``, gaussian otherwise; discrete action spaces refuse the others."""
    from ez_robot import envs

    return envs.resolved_action_mode(env)


def absolute_task(task: str) -> str:
    """A factory file's task with its path made absolute; every other task as it is."""
    from ez_robot.envs.custom import absolute_task as absolute

    return absolute(task)


def validate_task(task: str) -> None:
    """UnknownTaskError (naming the closest names) unless the registry knows ``task``."""
    from ez_robot import envs

    envs.validate_task(task)


def make_from_config(env: Any, *, seed: int | None, mode: str):
    """The env an EnvConfig describes (a ``gymnasium.Env``)."""
    from ez_robot import envs

    return envs.make_from_config(env, seed=seed, mode=mode)
