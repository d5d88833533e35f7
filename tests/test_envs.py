"""DMControl and classic-control envs, the task registry (one object per suite) and its errors."""
import pickle

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from ez_robot import envs
from ez_robot.config import load_config, make_env, task_family
from ez_robot.envs import registry
from ez_robot.envs.suite import StateSuite
from ez_robot.envs.wrappers import JointDiscreteActions, NormalizedActions, discrete_action_table, find_wrapper
from tests.custom_envs import PointEnv, make_point


@pytest.mark.parametrize("task,obs", [("cartpole_swingup", "state"), ("cartpole_swingup", "pixels"),
                                      ("reacher_easy", "state"), ("gym:CartPole-v1", "state")])
def test_check_env_passes(task, obs):
    env = make_env(task, seed=0, obs=obs)
    check_env(env, skip_render_check=True)


def test_discretizer_round_trip():
    low, high = np.array([-1.0, 0.0, -2.0]), np.array([1.0, 0.5, 3.0])
    table = discrete_action_table(low, high, 5)
    assert table.shape == (125, 3)
    assert (table >= low).all() and (table <= high).all()
    assert len({tuple(row) for row in table}) == 125  # all K^d vectors distinct
    for d in range(3):  # each dimension takes K evenly spaced values, both bounds included
        np.testing.assert_allclose(np.unique(table[:, d]), np.linspace(low[d], high[d], 5))
    # index -> digits: dimension 0 is the most significant base-K digit
    np.testing.assert_allclose(table[0], low)
    np.testing.assert_allclose(table[-1], high)
    np.testing.assert_allclose(table[1], [low[0], low[1], low[2] + 1.25])


def test_dmc_discrete_actions_reach_the_simulator():
    env = make_env("ball_in_cup_catch", seed=0)  # 2 action dims
    assert env.action_space.n == 25 and env.unwrapped.action_repeat == 4
    joint = find_wrapper(env, JointDiscreteActions)  # under the training envs' reward offset
    env.reset(seed=0)
    env.step(24)
    np.testing.assert_allclose(env.unwrapped._env.physics.data.ctrl, joint.action_high)
    env.step(0)
    np.testing.assert_allclose(env.unwrapped._env.physics.data.ctrl, joint.action_low)


def test_dmc_episode_is_truncated_not_terminated():
    env = make_env("cartpole_swingup", seed=1)
    env.reset(seed=1)
    steps, frames = 0, 0
    while True:
        _, reward, terminated, truncated, info = env.step(env.action_space.sample())
        steps += 1
        frames += info["env_frames"]
        assert not terminated
        if truncated:
            break
    assert frames == 1000 and steps == 125  # 1000 simulator steps at action repeat 8


def test_same_seed_same_observations():
    a, b = make_env("cartpole_swingup", seed=3), make_env("cartpole_swingup", seed=3)
    oa, ob = a.reset(seed=3)[0], b.reset(seed=3)[0]
    np.testing.assert_array_equal(oa, ob)
    for action in [0, 4, 2, 1]:
        np.testing.assert_array_equal(a.step(action)[0], b.step(action)[0])
    assert not np.array_equal(make_env("cartpole_swingup").reset(seed=4)[0], oa)


def test_pixels_are_channel_first_stacks():
    env = make_env("cartpole_swingup", seed=0, obs="pixels", frame_size=64, frame_stack=3)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (9, 64, 64) and obs.dtype == np.uint8
    np.testing.assert_array_equal(obs[:3], obs[6:])  # reset fills the stack with the first frame
    for _ in range(3):
        obs = env.step(4)[0]
    assert not np.array_equal(obs[:3], obs[6:])  # the cart moved
    assert obs.std() > 5  # a real picture, not a blank frame


@pytest.mark.parametrize("task,obs", [("cartpole_swingup", "state"), ("cartpole_swingup", "pixels"),
                                      ("gym:CartPole-v1", "state")])
def test_envs_pickle(task, obs):
    env = make_env(task, seed=0, obs=obs)
    env.reset(seed=0)
    clone = pickle.loads(pickle.dumps(env))
    np.testing.assert_array_equal(clone.reset(seed=5)[0], env.reset(seed=5)[0])
    clone.step(0)


def test_registry_lists_tasks():
    names = envs.task_names()
    for name in ["cartpole_swingup", "reacher_easy", "ball_in_cup_catch", "walker_walk", "finger_spin",
                 "atari:Pong", "atari:MsPacman", "gym:CartPole-v1"]:
        assert name in names
    assert envs.task_names("walker_*") == ["walker_run", "walker_stand", "walker_walk"]
    assert envs.task_names("pong") == ["atari:Pong"]


@pytest.mark.parametrize("task,hint", [("cartpol_swingup", "cartpole_swingup"), ("atari:pong", "atari:Pong"),
                                       ("gym:Cartpole-v1", "gym:CartPole-v1")])
def test_unknown_task_names_closest(task, hint):
    with pytest.raises(envs.UnknownTaskError, match=f"unknown task '{task}'; did you mean: .*{hint}"):
        make_env(task)


def test_too_many_discrete_actions_says_what_to_lower():
    with pytest.raises(ValueError, match=r"5\^6 = 15,625 discrete actions.*Lower env.bins.*env.action_mode=gaussian"):
        make_env("walker_walk", action_mode="joint")
    assert make_env("walker_walk", bins=3).action_space.n == 729  # auto: joint where bins^dims fits


def test_continuous_actions_are_a_normalized_box_mapped_onto_the_bounds():
    env = make_env("walker_walk")  # auto: 5^6 joint actions do not fit, so gaussian
    assert env.action_space.shape == (6,) and env.action_space.low.min() == -1 and env.action_space.high.max() == 1
    # walker's training env carries a reward offset above the action mapping: reach it as the exporter does
    actions = find_wrapper(env, NormalizedActions)
    np.testing.assert_allclose(actions.action(np.full(6, 1.0)), actions.action_high)
    np.testing.assert_allclose(actions.action(np.zeros(6)), (actions.action_low + actions.action_high) / 2, atol=1e-7)
    np.testing.assert_allclose(actions.action(np.full(6, 3.0)), actions.action_high)  # clipped
    env.reset(seed=0)
    obs, reward, terminated, truncated, _ = env.step(np.zeros(6, np.float32))
    assert obs.shape == env.observation_space.shape
    with pytest.raises(ValueError, match="not a finite vector of shape"):
        env.step(np.full(6, np.nan, np.float32))


def test_bad_options():
    with pytest.raises(ValueError, match="mode must be 'train' or 'eval'"):
        make_env("cartpole_swingup", mode="test")
    with pytest.raises(Exception, match="env.bins must be >= 2"):
        make_env("cartpole_swingup", bins=1)
    with pytest.raises(TypeError, match="unknown option"):
        make_env("cartpole_swingup", bogus=3)


def test_cheetah_loads_without_the_settotalmass_warning(caplog):
    # MuJoCo 3.x deprecates the cheetah model's <compiler settotalmass>; dm_control forwards the
    # warning to the absl logger on every load.  It is dropped; other absl warnings still show.
    import logging
    with caplog.at_level(logging.WARNING):
        make_env("cheetah_run")
        logging.getLogger("absl").warning("another warning")
    assert "settotalmass" not in caplog.text
    assert "another warning" in caplog.text


class FakeSuite(StateSuite):
    """A suite ez-robot does not ship, ``fake:<name>``: one class and one registration make
    its tasks reachable everywhere a task is asked about."""

    kind = "fake"

    def __init__(self):
        self.built = 0

    def claims(self, task):
        return task.startswith("fake:")

    def task_names(self):
        return ["fake:Point", "fake:Pointer"]

    def preset_family(self, task, obs):
        return "classic"

    def base_env(self, task, kwargs, *, render):
        self.built += 1
        return make_point(**kwargs, render_mode="rgb_array" if render else None)

    def action_dims(self, task, kwargs):
        return 2  # known without building the env

    def made(self, env):
        return isinstance(env.unwrapped, PointEnv)

    def control_period(self, env, env_config):
        return 0.5


def test_a_new_suite_is_one_object_registered_once(monkeypatch):
    fake = FakeSuite()
    monkeypatch.setattr(registry, "SUITES", (fake, *registry.SUITES))
    monkeypatch.setattr(envs, "_ACTION_DIMS", {})  # leaves the cache of the registered suites as it was
    assert envs.task_names("fake:*") == ["fake:Point", "fake:Pointer"] and "cartpole_swingup" in envs.task_names()
    assert (envs.task_kind("fake:Point"), envs.task_slug("fake:Point")) == ("fake", "fake-Point")
    assert envs.action_dims("fake:Point") == 2 and fake.built == 0
    assert task_family("fake:Point") == "classic" and envs.preset_family("fake:Point") == "classic"
    config = load_config("fake:Point", overrides=["env.kwargs.horizon=5"])
    assert config.preset == "classic.yaml" and config.env.action_mode == "joint"  # 5^2 joint actions fit
    env = make_env("fake:Point", seed=0, kwargs={"horizon": 5})
    assert env.action_space.n == 25 and fake.built == 1
    check_env(env, skip_render_check=True)
    evaluation = envs.make_from_config(config.env, seed=0, mode="eval")
    evaluation.reset(seed=0)
    assert envs.control_period(evaluation, config.env) == 0.5
    assert envs.render_frame(evaluation).shape == (32, 32, 3)
    with pytest.raises(envs.UnknownTaskError, match="unknown task 'fake:Pont'; did you mean: fake:Point, fake:Pointer"):
        make_env("fake:Pont")
    # the suites it was registered beside still own their tasks
    others = ("gym:CartPole-v1", "atari:Pong", "walker_walk", "tests.custom_envs:make_point")
    assert [envs.task_kind(task) for task in others] == ["gym", "atari", "dmc", "custom"]
    monkeypatch.undo()
    assert envs.task_kind("fake:Point") == "custom"  # unregistered: a module:factory name, as before
    assert not envs.task_names("fake:*")
