"""Environments that raise: made again, their unfinished episode dropped (never half of it
in replay), the same in both trainers; too many failures in a row stop the run."""
import pickle

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from ez_robot.actor import Actor
from ez_robot.config import load_config
from ez_robot.envs.guard import ENV_ERROR, RemakeOnError
from ez_robot.errors import EnvironmentFailed
from ez_robot.torch_inference import TorchInference
from ez_robot.networks import make_network

TINY = ["replay.min_replay_size=60", "train.batch_size=8", "search.num_simulations=4",
        "train.train_steps_per_agent_step=0.25", "train.eval_episodes=2"]


class FlakyCartPole(gym.Wrapper):
    """CartPole whose ``fail_at``-th step (counted over all instances) raises."""

    steps = 0

    def __init__(self, fail_at: set):
        super().__init__(gym.make("CartPole-v1"))
        self.fail_at = fail_at

    def step(self, action):
        FlakyCartPole.steps += 1
        if FlakyCartPole.steps in self.fail_at:
            raise RuntimeError(f"simulator blew up at step {FlakyCartPole.steps}")
        return self.env.step(action)


def make_flaky(fail_at):
    def make(seed):
        return FlakyCartPole(fail_at)
    return make


def flaky_actor(fail_at: set, num_envs=2, segment_length=5):
    config = load_config("gym:CartPole-v1", overrides=TINY)
    FlakyCartPole.steps = 0
    envs = [RemakeOnError(make_flaky(fail_at), seed=i) for i in range(num_envs)]
    net = make_network((4,), 2, config.model).eval()
    actor = Actor(envs, TorchInference(net), config.search, segment_length=segment_length, tail_length=2,
                  frame_stack=1, seed=0)
    return actor, envs


def test_the_wrapper_passes_check_env_and_pickles():
    from ez_robot.builders import make_envs

    config = load_config("gym:CartPole-v1")
    env = make_envs(config, seed=3, count=1)[0]
    check_env(env, skip_render_check=True)
    clone = pickle.loads(pickle.dumps(env))
    np.testing.assert_array_equal(clone.reset(seed=5)[0], env.reset(seed=5)[0])


def test_a_failed_step_is_a_truncation_that_says_why():
    FlakyCartPole.steps = 0
    env = RemakeOnError(make_flaky({2}), seed=0)
    first, _ = env.reset(seed=0)
    env.step(0)
    obs, reward, terminated, truncated, info = env.step(0)
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert "simulator blew up at step 2" in info[ENV_ERROR] and env.failures == 1
    assert env.reset()[0].shape == first.shape  # the new env goes on


def test_an_env_that_raises_is_made_again_and_its_unfinished_episode_dropped():
    actor, envs = flaky_actor(fail_at={23})  # env 0 at its 12th step
    kept, dropped_moves, decisions, errors = [], 0, 15, []
    for _ in range(decisions):
        unsaved = [len(t.actions) for t in actor.trajectories]
        failures = [env.failures for env in envs]
        played = actor.step(0, 1.0)
        # a failed env loses the moves not yet cut into a segment, and the failed move
        dropped_moves += sum(unsaved[i] + 1 for i, env in enumerate(envs) if env.failures > failures[i])
        kept += played.segments
        errors += played.env_errors
    assert envs[0].failures == 1 and envs[1].failures == 0 and dropped_moves > 0
    assert len(errors) == 1 and "simulator blew up at step 23" in errors[0]
    # every move is in exactly one stored segment, dropped, or in an unfinished trajectory
    pending = sum(len(t.actions) for t in actor.trajectories)
    assert sum(s.num_own for s in kept) + dropped_moves + pending == decisions * len(envs)
    for segment in kept:  # no stored segment holds the failed move (reward 0, a repeated observation)
        assert segment.rewards.min() == 1.0
    actor.step(0, 1.0)  # the remade env goes on
    assert envs[0].failures == 1


def test_too_many_env_failures_in_a_row_stop_with_the_error():
    actor, envs = flaky_actor(fail_at=set(range(1, 1000)), num_envs=1)
    with pytest.raises(EnvironmentFailed, match="failed 6 times in a row.*simulator blew up"):
        for _ in range(10):
            actor.step(0, 1.0)


def test_the_single_process_trainer_survives_an_env_that_raises(tmp_path, monkeypatch):
    """The fault guard is not Ray's alone: a ``--workers 0`` run goes on past an env error."""
    import json

    from ez_robot import builders
    from ez_robot.trainer import train

    FlakyCartPole.steps = 0
    monkeypatch.setattr(builders, "_make_train_env", lambda env_config, seed: FlakyCartPole({30, 95}))
    config = load_config("gym:CartPole-v1", budget="120", overrides=TINY)
    summary = train(config, tmp_path, device="cpu", progress=False)
    assert summary["agent_steps"] == 120 and summary["train_steps"] == 30
    failures = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()
                if '"env_failure"' in line]
    assert [f["error"] for f in failures] == ["RuntimeError: simulator blew up at step 30",
                                             "RuntimeError: simulator blew up at step 95"]
