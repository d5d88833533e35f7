"""Self-checks of the benchmarks' diagnostic scripts, run beside them:

    python -m pytest benchmarks/tests

These scripts are experiment tools (what a trained run's model, search and policy do on a
task), not part of the package, so the default test suite (tests/) does not import them.
Each check keeps what the script's numbers rest on: cartpole_episodes.py's reward factors
multiply to the task's reward; model_rewards.py's simulated counterfactuals are what the
env pays and its unrolled rewards undo the value-prefix sums; q_ranking.py's rank
correlation is Spearman's and its simulator Q is the paid rewards plus the bootstrap;
policy_shape.py's summaries are what they say."""
import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from ez_robot.action_modes import ActionSpec
from ez_robot.device import set_threads
from ez_robot.envs.dmc import DMControlEnv

set_threads(1)  # as every ez-robot process runs
HERE = Path(__file__).resolve().parents[1]


def load_script(name: str):
    """The module of ``benchmarks/<name>.py``."""
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- cartpole_episodes.py: splits cartpole_swingup's reward into dm_control's factors; their
# product must be the reward the task pays, or the diagnosis is wrong.

cartpole_episodes = load_script("cartpole_episodes")


def test_the_reward_factors_multiply_to_the_task_reward():
    factors_of = cartpole_episodes.reward_factors
    env = DMControlEnv("cartpole", "swingup", seed=3, action_repeat=1)
    env.reset(seed=3)
    rng = np.random.default_rng(0)
    checked = set()
    for step in range(200):
        force = float(rng.choice([-1.0, -0.5, 0.0, 0.5, 1.0]))
        _, reward, _, _, _ = env.step(np.array([force], np.float32))
        factors = factors_of(env._env.physics, force)
        assert np.all((factors > 0) & (factors <= 1))
        assert abs(np.prod(factors) - reward) < 1e-9, step
        checked.add(force)
    env.close()
    assert checked == {-1.0, -0.5, 0.0, 0.5, 1.0}


# --- model_rewards.py: compares the model's rewards with the simulator's: the simulated
# counterfactuals must be the rewards the environment pays, and the per-step rewards read from value
# prefixes must undo the prefix sums where the search does.

model_rewards = load_script("model_rewards")


def test_simulated_rewards_are_what_the_env_pays_and_leave_the_physics_as_it_was():
    simulated_rewards = model_rewards.simulated_rewards
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
    unrolled_rewards = model_rewards.unrolled_rewards
    actions = np.array([[1, 2, 3, 4, 0], [0, 0, 0, 0, 0]])
    out = unrolled_rewards(_CountingModel(), np.zeros((2, 3)), actions, depth=5, lstm_horizon=2)
    # prefix p_k = 10 x steps + a_k; reward_k = p_k (after a reset) or p_k - p_{k-1}
    expected_first = [11, 10 + 2 - 1, 13, 10 + 4 - 3, 10]
    np.testing.assert_allclose(out[0], expected_first)
    np.testing.assert_allclose(out[1], [10, 10, 10, 10, 10])


def test_model_rewards_are_compared_in_the_tasks_units():
    """A run trained with ``env.reward_offset`` and ``env.reward_scale`` learns rewards in
    training units; model_rewards.py maps them back before comparing with the simulator's."""
    from ez_robot.config import EnvConfig

    config = EnvConfig(task="cartpole_swingup", action_repeat=8, reward_offset=-1.0, reward_scale=0.5)
    paid = np.array([7.5, 0.0, 8.0])
    learned = 0.5 * (paid - 8)  # as the training env hands them out
    np.testing.assert_allclose(model_rewards.task_units(learned, config), paid)
    np.testing.assert_allclose(model_rewards.task_units(paid, EnvConfig(task="cartpole_swingup")), paid)


# --- q_ranking.py: scores candidate actions in a copy of the physics: the rank correlation must be
# Spearman's, and a candidate's simulator Q must be what the env pays plus the discounted bootstrap,
# with the physics left as it was.

q_ranking = load_script("q_ranking")


def test_spearman_is_the_rank_correlation_with_ties_averaged():
    spearman = q_ranking.spearman
    x = np.array([1.0, 2.0, 3.0, 4.0])
    assert spearman(x, x ** 3) == pytest.approx(1.0)  # monotone, not linear
    assert spearman(x, -x) == pytest.approx(-1.0)
    np.testing.assert_allclose(q_ranking.ranks(np.array([3.0, 1.0, 3.0, 2.0])), [2.5, 0.0, 2.5, 1.0])
    assert math.isnan(spearman(x, np.ones(4)))


class _Root:
    def __init__(self, count):
        self.policy_logits = np.tile([[0.0, 0.0, 5.0]], (count, 1))  # the greedy action is 2
        self.value = np.full(count, 10.0)


class _Agent:
    """A stand-in for a loaded run: a constant value of 10, joint actions -1, 0, +1."""

    class _search:
        discount = 0.9

    class _inference:
        @staticmethod
        def root(observations):
            return _Root(len(observations))

    class _actions:
        @staticmethod
        def action(index):
            return np.array([-1.0, 0.0, 1.0])[[index]]


def test_simulator_q_is_the_paid_rewards_plus_the_bootstrap_and_restores_the_physics():
    env = DMControlEnv("cartpole", "swingup", seed=3, action_repeat=4)
    env.reset(seed=3)
    for _ in range(5):
        env.step(np.array([0.5]))
    probe = q_ranking.Probe(_Agent(), env, ActionSpec("joint", num_actions=3))
    physics = env._env.physics
    state, time = physics.get_state().copy(), float(physics.data.time)
    assert time > 0
    q, observed = probe.simulate((state, time), 0, horizon=2)
    np.testing.assert_array_equal(physics.get_state(), state)
    assert physics.data.time == time  # the time too: get_state leaves it out
    paid = [env.step(np.array([-1.0]))[1]] + [env.step(np.array([1.0]))[1] for _ in range(2)]  # then greedy: +1
    assert q == pytest.approx(paid[0] + 0.9 * paid[1] + 0.81 * paid[2] + 0.729 * 10.0)
    assert observed == pytest.approx(paid[0] + 0.9 * 10.0)
    env.close()


# --- policy_shape.py: summarizes where a sampled-mode search puts its weight: the bound share, the
# minority-sign mass, the push and the policy's width must be what they say.

policy_shape = load_script("policy_shape")


def test_bound_share_minority_sign_and_push():
    candidates = np.array([[1.0, -0.5], [-0.99, 0.2], [0.97, 0.3], [-1.0, -0.1]])
    assert policy_shape.at_bound(candidates).tolist() == [[True, False], [True, False], [False, False], [True, False]]
    weights = np.array([2.0, 1.0, 1.0, 0.0])  # unnormalized on purpose
    # dimension 0: positive 3/4 -> minority 1/4; dimension 1: positive 2/4 -> 1/2
    assert policy_shape.minority_sign(weights, candidates) == pytest.approx((0.25 + 0.5) / 2)
    mode = np.array([0.5, 0.0])
    expected = (2 * candidates[0] + candidates[1] + candidates[2]) / 4 - mode
    np.testing.assert_allclose(policy_shape.push(weights, candidates, mode), expected)
    assert policy_shape.cosine(np.array([1.0, 0.0]), np.array([2.0, 2.0])) == pytest.approx(math.sqrt(0.5))
    assert math.isnan(policy_shape.cosine(np.zeros(2), np.ones(2)))


def test_policy_width_reads_the_gaussian_std_and_the_factorized_entropy():
    gaussian = ActionSpec("gaussian", dims=2)
    raw_std = np.log(np.expm1(np.array([0.5, 2.0]))) - 1.0  # inverse of softplus(x + 1)
    width = policy_shape.policy_width(gaussian, np.concatenate([np.zeros(2), raw_std]))
    assert width == pytest.approx(1.25 + 0.1, abs=1e-6)  # the mean of softplus(raw + 1), plus the floor STD_MIN
    factorized = ActionSpec("factorized", dims=2, bins=4)
    uniform_and_sure = np.array([0.0, 0.0, 0.0, 0.0, 50.0, 0.0, 0.0, 0.0])
    assert policy_shape.policy_width(factorized, uniform_and_sure) == pytest.approx(math.log(4) / 2, abs=1e-6)


def test_policy_draw_shares_read_the_first_candidates_and_the_one_played():
    candidates = np.array([[0.1, 0.2], [0.5, -0.5], [1.0, 1.0], [-1.0, 1.0]])
    weights = np.array([1.0, 3.0, 4.0, 2.0])  # unnormalized on purpose
    mass, played = policy_shape.policy_draw_shares(weights, candidates, np.array([1.0, 1.0], np.float32), policy_draws=2)
    assert mass == pytest.approx(0.4) and played == 0.0  # a widened candidate was played
    mass, played = policy_shape.policy_draw_shares(weights, candidates, np.array([0.5, -0.5], np.float32), policy_draws=2)
    assert played == 1.0
    assert policy_shape.policy_draw_shares(weights, candidates, candidates[3], policy_draws=4) == (1.0, 1.0)
