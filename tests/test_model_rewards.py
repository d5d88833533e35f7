"""benchmarks/model_rewards.py compares the model's rewards with the simulator's: the
simulated counterfactuals must be the rewards the environment pays, and the per-step
rewards read from value prefixes must undo the prefix sums where the search does."""
import numpy as np

from ez_robot.envs.dmc import DMControlEnv
from tests.scripts import load_script

script = load_script("benchmarks/model_rewards.py")


def test_simulated_rewards_are_what_the_env_pays_and_leave_the_physics_as_it_was():
    simulated_rewards = script.simulated_rewards
    env = DMControlEnv("cartpole", "swingup", seed=5, action_repeat=8)
    env.reset(seed=5)
    for _ in range(10):  # somewhere off the initial state
        env.step(np.array([1.0]))
    vectors = np.array([[-1.0], [0.0], [0.5]])
    before = env._env.physics.get_state().copy()
    rewards = simulated_rewards(env, vectors)
    np.testing.assert_array_equal(env._env.physics.get_state(), before)
    assert len(set(np.round(rewards, 6))) == 3  # the control cost alone tells them apart
    _, paid, _, _, _ = env.step(vectors[2])
    assert abs(paid - rewards[2]) < 1e-6
    env.close()


class _CountingModel:
    """A stand-in model whose value prefix is 10 x the steps since the last reset plus the
    last action taken."""

    def root(self, observations):
        class Root:
            hidden = np.zeros(len(observations))
        return Root()

    def recurrent_fn(self, hidden, actions, reset_mask):
        steps = np.where(reset_mask, 1.0, hidden + 1.0)
        return steps, 10.0 * steps + actions, None, None


def test_unrolled_rewards_undo_the_prefix_sums_between_resets():
    unrolled_rewards = script.unrolled_rewards
    actions = np.array([[1, 2, 3, 4, 0], [0, 0, 0, 0, 0]])
    out = unrolled_rewards(_CountingModel(), np.zeros((2, 3)), actions, depth=5, lstm_horizon=2)
    # prefix p_k = 10 x steps + a_k; reward_k = p_k (after a reset) or p_k - p_{k-1}
    expected_first = [11, 10 + 2 - 1, 13, 10 + 4 - 3, 10]
    np.testing.assert_allclose(out[0], expected_first)
    np.testing.assert_allclose(out[1], [10, 10, 10, 10, 10])


def test_model_rewards_are_compared_in_the_tasks_units():
    """A run trained with ``env.reward_offset`` and ``env.reward_scale`` learns rewards in
    training units; the script maps them back before comparing with the simulator's."""
    from ez_robot.config import EnvConfig

    config = EnvConfig(task="cartpole_swingup", action_repeat=8, reward_offset=-1.0, reward_scale=0.5)
    paid = np.array([7.5, 0.0, 8.0])
    learned = 0.5 * (paid - 8)  # as the training env hands them out
    np.testing.assert_allclose(script.task_units(learned, config), paid)
    np.testing.assert_allclose(script.task_units(paid, EnvConfig(task="cartpole_swingup")), paid)
