"""benchmarks/q_ranking.py scores candidate actions in a copy of the physics: the rank
correlation must be Spearman's, and a candidate's simulator Q must be what the env pays
plus the discounted bootstrap, with the physics left as it was."""
import math

import numpy as np
import pytest

from ez_robot.envs.dmc import DMControlEnv
from ez_robot.action_modes import ActionSpec
from tests.scripts import load_script

script = load_script("benchmarks/q_ranking.py")


def test_spearman_is_the_rank_correlation_with_ties_averaged():
    spearman = script.spearman
    x = np.array([1.0, 2.0, 3.0, 4.0])
    assert spearman(x, x ** 3) == pytest.approx(1.0)  # monotone, not linear
    assert spearman(x, -x) == pytest.approx(-1.0)
    np.testing.assert_allclose(script.ranks(np.array([3.0, 1.0, 3.0, 2.0])), [2.5, 0.0, 2.5, 1.0])
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
    probe = script.Probe(_Agent(), env, ActionSpec("joint", num_actions=3))
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
