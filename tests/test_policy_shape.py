"""benchmarks/policy_shape.py summarizes where a sampled-mode search puts its weight: the
bound share, the minority-sign mass, the push and the policy's width must be what they say."""
import math

import numpy as np
import pytest

from ez_robot.action_modes import ActionSpec
from tests.scripts import load_script

script = load_script("benchmarks/policy_shape.py")


def test_bound_share_minority_sign_and_push():
    candidates = np.array([[1.0, -0.5], [-0.99, 0.2], [0.97, 0.3], [-1.0, -0.1]])
    assert script.at_bound(candidates).tolist() == [[True, False], [True, False], [False, False], [True, False]]
    weights = np.array([2.0, 1.0, 1.0, 0.0])  # unnormalized on purpose
    # dimension 0: positive 3/4 -> minority 1/4; dimension 1: positive 2/4 -> 1/2
    assert script.minority_sign(weights, candidates) == pytest.approx((0.25 + 0.5) / 2)
    mode = np.array([0.5, 0.0])
    expected = (2 * candidates[0] + candidates[1] + candidates[2]) / 4 - mode
    np.testing.assert_allclose(script.push(weights, candidates, mode), expected)
    assert script.cosine(np.array([1.0, 0.0]), np.array([2.0, 2.0])) == pytest.approx(math.sqrt(0.5))
    assert math.isnan(script.cosine(np.zeros(2), np.ones(2)))


def test_policy_width_reads_the_gaussian_std_and_the_factorized_entropy():
    gaussian = ActionSpec("gaussian", dims=2)
    raw_std = np.log(np.expm1(np.array([0.5, 2.0]))) - 1.0  # inverse of softplus(x + 1)
    width = script.policy_width(gaussian, np.concatenate([np.zeros(2), raw_std]))
    assert width == pytest.approx(1.25 + 0.1, abs=1e-6)  # the mean of softplus(raw + 1), plus the floor STD_MIN
    factorized = ActionSpec("factorized", dims=2, bins=4)
    uniform_and_sure = np.array([0.0, 0.0, 0.0, 0.0, 50.0, 0.0, 0.0, 0.0])
    assert script.policy_width(factorized, uniform_and_sure) == pytest.approx(math.log(4) / 2, abs=1e-6)


def test_policy_draw_shares_read_the_first_candidates_and_the_one_played():
    candidates = np.array([[0.1, 0.2], [0.5, -0.5], [1.0, 1.0], [-1.0, 1.0]])
    weights = np.array([1.0, 3.0, 4.0, 2.0])  # unnormalized on purpose
    mass, played = script.policy_draw_shares(weights, candidates, np.array([1.0, 1.0], np.float32), policy_draws=2)
    assert mass == pytest.approx(0.4) and played == 0.0  # a widened candidate was played
    mass, played = script.policy_draw_shares(weights, candidates, np.array([0.5, -0.5], np.float32), policy_draws=2)
    assert played == 1.0
    assert script.policy_draw_shares(weights, candidates, candidates[3], policy_draws=4) == (1.0, 1.0)
