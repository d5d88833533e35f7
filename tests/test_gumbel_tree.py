"""Gumbel mode of the C++ tree (K sampled candidates per node) and masked children.

The tree is driven directly here (traverse / expand_and_backup with a hidden-state pool
in rows ``node * B + b``), as the sampled-mode driver in ``ez_robot.mcts`` does.
"""
import numpy as np
import pytest

from ez_robot.ctree import Tree, considered_visits
from tests.reference_search import considered_visit_sequence, reference_gumbel_search, reference_search
from tests.toy_models import ElementwiseModel, PermutedModel

f32 = np.float32


class MaskedModel:
    """An ElementwiseModel whose leaves drop the candidates with logits below ``cut``
    (the best one always stays), as a caller drops duplicate samples."""

    def __init__(self, model, cut=-1.0):
        self.model, self.cut = model, f32(cut)

    def __call__(self, hidden, actions, reset_mask):
        next_hidden, value_prefix, value, logits = self.model(hidden, actions, reset_mask)
        keep = (logits >= self.cut) | (logits == logits.max(axis=1, keepdims=True))
        return next_hidden, value_prefix, value, np.where(keep, logits, -np.inf).astype(f32)


class StickyBandit:
    """The root's action picks an arm; every node below is worth ``values[arm]`` and no
    step pays a reward, so with discount 1 Q(root, a) = values[a] exactly."""

    def __init__(self, values):
        self.values = np.asarray(values, f32)

    def root(self, batch):
        k = len(self.values)
        hidden = (np.zeros(batch, f32), np.zeros(batch, bool))
        return hidden, np.zeros(batch, f32), np.zeros(batch, f32), np.zeros((batch, k), f32)

    def __call__(self, hidden, actions, reset_mask):
        value, started = hidden
        value = np.where(started, value, self.values[actions]).astype(f32)
        batch, k = len(actions), len(self.values)
        return (value, np.ones(batch, bool)), np.zeros(batch, f32), value, np.zeros((batch, k), f32)


def random_root(model, batch, seed, mask_share=0.3):
    """Root outputs of ``model`` with random logits, some of them -inf (never a whole row)."""
    rng = np.random.default_rng(seed)
    root = model.root(batch, seed)
    k = root.policy_logits.shape[1]
    logits = rng.normal(0.0, 2.0, (batch, k)).astype(f32)
    masked = rng.random((batch, k)) < mask_share
    masked[np.arange(batch), rng.integers(k, size=batch)] = False
    logits[masked] = -np.inf
    return root.hidden, root.value_prefix, root.value, logits


def run_tree(recurrent_fn, hidden, value_prefix, value, logits, sims, *, stop_after=None, noise=None,
             noise_fraction=0.0, record_root_picks=False, first_visits=0, **params):
    """Runs ``stop_after`` (default all) of ``sims`` simulations on one batched tree;
    ``first_visits`` > 0: the root's first round in calls of at most that many simulations
    (``traverse_first_visits``), the rest one at a time."""
    batch, k = logits.shape
    tree = Tree(batch, k, sims, **params)
    tree.reset(value_prefix, value, logits, noise, noise_fraction)
    pool = [np.empty(((sims + 1) * batch,) + h.shape[1:], h.dtype) for h in hidden]
    for p, h in zip(pool, hidden):
        p[:batch] = h
    picks = []  # [simulation] (root child picked, its visit count before)
    total = sims if stop_after is None else stop_after
    done = 0
    while first_visits and (n := min(first_visits, tree.first_visits_left(), total - done)) > 0:
        rows, actions, reset = tree.traverse_first_visits(n)
        assert (rows == np.tile(np.arange(batch), n)).all() and not reset.any()  # root children only
        next_hidden, vp, v, step_logits = recurrent_fn(tuple(p[rows] for p in pool), actions, reset)
        for p, h in zip(pool, next_hidden):
            p[(done + 1) * batch:(done + 1 + n) * batch] = h
        tree.expand_and_backup_first_visits(vp, v, step_logits)
        done += n
    for s in range(done, total):
        before = tree.root_visit_counts()
        rows, actions, reset = tree.traverse()
        next_hidden, vp, v, step_logits = recurrent_fn(tuple(p[rows] for p in pool), actions, reset)
        for p, h in zip(pool, next_hidden):
            p[(s + 1) * batch:(s + 2) * batch] = h
        tree.expand_and_backup(vp, v, step_logits)
        if record_root_picks:
            child = (tree.root_visit_counts() - before).argmax(axis=1)
            picks.append((child, before[np.arange(batch), child]))
    return (tree, picks) if record_root_picks else tree


def readouts(tree):
    return dict(visits=tree.root_visit_counts(), value=tree.root_values(), policy=tree.improved_policy(),
                q=tree.root_completed_q(), best=tree.best_actions(), best_greedy=tree.best_actions(gumbel=False),
                considered=tree.root_considered())


# --- the considered-visits sequence (sequential halving) ---

def test_considered_visit_sequence_hand_computed():
    # m = 16, n = 32: ceil(log2 16) = 4; 16 survivors get max(1, 32 // 64) = 1 round, 8 get
    # 32 // 32 = 1, 4 get 32 // 16 = 2 rounds, which fills the 32.
    expected = [0] * 16 + [1] * 8 + [2] * 4 + [3] * 4
    np.testing.assert_array_equal(considered_visits(16, 32), expected)
    # m = 4, n = 10: log2 = 2; 4 survivors get 1 round, then 2 survivors get 10 // 4 = 2
    # rounds (1, 1, 2, 2) and 2 more rounds, cut at 10.
    np.testing.assert_array_equal(considered_visits(4, 10), [0, 0, 0, 0, 1, 1, 2, 2, 3, 3])
    np.testing.assert_array_equal(considered_visits(1, 5), [0, 1, 2, 3, 4])
    assert considered_visits(3, 0).shape == (0,)


def test_considered_visit_sequence_matches_reference():
    for m in range(1, 34):
        for n in range(0, 100, 3):
            np.testing.assert_array_equal(considered_visits(m, n), considered_visit_sequence(m, n), err_msg=f"{m}, {n}")


@pytest.mark.parametrize("m,n", [(4, 10), (16, 32), (5, 40), (3, 7)])
def test_root_follows_the_sequence(m, n):
    model = ElementwiseModel(16, 0)
    hidden, vp, v, logits = random_root(model, 3, 1, mask_share=0.0)
    noise = np.random.default_rng(2).gumbel(size=logits.shape).astype(f32)
    tree, picks = run_tree(model, hidden, vp, v, logits, n, noise=noise, record_root_picks=True, gumbel=True,
                           max_considered=m)
    sequence = considered_visits(m, n)
    for s, (child, visits_before) in enumerate(picks):
        np.testing.assert_array_equal(visits_before, np.full(3, sequence[s]))
        assert tree.root_considered()[np.arange(3), child].all()


# --- exact agreement with the pure-Python reference ---

PARITY_CASES = [  # (batch, K, simulations, stop_after, max_considered, noise, lstm_horizon)
    (1, 1, 5, None, 16, True, 5), (2, 2, 8, None, 1, False, 5), (3, 2, 13, 6, 2, True, 2),
    (3, 3, 17, None, 2, True, 2), (4, 3, 10, 1, 16, True, 5), (4, 5, 33, None, 4, True, 3),
    (2, 5, 64, 40, 16, False, 5), (6, 5, 20, None, 2, False, 3), (1, 16, 1, None, 8, True, 5),
    (5, 16, 64, None, 16, True, 5), (3, 16, 64, None, 4, True, 2), (6, 16, 50, 23, 8, True, 4),
    (2, 16, 64, None, 3, False, 5), (2, 16, 40, 0, 5, True, 5),
]


@pytest.mark.parametrize("batch,k,sims,stop,max_considered,noise,horizon", PARITY_CASES)
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("first_visits", [0, 3, 64], ids=["one-by-one", "first-round-by-3", "first-round-at-once"])
def test_matches_python_reference(batch, k, sims, stop, max_considered, noise, horizon, seed, first_visits):
    model = MaskedModel(ElementwiseModel(k, seed), cut=-1.5)
    hidden, vp, v, logits = random_root(model.model, batch, seed + 10)
    g = np.random.default_rng(seed).gumbel(size=(batch, k)).astype(f32) if noise else None
    params = dict(discount=0.98, lstm_horizon=horizon, min_max_epsilon=0.01, c_visit=50.0, c_scale=0.1,
                  max_considered=max_considered)
    tree = run_tree(model, hidden, vp, v, logits, sims, stop_after=stop, noise=g, gumbel=True,
                    first_visits=first_visits, **params)
    got = readouts(tree)
    done = sims if stop is None else stop
    assert tree.simulations_done == done
    np.testing.assert_array_equal(got["visits"].sum(axis=1), np.full(batch, done))
    for b in range(batch):
        ref = reference_gumbel_search(
            tuple(h[b:b + 1] for h in hidden), vp[b], v[b], logits[b], model, num_simulations=sims, stop_after=stop,
            gumbel=None if g is None else g[b], **params)
        np.testing.assert_array_equal(got["visits"][b], ref.visit_counts)
        assert got["value"][b] == f32(ref.root_value)
        np.testing.assert_array_equal(got["policy"][b], ref.improved_policy.astype(f32))
        np.testing.assert_array_equal(got["q"][b], ref.completed_q.astype(f32))
        assert got["best"][b] == ref.best_action
        assert got["best_greedy"][b] == ref.best_action_without_noise
        np.testing.assert_array_equal(got["considered"][b], ref.considered)


@pytest.mark.parametrize("noise", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_puct_with_masked_children_matches_reference(seed, noise):
    k, batch, sims = 6, 4, 40
    model = MaskedModel(ElementwiseModel(k, seed), cut=-1.0)
    hidden, vp, v, logits = random_root(model.model, batch, seed)
    dirichlet = np.random.default_rng(seed).dirichlet(np.full(k, 0.3), size=batch).astype(f32) if noise else None
    tree = run_tree(model, hidden, vp, v, logits, sims, noise=dirichlet, noise_fraction=0.25, discount=0.98,
                    lstm_horizon=3)
    for b in range(batch):
        counts, value = reference_search(
            tuple(h[b:b + 1] for h in hidden), vp[b], v[b], logits[b], model, num_simulations=sims, discount=0.98,
            lstm_horizon=3, noise=None if dirichlet is None else dirichlet[b], noise_fraction=0.25)
        np.testing.assert_array_equal(tree.root_visit_counts()[b], counts)
        assert tree.root_values()[b] == f32(value)
        assert all(p == 0.0 for p, masked in zip(tree.node(b, 0)["prior"], np.isneginf(logits[b])) if masked)
    assert np.isneginf(logits).any() and (tree.root_visit_counts()[np.isneginf(logits)] == 0).all()


class CostlyBandit:
    """Every step costs 1 and the value head says 0; candidate 1 never exists."""

    def __call__(self, hidden, actions, reset_mask):
        (prefix,) = hidden
        prefix = (np.where(reset_mask, f32(0), prefix) - 1).astype(f32)
        logits = np.zeros((len(actions), 3), f32)
        logits[:, 1] = -np.inf
        return (prefix,), prefix, np.zeros(len(actions), f32), logits


@pytest.mark.parametrize("gumbel", [False, True])
def test_a_masked_child_is_skipped_even_where_its_estimate_would_win(gumbel):
    # Visited children have negative Q; pUCT's estimate for an unvisited child (0 at the
    # root) normalizes to the top of the range, so only the mask keeps candidate 1 out.
    logits = np.array([[0.0, -np.inf, 0.0]], f32)
    tree = run_tree(CostlyBandit(), (np.zeros(1, f32),), np.zeros(1, f32), np.zeros(1, f32), logits, 40,
                    gumbel=gumbel)
    assert tree.root_visit_counts()[0, 1] == 0
    assert all(tree.node(0, node)["children"][1] == -2 for node in range(41))


# --- invariants ---

@pytest.mark.parametrize("gumbel", [True, False])
def test_masked_children_are_never_visited_and_get_no_policy_mass(gumbel):
    k, batch, sims = 8, 5, 60
    model = MaskedModel(ElementwiseModel(k, 3), cut=0.0)
    hidden, vp, v, logits = random_root(model.model, batch, 4, mask_share=0.5)
    tree = run_tree(model, hidden, vp, v, logits, sims, gumbel=gumbel, max_considered=k)
    masked = np.isneginf(logits)
    assert masked.any()
    assert (tree.root_visit_counts()[masked] == 0).all()
    assert (tree.improved_policy()[masked] == 0).all()
    assert np.isnan(tree.root_completed_q()[masked]).all()
    assert not tree.root_considered()[masked].any()
    assert not masked[np.arange(batch), tree.best_actions()].any()
    below = 0
    for b in range(batch):  # below the root too: a masked candidate never gets a node
        for node in range(sims + 1):
            info = tree.node(b, node)
            for a in range(k):
                if info["children"][a] == -2:  # masked
                    below += 1
                    assert info["prior"][a] == 0.0
                    assert info["log_prior"][a] == -np.inf or (not gumbel and node > 0)
                else:
                    assert info["log_prior"][a] > -np.inf or (not gumbel and node > 0)
    assert below > batch * sims  # the toy masks plenty of leaf candidates


@pytest.mark.parametrize("seed", range(3))
def test_only_the_top_m_of_gumbel_plus_logprior_are_visited(seed):
    k, m, batch = 16, 4, 6
    model = ElementwiseModel(k, seed)
    hidden, vp, v, logits = random_root(model, batch, seed, mask_share=0.2)
    g = np.random.default_rng(seed).gumbel(size=(batch, k)).astype(f32)
    tree = run_tree(model, hidden, vp, v, logits, 64, noise=g, gumbel=True, max_considered=m)
    score = g.astype(np.float64) + logits  # log pi differs from the logits by a per-row constant
    top = np.zeros((batch, k), bool)
    top[np.arange(batch)[:, None], np.argsort(-score, axis=1, kind="stable")[:, :m]] = True
    np.testing.assert_array_equal(tree.root_considered(), top)
    np.testing.assert_array_equal(tree.root_visit_counts() > 0, top)
    assert top[np.arange(batch), tree.best_actions()].all()


@pytest.mark.parametrize("k,max_considered", [(8, 8), (8, 3), (16, 16), (5, 1)])
def test_visit_counts_sum_to_simulations_done_at_any_stop(k, max_considered):
    model = MaskedModel(ElementwiseModel(k, 5))
    hidden, vp, v, logits = random_root(model.model, 3, 6)
    g = np.random.default_rng(0).gumbel(size=logits.shape).astype(f32)
    for stop in [0, 1, 2, 7, 20]:
        tree = run_tree(model, hidden, vp, v, logits, 20, stop_after=stop, noise=g, gumbel=True,
                        max_considered=max_considered)
        np.testing.assert_array_equal(tree.root_visit_counts().sum(axis=1), np.full(3, stop))
        policy = tree.improved_policy()
        np.testing.assert_allclose(policy.sum(axis=1), 1.0, rtol=1e-6)
        assert tree.root_considered()[np.arange(3), tree.best_actions()].all()
        if stop == 0:  # nothing searched: the argmax of g + log pi
            np.testing.assert_array_equal(tree.best_actions(), np.argmax(g + logits, axis=1))
            np.testing.assert_array_equal(tree.best_actions(gumbel=False), np.argmax(logits, axis=1))
            np.testing.assert_array_equal(tree.root_values(), v)
            np.testing.assert_array_equal(tree.root_completed_q(), np.where(np.isneginf(logits), np.nan,
                                                                            v[:, None]).astype(f32))


def test_a_tree_with_no_simulations_acts_on_gumbel_plus_logprior():
    logits = np.array([[0.0, 1.0, -np.inf, 0.5], [2.0, -np.inf, 0.0, 0.0]], f32)
    g = np.array([[1.5, 0.0, 9.0, 0.0], [-3.0, 0.0, 0.0, 0.5]], f32)
    tree = Tree(2, 4, 0, gumbel=True, max_considered=2)
    tree.reset(np.zeros(2, f32), np.array([0.5, -0.5], f32), logits, g)
    np.testing.assert_array_equal(tree.best_actions(), [0, 3])
    np.testing.assert_array_equal(tree.best_actions(gumbel=False), [1, 2])  # the best log pi of the considered
    np.testing.assert_array_equal(tree.root_considered(), [[1, 1, 0, 0], [0, 0, 1, 1]])
    with pytest.raises(RuntimeError, match="all 0 simulations are done"):
        tree.traverse()


@pytest.mark.parametrize("best", [0, 3, 7])
@pytest.mark.parametrize("noise_seed", [None, 0, 1, 2])
def test_bandit_picks_the_best_candidate(best, noise_seed):
    values = np.linspace(-0.7, 0.7, 8)
    values[[best, 7]] = values[[7, best]]  # the largest value on arm `best`
    bandit = StickyBandit(values)
    hidden, vp, v, logits = bandit.root(2)
    g = None if noise_seed is None else np.random.default_rng(noise_seed).gumbel(size=(2, 8)).astype(f32)
    tree = run_tree(bandit, hidden, vp, v, logits, 64, noise=g, gumbel=True, discount=1.0, max_considered=8,
                    c_scale=1.0)
    np.testing.assert_array_equal(tree.best_actions(), [best, best])
    np.testing.assert_array_equal(tree.improved_policy().argmax(axis=1), [best, best])
    assert (tree.improved_policy()[:, best] > 0.5).all()
    # Every arm was visited (8 considered, 64 simulations), so its completed Q is its value.
    np.testing.assert_array_equal(tree.root_completed_q(), np.tile(values.astype(f32), (2, 1)))
    assert (tree.root_visit_counts()[:, best] == tree.root_visit_counts().max(axis=1)).all()


@pytest.mark.parametrize("seed", range(4))
def test_permuting_the_candidates_permutes_the_search(seed):
    k, batch = 6, 4
    base = MaskedModel(ElementwiseModel(k, seed), cut=-1.0)
    perm = np.random.default_rng(seed + 50).permutation(k)
    hidden, vp, v, logits = random_root(base.model, batch, seed)
    g = np.random.default_rng(seed).gumbel(size=(batch, k)).astype(f32)
    params = dict(gumbel=True, max_considered=4, lstm_horizon=3)
    tree = run_tree(base, hidden, vp, v, logits, 40, noise=g, **params)
    permuted = run_tree(PermutedModel(base, perm), hidden, vp, v, logits[:, perm], 40, noise=g[:, perm], **params)
    np.testing.assert_array_equal(permuted.root_visit_counts(), tree.root_visit_counts()[:, perm])
    np.testing.assert_array_equal(permuted.root_considered(), tree.root_considered()[:, perm])
    np.testing.assert_allclose(permuted.improved_policy(), tree.improved_policy()[:, perm], rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(permuted.root_completed_q(), tree.root_completed_q()[:, perm], rtol=1e-6)
    np.testing.assert_allclose(permuted.root_values(), tree.root_values(), rtol=1e-6)
    np.testing.assert_array_equal(perm[permuted.best_actions()], tree.best_actions())


def test_a_batch_equals_each_root_searched_alone():
    k, batch, sims = 5, 7, 30
    model = MaskedModel(ElementwiseModel(k, 9))
    hidden, vp, v, logits = random_root(model.model, batch, 9, mask_share=0.4)  # so m differs per root
    g = np.random.default_rng(9).gumbel(size=(batch, k)).astype(f32)
    params = dict(gumbel=True, max_considered=3, stop_after=21)
    batched = readouts(run_tree(model, hidden, vp, v, logits, sims, noise=g, **params))
    for b in range(batch):
        one = readouts(run_tree(model, tuple(h[b:b + 1] for h in hidden), vp[b:b + 1], v[b:b + 1],
                                logits[b:b + 1], sims, noise=g[b:b + 1], **params))
        for name, value in one.items():
            np.testing.assert_array_equal(value[0], batched[name][b], err_msg=name)


def test_puct_readouts_use_the_same_formulas():
    model = ElementwiseModel(6, 2)
    hidden, vp, v, logits = random_root(model, 3, 2, mask_share=0.0)
    tree = run_tree(model, hidden, vp, v, logits, 30)
    visits = tree.root_visit_counts()
    assert tree.root_considered().all()
    # The most visited child, ties broken by the improved-policy score.
    assert (visits[np.arange(3), tree.best_actions()] == visits.max(axis=1)).all()
    np.testing.assert_allclose(tree.improved_policy().sum(axis=1), 1.0, rtol=1e-6)
    q = tree.root_q_values()
    np.testing.assert_array_equal(tree.root_completed_q()[visits > 0], q[visits > 0])


# --- bad input ---

@pytest.mark.parametrize("gumbel", [True, False])
def test_a_row_with_no_valid_candidate_is_an_error(gumbel):
    tree = Tree(2, 3, 4, gumbel=gumbel)
    logits = np.zeros((2, 3), f32)
    logits[1] = -np.inf
    with pytest.raises(ValueError, match=r"root policy_logits has no valid action at \[1\]: every logit is -inf"):
        tree.reset(np.zeros(2, f32), np.zeros(2, f32), logits)
    logits[1, 0] = 0.0
    tree.reset(np.zeros(2, f32), np.zeros(2, f32), logits)
    tree.traverse()
    leaf_logits = np.zeros((2, 3), f32)
    leaf_logits[0] = -np.inf
    with pytest.raises(ValueError, match=r"policy_logits has no valid action at \[0\]"):
        tree.expand_and_backup(np.zeros(2, f32), np.zeros(2, f32), leaf_logits)
    tree.expand_and_backup(np.zeros(2, f32), np.zeros(2, f32), np.zeros((2, 3), f32))  # nothing changed
    assert tree.simulations_done == 1


@pytest.mark.parametrize("gumbel", [True, False])
@pytest.mark.parametrize("bad,shown", [(np.nan, "nan"), (np.inf, "inf")])
def test_nan_and_plus_inf_logits_stay_errors(gumbel, bad, shown):
    tree = Tree(2, 3, 4, gumbel=gumbel)
    logits = np.zeros((2, 3), f32)
    logits[1, 2] = bad
    with pytest.raises(ValueError, match=rf"root policy_logits has a non-finite value \({shown}\) at \[1, 2\]"):
        tree.reset(np.zeros(2, f32), np.zeros(2, f32), logits)
    tree.reset(np.zeros(2, f32), np.zeros(2, f32), np.zeros((2, 3), f32))
    tree.traverse()
    with pytest.raises(ValueError, match=rf"policy_logits has a non-finite value \({shown}\) at \[1, 2\]"):
        tree.expand_and_backup(np.zeros(2, f32), np.zeros(2, f32), logits)


def test_gumbel_noise_must_be_finite_but_may_be_negative():
    tree = Tree(1, 3, 2, gumbel=True)
    zeros = np.zeros(1, f32), np.zeros(1, f32), np.zeros((1, 3), f32)
    with pytest.raises(ValueError, match=r"noise has a non-finite value \(nan\) at \[0, 1\]"):
        tree.reset(*zeros, np.array([[0.0, np.nan, 1.0]], f32))
    tree.reset(*zeros, np.array([[-3.0, 2.0, -0.5]], f32), 7.0)  # noise_fraction is ignored
    assert tree.best_actions()[0] == 1 and tree.best_actions(gumbel=False)[0] == 0


@pytest.mark.parametrize("kwargs,match", [
    ({"c_scale": 0.0}, r"c_scale must be a positive finite number, got 0.0"),
    ({"c_scale": -1.0}, "c_scale must be a positive"), ({"c_scale": float("nan")}, "c_scale must be"),
    ({"c_visit": -1.0}, r"c_visit must be a non-negative finite number, got -1.0"),
    ({"c_visit": float("inf")}, "c_visit must be"),
    ({"max_considered": 0}, r"max_considered must be >= 1, got 0"),
])
def test_bad_gumbel_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Tree(2, 3, 5, gumbel=True, **kwargs)


def test_readouts_need_a_reset_and_the_sequence_needs_candidates():
    tree = Tree(1, 3, 2, gumbel=True)
    for name in ["improved_policy", "root_completed_q", "best_actions", "root_considered"]:
        with pytest.raises(RuntimeError, match=rf"reset\(\) must be called before {name}\(\)"):
            getattr(tree, name)()
    with pytest.raises(ValueError, match="num_considered must be >= 1, got 0"):
        considered_visits(0, 5)


# --- the root's first round in one network call ---

@pytest.mark.parametrize("m,sims,batch", [(16, 32, 3), (4, 10, 2), (8, 5, 2), (1, 6, 1)])
def test_first_visits_come_in_the_order_the_simulations_take_them(m, sims, batch):
    """traverse_first_visits names the root children that one-at-a-time traverses pick, in
    their order: the node numbers (and so the candidates drawn below each) are the same."""
    model = ElementwiseModel(16, 3)
    hidden, vp, v, logits = random_root(model, batch, 4, mask_share=0.0)
    noise = np.random.default_rng(5).gumbel(size=logits.shape).astype(f32)
    params = dict(gumbel=True, max_considered=m)
    _, picks = run_tree(model, hidden, vp, v, logits, sims, noise=noise, record_root_picks=True, **params)
    tree = Tree(batch, 16, sims, **params)
    tree.reset(vp, v, logits, noise)
    first = min(m, sims)
    assert tree.first_visits_left() == first
    rows, actions, reset = tree.traverse_first_visits(first)
    np.testing.assert_array_equal(actions.reshape(first, batch), np.stack([child for child, _ in picks[:first]]))
    assert tree.first_visits_left() == 0  # a round waits for its backup
    next_hidden, step_vp, step_v, step_logits = model(tuple(h[rows] for h in hidden), actions, reset)
    tree.expand_and_backup_first_visits(step_vp, step_v, step_logits)
    assert tree.simulations_done == first and tree.first_visits_left() == 0


def test_first_visits_left_and_its_errors():
    model = ElementwiseModel(5, 0)
    hidden, vp, v, logits = random_root(model, 2, 1, mask_share=0.0)
    logits[0, 1] = -np.inf  # tree 0 has 4 candidates, tree 1 five: 4 first visits in both
    puct = Tree(2, 5, 8)
    puct.reset(vp, v, logits)
    assert puct.first_visits_left() == 0  # pUCT: each simulation depends on the last
    tree = Tree(2, 5, 8, gumbel=True)
    with pytest.raises(RuntimeError, match="reset"):
        tree.traverse_first_visits(1)
    tree.reset(vp, v, logits)
    assert tree.first_visits_left() == 4
    with pytest.raises(RuntimeError, match="4 first visits are left"):
        tree.traverse_first_visits(5)
    with pytest.raises(ValueError, match="k >= 1"):
        tree.traverse_first_visits(0)
    with pytest.raises(RuntimeError, match="needs a traverse_first_visits"):
        tree.expand_and_backup_first_visits(vp, v, logits)
    rows, actions, reset = tree.traverse_first_visits(2)
    with pytest.raises(RuntimeError, match="needs a traverse"):
        tree.expand_and_backup(vp, v, logits)  # the round's rows, not one simulation's
    _, step_vp, step_v, step_logits = model(tuple(h[rows] for h in hidden), actions, reset)
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        tree.expand_and_backup_first_visits(step_vp[:2], step_v, step_logits)
    bad = step_v.copy()
    bad[3] = np.nan
    with pytest.raises(ValueError, match="value"):
        tree.expand_and_backup_first_visits(step_vp, bad, step_logits)
    tree.expand_and_backup_first_visits(step_vp, step_v, step_logits)
    assert tree.first_visits_left() == 2
    tree.traverse()  # one simulation on its own: what follows is no longer a fixed round
    assert tree.first_visits_left() == 0
