"""The public action-mode and observation wrappers, on their own and as the registry uses
them: check_env on every path, bounds taken from the env's Box, flattening order, errors."""
import pickle

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env

from ez_robot.actor import Actor
from ez_robot.config import load_config, make_env
from ez_robot.envs.wrappers import (TASK_REWARD, FactorizedActions, FlatObservations, JointDiscreteActions,
                                    NormalizedActions, RepeatAction, observation_layout)
from ez_robot.errors import ConfigError, ObservationError
from ez_robot.torch_inference import TorchInference
from ez_robot.networks import make_network
from tests.custom_envs import PointEnv, make_point


@pytest.mark.parametrize("wrap", [
    lambda env: JointDiscreteActions(env, bins=5),
    lambda env: NormalizedActions(env),
    lambda env: FactorizedActions(env, bins=7),
    lambda env: RepeatAction(NormalizedActions(env), 3),
], ids=["joint", "normalized", "factorized", "repeat"])
def test_action_wrappers_pass_check_env_on_their_own(wrap):
    check_env(wrap(gym.make("Pendulum-v1")), skip_render_check=True)


@pytest.mark.parametrize("task,options", [
    ("gym:Pendulum-v1", {}), ("gym:Pendulum-v1", {"action_mode": "gaussian"}),
    ("gym:MountainCarContinuous-v0", {"action_mode": "factorized"}), ("gym:Hopper-v5", {"action_mode": "gaussian"}),
    ("tests.custom_envs:make_point", {}), ("tests.custom_envs:make_point", {"action_mode": "gaussian"}),
])
def test_every_registry_path_passes_check_env(task, options):
    env = make_env(task, seed=0, **options)
    check_env(env, skip_render_check=True)
    clone = pickle.loads(pickle.dumps(env))  # Ray ships what it is given by pickling
    np.testing.assert_array_equal(clone.reset(seed=3)[0], env.reset(seed=3)[0])


def test_joint_bins_span_the_bounds_of_the_box():
    env = JointDiscreteActions(make_point(), bins=3)  # bounds [-2, 2]
    assert env.action_space == spaces.Discrete(9)
    np.testing.assert_allclose(env.action(0), [-2, -2])
    np.testing.assert_allclose(env.action(8), [2, 2])
    np.testing.assert_allclose(env.action(5), [0, 2])  # digit 0 is dimension 0
    assert {tuple(env.action(i)) for i in range(9)} == {(a, b) for a in (-2, 0, 2) for b in (-2, 0, 2)}
    with pytest.raises(ValueError, match="not in Discrete"):
        env.action(9)


def test_normalized_actions_map_linearly_onto_the_bounds_and_clip():
    env = NormalizedActions(make_point())
    assert env.action_space == spaces.Box(-1, 1, (2,), np.float32)
    np.testing.assert_allclose(env.action(np.array([-1.0, 1.0])), [-2, 2])
    np.testing.assert_allclose(env.action(np.array([0.25, 5.0])), [0.5, 2])
    with pytest.raises(ValueError, match="finite vector of shape"):
        env.action(np.array([np.nan, 0.0]))


def test_factorized_actions_pick_each_dimension_s_value():
    env = FactorizedActions(make_point(), bins=5)
    assert env.action_space == spaces.MultiDiscrete([5, 5])
    np.testing.assert_allclose(env.action(np.array([0, 4])), [-2, 2])
    np.testing.assert_allclose(env.action(np.array([2, 3])), [0, 1])
    with pytest.raises(ValueError, match="not in MultiDiscrete"):
        env.action(np.array([5, 0]))


def test_dict_observations_flatten_in_the_space_order():
    env = FlatObservations(make_point())
    assert list(env.raw_observation_space.spaces) == ["goal", "position"]  # a plain dict's keys are sorted
    assert observation_layout(env.raw_observation_space) == [
        {"key": "goal", "shape": [2], "start": 0, "size": 2}, {"key": "position", "shape": [2], "start": 2, "size": 2}]
    obs, _ = env.reset(seed=0)
    raw = env.env.unwrapped._obs()
    np.testing.assert_array_equal(obs, np.concatenate([raw["goal"], raw["position"]]))
    assert obs.dtype == np.float32 and env.observation_space.shape == (4,)


def test_an_observation_that_changes_shape_is_a_clear_error():
    env = make_env("tests.custom_envs:make_shape_changer", seed=0)
    env.reset(seed=0)
    env.step(env.action_space.sample())
    env.step(env.action_space.sample())
    with pytest.raises(ObservationError, match=r"observation\['goal'\] of shape \(3,\).*says \(2,\)"):
        env.step(env.action_space.sample())


@pytest.mark.parametrize("factory,message", [
    ("make_multidiscrete", "MultiDiscrete.*not supported"),
    ("make_unbounded", "unbounded actions"),
    ("make_tuple_observations", "Tuple.*observations are not supported"),
])
def test_spaces_we_cannot_handle_are_refused_by_name(factory, message):
    with pytest.raises(ConfigError, match=message):
        make_env(f"tests.custom_envs:{factory}")


def test_repeat_action_sums_rewards_and_stops_at_the_episode_end():
    env = RepeatAction(NormalizedActions(make_point(horizon=5)), 3)
    env.reset(seed=0)
    _, reward, _, truncated, info = env.step(np.zeros(2))
    assert info["env_frames"] == 3 and not truncated
    _, _, _, truncated, info = env.step(np.zeros(2))
    assert info["env_frames"] == 2 and truncated  # 5 steps: the second decision stops after 2
    single = PointEnv(horizon=5)
    single.reset(seed=0)
    assert reward == pytest.approx(sum(single.step(np.zeros(2))[1] for _ in range(3)))


def test_reward_scale_applies_to_training_envs_only():
    rewards = {}
    for mode in ("train", "eval"):
        env = make_env("gym:Pendulum-v1", seed=0, mode=mode, reward_scale=10.0)
        env.reset(seed=0)
        rewards[mode] = env.step(2)[1]
    assert rewards["train"] == pytest.approx(10 * rewards["eval"]) and rewards["eval"] < 0
    with pytest.raises(ConfigError, match="env.reward_scale must be > 0"):
        make_env("gym:Pendulum-v1", reward_scale=0.0)


def test_reward_offset_is_per_simulator_step_and_for_training_envs_only():
    """cartpole_swingup repeats each action 8 times: an offset of -1 per step takes 8 from
    every training reward, before the scale; evaluation keeps the task's own rewards.  The
    dmc_state preset sets -1 for the joint mode only, whichever way the mode is chosen."""
    arms = {"eval": {"mode": "eval"}, "train": {"reward_offset": -1.0},
            "scaled": {"reward_offset": -1.0, "reward_scale": 0.5}, "preset": {},
            "paper": {"reward_offset": 0.0}}
    rewards = {}
    for name, options in arms.items():
        env = make_env("cartpole_swingup", seed=0, **options)
        env.reset(seed=0)
        rewards[name] = [env.step(a)[1] for a in (0, 4, 2)]
    assert rewards["eval"][0] > 0
    assert rewards["train"] == pytest.approx([r - 8 for r in rewards["eval"]], abs=1e-5)
    assert rewards["scaled"] == pytest.approx([0.5 * (r - 8) for r in rewards["eval"]], abs=1e-5)
    assert rewards["preset"] == rewards["train"] and rewards["paper"] == rewards["eval"]
    sampled = {"eval": make_env("cartpole_swingup", seed=0, mode="eval", action_mode="gaussian"),
               "train": make_env("cartpole_swingup", seed=0, action_mode="gaussian")}
    for env in sampled.values():
        env.reset(seed=0)
    moves = [np.full(1, -1.0, np.float32), np.ones(1, np.float32)]
    assert [sampled["train"].step(a)[1] for a in moves] == [sampled["eval"].step(a)[1] for a in moves]
    with pytest.raises(ConfigError, match="env.reward_offset must be a finite number"):
        make_env("cartpole_swingup", reward_offset=float("nan"))


def test_training_episodes_are_logged_in_the_tasks_units_and_trained_in_the_shaped_ones():
    """The actor stores the shaped rewards for training but counts an episode's return in
    the task's own reward (``info[TASK_REWARD]``), so the progress bar and ``metrics.jsonl``
    read as the evaluations do: CartPole-v1 pays 1 per step, trained as 3 * (1 - 2) = -3."""
    env = make_env("gym:CartPole-v1", seed=0, reward_scale=3.0, reward_offset=-2.0)
    env.reset(seed=0)
    _, reward, _, _, info = env.step(0)
    assert (reward, info[TASK_REWARD]) == (pytest.approx(-3.0), 1.0)
    evaluation = make_env("gym:CartPole-v1", seed=0, mode="eval")
    evaluation.reset(seed=0)
    assert TASK_REWARD not in evaluation.step(0)[4]  # no shaping there: the reward is the task's
    config = load_config("gym:CartPole-v1", overrides=["search.num_simulations=4"])
    net = make_network((4,), 2, config.model).eval()
    actor = Actor([env], TorchInference(net), config.search, segment_length=5, tail_length=2, frame_stack=1, seed=0)
    episodes, segments = [], []
    while not episodes:
        played = actor.step(0, 1.0)
        episodes += played.episodes
        segments += played.segments
    assert episodes[0].episode_return == episodes[0].length > 0
    assert segments and all(np.all(s.rewards == -3.0) for s in segments)


def test_a_robot_that_falls_terminates_and_a_time_limit_truncates():
    """gym: tasks keep the env's own ending: InvertedPendulum-v5 terminates when the pole
    falls (value 0 after it), Pendulum-v1 is cut by its time limit (bootstrapped)."""
    env = make_env("gym:InvertedPendulum-v5", seed=0)
    env.reset(seed=0)
    for step in range(1, 1000):
        _, _, terminated, truncated, _ = env.step(env.action_space.n - 1)  # full push one way
        if terminated or truncated:
            break
    assert terminated and not truncated and step < 100
    env = make_env("gym:Pendulum-v1", seed=0)
    env.reset(seed=0)
    endings = [env.step(0)[2:4] for _ in range(200)]
    assert endings[-1] == (False, True) and not any(t for t, _ in endings[:-1])
