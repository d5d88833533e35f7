"""The search: the C++ tree against a pure-Python reference, and its invariants."""
import numpy as np
import pytest

from ez_robot import RootOutput, SearchConfig, search, visit_policy
from tests.reference_search import reference_search
from tests.toy_models import ElementwiseModel, PermutedModel


def run_reference(model, root, config, noise=None):
    counts, values = [], []
    for b in range(root.policy_logits.shape[0]):
        hidden = tuple(h[b:b + 1] for h in root.hidden)
        c, v = reference_search(
            hidden, root.value_prefix[b], root.value[b], root.policy_logits[b], model,
            num_simulations=config.num_simulations, c1=config.c1, c2=config.c2, discount=config.discount,
            lstm_horizon=config.lstm_horizon, min_max_epsilon=config.min_max_epsilon,
            noise=None if noise is None else noise[b], noise_fraction=config.dirichlet_fraction,
            root_mean_q=config.root_unvisited_q == "mean")
        counts.append(c)
        values.append(v)
    return np.array(counts), np.array(values)


CASES = [  # (batch, actions, simulations, lstm_horizon, noise)
    (1, 2, 30, 5, False), (3, 2, 50, 2, True), (16, 6, 50, 5, False), (8, 6, 80, 3, True),
    (4, 18, 50, 5, True), (16, 18, 60, 2, False), (2, 125, 50, 5, False), (5, 125, 120, 4, True),
]


@pytest.mark.parametrize("root_unvisited_q", ["zero", "mean"])
@pytest.mark.parametrize("batch,num_actions,sims,horizon,noise", CASES)
@pytest.mark.parametrize("seed", range(4))
def test_matches_python_reference(batch, num_actions, sims, horizon, noise, seed, root_unvisited_q):
    model = ElementwiseModel(num_actions, seed)
    root = model.root(batch, seed + 100)
    config = SearchConfig(num_simulations=sims, lstm_horizon=horizon, add_noise=noise, discount=0.98,
                          root_unvisited_q=root_unvisited_q)
    out = search(root, model, config, np.random.default_rng(seed))
    # The noise search() drew: the first draw of the same generator.
    drawn = np.random.default_rng(seed).dirichlet(np.full(num_actions, 0.3), size=batch).astype(np.float32)
    counts, values = run_reference(model, root, config, drawn if noise else None)
    np.testing.assert_array_equal(out.visit_counts, counts)
    np.testing.assert_array_equal(out.root_values, values.astype(np.float32))


def test_reference_cases_go_deep_enough_to_cross_resets():
    model = ElementwiseModel(2, 0)
    out = search(model.root(3, 1), model, SearchConfig(num_simulations=50, lstm_horizon=2, add_noise=False),
                 np.random.default_rng(0))
    assert out.max_depth.min() > 4  # at least two value-prefix resets on the deepest path


@pytest.mark.parametrize("sims", [0, 1, 7, 50])
def test_visit_counts_sum_to_simulations(sims):
    model = ElementwiseModel(18, 3)
    out = search(model.root(5, 4), model, SearchConfig(num_simulations=sims), np.random.default_rng(0))
    np.testing.assert_array_equal(out.visit_counts.sum(axis=1), np.full(5, sims))
    assert out.visit_counts.dtype == np.int32


def test_zero_simulations_returns_network_value_and_uniform_policy():
    model = ElementwiseModel(6, 3)
    root = model.root(4, 5)
    out = search(root, model, SearchConfig(num_simulations=0), np.random.default_rng(0))
    np.testing.assert_array_equal(out.root_values, root.value)
    np.testing.assert_allclose(out.policy, np.full((4, 6), 1 / 6), rtol=1e-6)


class Bandit:
    """Every step pays reward[action]; the value head says ``value`` everywhere (default 0:
    it knows nothing)."""

    def __init__(self, rewards, value=0.0):
        self.rewards = np.asarray(rewards, np.float32)
        self.value = np.float32(value)

    def root(self, batch):
        a = len(self.rewards)
        return RootOutput(np.zeros((batch, 1), np.float32), np.zeros(batch, np.float32),
                          np.full(batch, self.value, np.float32), np.zeros((batch, a), np.float32))

    def __call__(self, hidden, actions, reset_mask):
        b, a = len(actions), len(self.rewards)
        prefix = np.where(reset_mask[:, None], 0, hidden)
        value_prefix = prefix[:, 0] + self.rewards[actions]
        return value_prefix[:, None], value_prefix, np.full(b, self.value, np.float32), np.zeros((b, a), np.float32)


@pytest.mark.parametrize("best", [0, 3, 5])
def test_bandit_concentrates_visits_on_best_arm(best):
    rewards = np.full(6, 0.2)
    rewards[best] = 1.0
    bandit = Bandit(rewards)
    out = search(bandit.root(2), bandit, SearchConfig(num_simulations=100, add_noise=False), np.random.default_rng(0))
    assert (out.visit_counts.argmax(axis=1) == best).all()
    assert (out.visit_counts[:, best] > 60).all()
    # Q(root, best) = 1 + discount * (value of the best continuation), larger than any other arm.
    assert (np.nanargmax(out.root_q_values, axis=1) == best).all()


@pytest.mark.parametrize("offset", [0.0, -1.0, -10.0])
def test_mean_q_at_the_root_finds_the_best_arm_whatever_the_rewards_offset(offset):
    # 125 arms and 50 simulations, as the arm example's joint mode.  One arm pays 0.1 more
    # than the others, and the prior slightly prefers the first 20 arms (the best among them).
    # The value head knows the offset's worth (what a trained one would say).
    discount = 0.99
    rewards = np.full(125, offset, np.float32)
    rewards[7] += 0.1
    bandit = Bandit(rewards, value=offset / (1 - discount))
    root = bandit.root(1)
    root.policy_logits[:, :20] = 0.5
    config = SearchConfig(num_simulations=50, add_noise=False, discount=discount, root_unvisited_q="mean")
    out = search(root, bandit, config, np.random.default_rng(0))
    assert out.visit_counts[0].argmax() == 7 and out.visit_counts[0, 7] >= 10
    paper = search(root, bandit, config.replace(root_unvisited_q="zero"), np.random.default_rng(0))
    if offset < 0:  # the paper's Q = 0 for unvisited children is then the best score: breadth first
        assert paper.visit_counts[0].max() <= 2 and (paper.visit_counts[0] > 0).sum() >= 49
    else:           # rewards >= 0: both concentrate on the best arm
        assert paper.visit_counts[0].argmax() == 7


def test_root_unvisited_q_must_be_known():
    with pytest.raises(ValueError, match="root_unvisited_q"):
        SearchConfig(root_unvisited_q="max")


@pytest.mark.parametrize("seed", range(5))
def test_permuting_actions_permutes_visit_counts(seed):
    model = ElementwiseModel(6, seed)
    perm = np.random.default_rng(seed).permutation(6)
    config = SearchConfig(num_simulations=50, add_noise=False)
    out = search(model.root(4, seed), model, config, np.random.default_rng(0))
    permuted = PermutedModel(model, perm)
    out_perm = search(permuted.root(4, seed), permuted, config, np.random.default_rng(0))
    np.testing.assert_array_equal(out_perm.visit_counts, out.visit_counts[:, perm])
    np.testing.assert_allclose(out_perm.root_values, out.root_values, rtol=1e-5)


def test_batch_equals_single_searches():
    model = ElementwiseModel(18, 7)
    root = model.root(9, 8)
    config = SearchConfig(num_simulations=40, add_noise=False, temperature=0)
    batched = search(root, model, config, np.random.default_rng(0))
    for b in range(9):
        one = RootOutput(tuple(h[b:b + 1] for h in root.hidden), root.value_prefix[b:b + 1], root.value[b:b + 1],
                         root.policy_logits[b:b + 1])
        single = search(one, model, config, np.random.default_rng(0))
        np.testing.assert_array_equal(single.visit_counts[0], batched.visit_counts[b])
        assert single.root_values[0] == batched.root_values[b]
        assert single.actions[0] == batched.actions[b]


def test_same_rng_same_result_and_noise_changes_it():
    model = ElementwiseModel(18, 1)
    root = model.root(8, 2)
    config = SearchConfig(num_simulations=50)
    a = search(root, model, config, np.random.default_rng(42))
    b = search(root, model, config, np.random.default_rng(42))
    c = search(root, model, config, np.random.default_rng(43))
    np.testing.assert_array_equal(a.visit_counts, b.visit_counts)
    np.testing.assert_array_equal(a.actions, b.actions)
    assert not np.array_equal(a.visit_counts, c.visit_counts)


def test_torch_hidden_states_match_numpy():
    torch = pytest.importorskip("torch")
    model = ElementwiseModel(6, 11)
    root = model.root(4, 12)

    def torch_model(hidden, actions, reset_mask):
        next_hidden, vp, v, logits = model(tuple(h.numpy() for h in hidden), actions, reset_mask)
        return tuple(torch.from_numpy(h) for h in next_hidden), torch.from_numpy(vp), torch.from_numpy(v), \
            torch.from_numpy(logits)

    torch_root = RootOutput(tuple(torch.from_numpy(h) for h in root.hidden), root.value_prefix, root.value,
                            root.policy_logits)
    config = SearchConfig(num_simulations=30)
    expected = search(root, model, config, np.random.default_rng(0))
    got = search(torch_root, torch_model, config, np.random.default_rng(0))
    np.testing.assert_array_equal(got.visit_counts, expected.visit_counts)


def test_visit_policy_temperature():
    counts = np.array([[1, 3, 0, 6]], dtype=np.int32)
    np.testing.assert_allclose(visit_policy(counts, 1.0), [[0.1, 0.3, 0.0, 0.6]], rtol=1e-6)
    sharp = visit_policy(counts, 0.5)
    np.testing.assert_allclose(sharp, [[1 / 46, 9 / 46, 0.0, 36 / 46]], rtol=1e-6)
    np.testing.assert_array_equal(visit_policy(counts, 0), [[0, 0, 0, 1]])
    assert np.isfinite(visit_policy(np.array([[400, 399]]), 0.01)).all()


def test_sampled_actions_follow_policy():
    counts = np.tile(np.array([[10, 30, 0, 60]], dtype=np.int32), (20000, 1))
    from ez_robot.mcts import _select

    actions = _select(visit_policy(counts, 1.0), counts, 1.0, np.random.default_rng(0))
    freq = np.bincount(actions, minlength=4) / len(actions)
    np.testing.assert_allclose(freq, [0.1, 0.3, 0.0, 0.6], atol=0.015)


def test_a_deadline_stops_the_search_early_and_says_how_far_it_got():
    import time

    model = ElementwiseModel(6, 3)
    root = model.root(2, 5)
    config = SearchConfig(num_simulations=50, add_noise=False, temperature=0.0)
    full = search(root, model, config, np.random.default_rng(0), deadline=time.perf_counter() + 60)
    assert (full.simulations == 50).all() and (full.visit_counts.sum(axis=1) == 50).all()

    calls, now = [], [1000.0]  # a clock that moves 10 ms per model call, whatever this machine's speed

    def slow_model(hidden, actions, reset_mask):
        calls.append(1)
        now[0] += 0.010
        return model(hidden, actions, reset_mask)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(time, "perf_counter", lambda: now[0])
        out = search(root, slow_model, config, np.random.default_rng(0), deadline=now[0] + 0.035)
    assert (out.simulations == 4).all() and len(calls) == 4  # the fourth starts at 30 ms, before the deadline
    np.testing.assert_array_equal(out.visit_counts.sum(axis=1), [4, 4])

    late = search(root, model, config, np.random.default_rng(0), deadline=time.perf_counter() - 1)
    assert (late.simulations == 0).all() and (late.visit_counts == 0).all()
    np.testing.assert_array_equal(late.actions, np.asarray(root.policy_logits).argmax(axis=1))
