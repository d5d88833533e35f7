"""The objects of a run, built from its config in one place (as Acme's builders do):
both trainers and every Ray worker make their envs, networks, actor, learner and replay
here, so that they are the same objects wherever they run.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ez_robot.actor import Actor
from ez_robot.config import Config, resolved_action_mode, search_config
from ez_robot.learner import Learner
from ez_robot.networks import EfficientZeroNet, make_network
from ez_robot.action_modes import ActionSpec
from ez_robot.replay import ReplayBuffer
from ez_robot.schedules import total_train_steps

__all__ = ["EnvSpec", "env_spec", "make_model", "make_envs", "make_actor", "make_learner", "make_replay"]


@dataclass(frozen=True)
class EnvSpec:
    """What the networks need to know of a task's envs."""

    obs_shape: tuple
    action: ActionSpec

    @property
    def num_actions(self) -> int:
        """Joint mode: A; the sampled modes: candidates are drawn, there is no fixed A (0)."""
        return self.action.num_actions

    @classmethod
    def of(cls, env, env_config) -> "EnvSpec":
        """The spec of ``env`` (a Discrete action space: joint; a Box: ``env_config``'s mode)."""
        space = env.action_space
        if hasattr(space, "n"):
            action = ActionSpec("joint", num_actions=int(space.n))
        else:
            mode = resolved_action_mode(env_config)
            action = ActionSpec(mode, dims=int(np.prod(space.shape)),
                                bins=env_config.factorized_bins if mode == "factorized" else 0)
        return cls(tuple(env.observation_space.shape), action)

    def state_dict(self) -> dict:
        return {"obs_shape": list(self.obs_shape), "num_actions": self.action.num_actions,
                "action": self.action.state_dict()}

    @classmethod
    def from_state_dict(cls, state: dict) -> "EnvSpec":
        action = ActionSpec.from_state_dict(state["action"]) if "action" in state else \
            ActionSpec("joint", num_actions=int(state["num_actions"]))  # checkpoints before the sampled modes
        return cls(tuple(int(n) for n in state["obs_shape"]), action)


def env_spec(config: Config) -> EnvSpec:
    """The spec of the task's envs (makes one and closes it)."""
    from ez_robot.envs import make_from_config

    env = make_from_config(config.env, seed=config.seed, mode="train")
    try:
        return EnvSpec.of(env, config.env)
    finally:
        env.close()


def make_model(config: Config, spec: EnvSpec) -> EfficientZeroNet:
    """A freshly initialized network for the run (seed torch first for a reproducible one)."""
    return make_network(spec.obs_shape, spec.action, config.model, value_prefix=config.train.value_prefix)


def make_envs(config: Config, seed: int, count: int) -> list:
    """``count`` training envs seeded ``seed, seed + 1, ...``, each made again when it
    raises (:class:`ez_robot.envs.guard.RemakeOnError`)."""
    from ez_robot.envs.guard import RemakeOnError

    make = functools.partial(_make_train_env, config.env)
    return [RemakeOnError(make, seed + i, config.env.max_failures_in_a_row, name=config.env.task) for i in range(count)]


def _make_train_env(env_config, seed: int):
    from ez_robot.envs import make_from_config

    return make_from_config(env_config, seed=seed, mode="train")


def make_actor(config: Config, spec: EnvSpec, envs: list, inference, seed: int) -> Actor:
    """Self-play over ``envs`` with the run's search, segment and frame-stack settings."""
    t = config.train
    return Actor(envs, inference, search_config(config), segment_length=config.replay.segment_length,
                 tail_length=t.unroll_steps + t.td_steps,
                 frame_stack=config.env.frame_stack if len(spec.obs_shape) == 3 else 1, seed=seed)


def make_learner(config: Config, spec: EnvSpec, device, weights: dict | None = None) -> Learner:
    """The learner on ``device``, starting from ``weights`` (else a fresh network)."""
    net = make_model(config, spec)
    if weights is not None:
        net.load_state_dict(weights)
    return Learner(net, config, total_train_steps(config), device)


def make_replay(config: Config) -> ReplayBuffer:
    return ReplayBuffer(config.replay)
