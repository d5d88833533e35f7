"""The sampled search's candidate draws below the root: drawn ahead in blocks and turned into
candidates in C++, they must be the draws :func:`sample_candidates` makes node by node, from
the same random stream, and leave the generator where those would."""
import numpy as np
import pytest

from ez_robot import RootOutput, SearchConfig, ctree, search
from ez_robot.action_modes import ActionSpec, InteriorCandidates, bin_values, sample_candidates

GAUSSIAN = ActionSpec("gaussian", dims=3)
FACTORIZED = ActionSpec("factorized", dims=3, bins=5)
SPECS = pytest.mark.parametrize("spec", [GAUSSIAN, FACTORIZED], ids=["gaussian", "factorized"])


def node_params(spec, simulations, batch, seed=0):
    """Policies of the nodes of one search, wide enough that factorized draws repeat."""
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((batch, spec.policy_size)) * rng.uniform(0.2, 4.0)).astype(np.float32)
            for _ in range(simulations)]


@SPECS
@pytest.mark.parametrize("draws, slots, bound", [(16, 16, 1.0), (4, 6, 0.999), (1, 3, 1.0)])
def test_the_nodes_draw_what_sample_candidates_draws_node_by_node(spec, draws, slots, bound):
    simulations, batch = 9, 3
    per_node, ahead = np.random.default_rng(7), np.random.default_rng(7)
    interior = InteriorCandidates(spec, batch, draws, slots, ahead, simulations, bound)
    interior.BLOCK_NUMBERS = 2 * batch * draws * spec.dims  # blocks of two simulations: 5 rng calls
    for simulation, params in enumerate(node_params(spec, simulations, batch)):
        expected_actions, expected_logits = sample_candidates(spec, params, draws, per_node, root=False, bound=bound)
        actions = np.full((batch, slots, spec.dims), np.nan, np.float32)
        logits = interior(simulation, params, actions)
        np.testing.assert_array_equal(actions[:, :draws], expected_actions)
        np.testing.assert_array_equal(logits[:, :draws], expected_logits)
        assert (logits[:, draws:] == -np.inf).all()  # the tree's spare child slots stay masked
        if spec.mode == "factorized":
            assert np.isin(actions[:, :draws], bin_values(spec.bins)).all() and np.isinf(logits).any()
    interior.finish(simulations)
    assert ahead.random() == per_node.random()


@SPECS
@pytest.mark.parametrize("used", [0, 1, 5, 31])
def test_an_early_stop_leaves_the_generator_where_the_nodes_drawn_leave_it(spec, used):
    """A deadline stops the search after `used` simulations of 32: the numbers drawn ahead
    for the others go back, so the next search draws what it would have."""
    per_node, ahead = np.random.default_rng(3), np.random.default_rng(3)
    interior = InteriorCandidates(spec, 2, 4, 4, ahead, 32)
    interior.BLOCK_NUMBERS = 8 * 2 * 4 * spec.dims  # 8 simulations a block: stops inside a block too
    for simulation, params in enumerate(node_params(spec, used, 2)):
        sample_candidates(spec, params, 4, per_node, root=False)
        interior(simulation, params, np.empty((2, 4, spec.dims), np.float32))
    interior.finish(used)
    assert ahead.random() == per_node.random()


class CountingGenerator(np.random.Generator):
    """Counts the calls that draw numbers (``calls``), and the Gumbel draws apart (``gumbel_calls``)."""

    def __init__(self, seed):
        super().__init__(np.random.PCG64(seed))
        self.calls = 0
        self.gumbel_calls = 0

    def gumbel(self, *args, **kwargs):
        self.gumbel_calls += 1
        return super().gumbel(*args, **kwargs)

    def standard_normal(self, *args, **kwargs):
        self.calls += 1
        return super().standard_normal(*args, **kwargs)

    def random(self, *args, **kwargs):
        self.calls += 1
        return super().random(*args, **kwargs)


@SPECS
def test_a_search_draws_its_numbers_in_a_few_calls_not_one_per_node(spec):
    """The random numbers of a 32-simulation search come from a handful of generator calls
    (the root's two draws, the nodes' block); drawing per node made it a numpy call (and a
    dozen more to shape them) for each of the 32 nodes."""
    batch, hidden = 2, 4
    rng = np.random.default_rng(0)
    weights = rng.standard_normal((hidden + spec.dims, spec.policy_size)).astype(np.float32)

    def recurrent_fn(h, actions, reset_mask):
        features = np.concatenate([h, actions], axis=1)
        rows = len(actions)  # B, or k * B when the root's first round goes in one call
        return np.tanh(h + actions.sum(1, keepdims=True)), np.zeros(rows), features[:, 0], features @ weights

    root = RootOutput(rng.standard_normal((batch, hidden)).astype(np.float32), np.zeros(batch), np.zeros(batch),
                      rng.standard_normal((batch, spec.policy_size)).astype(np.float32))
    counting = CountingGenerator(5)
    out = search(root, recurrent_fn, SearchConfig(num_simulations=32, add_noise=False), counting, action_spec=spec)
    assert out.simulations.tolist() == [32, 32] and out.max_depth.max() >= 2  # nodes below the root drew
    assert counting.calls <= 3


def test_inverse_cdf_bins_and_merged_duplicates_golden():
    """Two equally likely bins: a uniform below 1/2 picks the first, 1/2 itself and above the
    second (the CDF values <= u, as numpy's searchsorted side="right"); at temperature 2 the
    logits (2 ln 3, 0) give the bins 3/4 and 1/4.  A later copy of an action counts at its
    first copy."""
    params = np.zeros((1, 2), np.float32)  # one dimension, two bins
    uniforms = np.array([[[0.0], [0.4999], [0.5], [0.9999]]])
    actions = np.empty((1, 5, 1), np.float32)
    ctree.factorized_candidates(params, uniforms, bin_values(2), actions)
    assert actions[0, :4, 0].tolist() == [-1.0, -1.0, 1.0, 1.0]
    warm = np.array([[2 * np.log(3.0), 0.0]])  # float64 params are read as such
    ctree.factorized_candidates(warm, np.array([[[0.74], [0.76]]]), bin_values(2), actions, 2.0)
    assert actions[0, :2, 0].tolist() == [-1.0, 1.0]

    rows = np.array([[[0, 1], [1, 1], [0, 1], [0, 1], [1, 1], [7, 7]]], np.float32)
    counts = np.full((1, 6), -1, np.int32)
    ctree.duplicate_counts(rows, 5, counts)  # the sixth slot is past the draws
    assert counts.tolist() == [[3, 2, 0, 0, 0, 0]]


def test_child_rows_gathers_what_indexing_does_and_names_bad_input():
    pool = np.arange(5 * 4 * 3, dtype=np.float32).reshape(5, 4, 3)
    rows, children = np.array([4, 0, 2], np.int32), np.array([1, 3, 0], np.int32)
    np.testing.assert_array_equal(ctree.child_rows(pool, rows, children), pool[rows, children])
    with pytest.raises(IndexError, match=r"\(5, 1\) outside the pool's \[5, 4\]"):
        ctree.child_rows(pool, np.array([5], np.int32), np.array([1], np.int32))
    with pytest.raises(TypeError, match="pool must have dtype float32, got float64"):
        ctree.child_rows(pool.astype(np.float64), rows, children)


def test_the_draws_name_bad_arrays():
    actions = np.empty((2, 4, 3), np.float32)
    with pytest.raises(TypeError, match="noise must have dtype float64, got float32"):
        ctree.gaussian_candidates(np.zeros((2, 6), np.float32), np.zeros((2, 4, 3), np.float32), 1.0, actions)
    with pytest.raises(ValueError, match=r"params must have shape \(2, 6\), got \(2, 5\)"):
        ctree.gaussian_candidates(np.zeros((2, 5), np.float32), np.zeros((2, 4, 3)), 1.0, actions)
    with pytest.raises(ValueError, match="actions has 4 slots per row for 5 draws"):
        ctree.factorized_candidates(np.zeros((2, 15), np.float32), np.zeros((2, 5, 3)), bin_values(5), actions)
    with pytest.raises(ValueError, match="actions must be writable"):
        actions.flags.writeable = False
        ctree.gaussian_candidates(np.zeros((2, 6), np.float32), np.zeros((2, 4, 3)), 1.0, actions)
    with pytest.raises(ValueError, match=r"draws must be in \[1, slots = 4\], got 5"):
        InteriorCandidates(GAUSSIAN, 2, 5, 4, np.random.default_rng(0), 8)


@SPECS
@pytest.mark.parametrize("together, ran", [(False, 5), (True, 20)], ids=["one-by-one", "first-round-together"])
def test_a_search_its_deadline_stops_uses_the_numbers_of_the_simulations_that_ran(spec, together, ran, monkeypatch):
    """A clock that moves one second per model call and a deadline of 4.5 s: five calls
    run (the first of them the root's 16 first visits when they go together), and the
    generator is where a search of that many simulations leaves it."""
    import time

    now = [100.0]

    def recurrent_fn(h, actions, reset_mask):
        now[0] += 1.0
        rows = len(actions)
        return h, np.zeros(rows), np.zeros(rows), np.tile(np.linspace(-1, 1, spec.policy_size, dtype=np.float32),
                                                          (rows, 1))

    monkeypatch.setattr(time, "perf_counter", lambda: now[0])
    root = RootOutput(np.zeros((1, 2), np.float32), np.zeros(1), np.zeros(1), np.zeros((1, spec.policy_size)))
    stopped, whole = np.random.default_rng(9), np.random.default_rng(9)
    out = search(root, recurrent_fn, SearchConfig(num_simulations=32), stopped, deadline=104.5, action_spec=spec,
                 first_visits_together=together)
    search(root, recurrent_fn, SearchConfig(num_simulations=ran), whole, action_spec=spec)
    assert out.simulations.tolist() == [ran] and stopped.random() == whole.random()
    with pytest.raises(ValueError, match="deadline must be a time.perf_counter"):
        search(root, recurrent_fn, SearchConfig(num_simulations=2), whole, deadline=float("nan"), action_spec=spec)


@SPECS
@pytest.mark.parametrize("add_noise", [True, False], ids=["self-play", "greedy"])
@pytest.mark.parametrize("simulations", [32, 50, 7])
@pytest.mark.parametrize("ezv2_tree", [False, True], ids=["our-tree", "ezv2-tree"])
def test_the_first_round_in_one_call_is_the_same_search(spec, add_noise, simulations, ezv2_tree):
    """The sampled search sends the root's first visits to the network together: one call
    of 16 * B rows instead of 16 calls of B.  With a model whose rows do not interact, the
    search is the same to the bit: candidates, visits, values, improved policy, action (with
    either tree's conventions)."""
    batch, hidden = 3, 4
    rng = np.random.default_rng(1)
    weights = rng.standard_normal((hidden + spec.dims, spec.policy_size)).astype(np.float32)
    calls = []

    def recurrent_fn(h, actions, reset_mask):
        calls.append(len(actions))
        features = np.concatenate([h, actions], axis=1)
        out = np.tanh(h * 1.3 + actions.sum(1, keepdims=True)).astype(np.float32)
        logits = (features[:, :, None] * weights[None]).sum(axis=1)  # each row alone (a matmul's rounding
        # depends on how many rows it is given)
        return out, np.tanh(features[:, 1]), features[:, 0] * 2.0, logits.astype(np.float32)

    root = RootOutput(rng.standard_normal((batch, hidden)).astype(np.float32), np.zeros(batch, np.float32),
                      np.zeros(batch, np.float32), rng.standard_normal((batch, spec.policy_size)).astype(np.float32))
    config = SearchConfig(num_simulations=simulations, add_noise=add_noise, ezv2_tree=ezv2_tree)
    together = search(root, recurrent_fn, config, np.random.default_rng(4), action_spec=spec)
    calls_together, calls[:] = list(calls), []
    alone = search(root, recurrent_fn, config, np.random.default_rng(4), action_spec=spec, first_visits_together=False)
    first = calls_together[0] // batch  # 16 (or fewer: factorized draws merge duplicates), or all if fewer
    assert 2 <= first <= min(16, simulations) and calls_together == [first * batch] + [batch] * (simulations - first)
    assert calls == [batch] * simulations
    for field in ("candidates", "visit_counts", "root_values", "root_q_values", "policy", "actions", "max_depth",
                  "simulations"):
        np.testing.assert_array_equal(getattr(together, field), getattr(alone, field), err_msg=field)


def linear_problem(spec, batch, seed, hidden=3):
    """Random roots of ``batch`` rows and a recurrent function linear in state and action."""
    rng = np.random.default_rng(seed)
    weights = rng.standard_normal((hidden + spec.dims, spec.policy_size)).astype(np.float32)

    def recurrent_fn(h, actions, reset_mask):
        features = np.concatenate([h, actions], axis=1)
        return np.tanh(h + actions.sum(1, keepdims=True)), np.zeros(len(actions)), features[:, 0], features @ weights

    root = RootOutput(rng.standard_normal((batch, hidden)).astype(np.float32), np.zeros(batch), np.zeros(batch),
                      rng.standard_normal((batch, spec.policy_size)).astype(np.float32))
    return root, recurrent_fn


@SPECS
def test_gumbel_noise_off_searches_with_g_zero(spec):
    """search.gumbel_noise=false: a self-play search draws no Gumbel noise, and it plays
    what the noise-free read-out of the same tree names; with it on, one draw per search."""
    batch = 4
    root, recurrent_fn = linear_problem(spec, batch, seed=2)
    for noise, calls in ((True, 1), (False, 0)):
        generator = CountingGenerator(5)
        config = SearchConfig(num_simulations=32, gumbel_noise=noise)
        out = search(root, recurrent_fn, config, generator, action_spec=spec)
        assert generator.gumbel_calls == calls
    # g = 0: the played candidate is the most visited one with the best log pi + sigma(q)
    visits = out.visit_counts
    for b in range(batch):
        top = np.flatnonzero(visits[b] == visits[b].max())
        chosen = int(np.flatnonzero((out.candidates[b] == out.actions[b]).all(-1))[0])
        assert chosen in top


@SPECS
@pytest.mark.parametrize("add_noise", [True, False], ids=["self-play", "greedy"])
def test_a_played_policy_target_is_the_one_hot_of_the_played_candidate(spec, add_noise):
    """search.played_policy (train.policy_target=played): the same search, whose policy is
    the one-hot of the candidate it played instead of the improved policy."""
    batch = 5
    root, recurrent_fn = linear_problem(spec, batch, seed=7)
    config = SearchConfig(num_simulations=32, add_noise=add_noise)
    improved = search(root, recurrent_fn, config, np.random.default_rng(3), action_spec=spec)
    played = search(root, recurrent_fn, config.replace(played_policy=True), np.random.default_rng(3), action_spec=spec)
    for field in ("candidates", "visit_counts", "root_values", "root_q_values", "actions"):
        np.testing.assert_array_equal(getattr(played, field), getattr(improved, field), err_msg=field)
    chosen = [int(np.flatnonzero((played.candidates[b] == played.actions[b]).all(-1))[0]) for b in range(batch)]
    np.testing.assert_array_equal(played.policy, np.eye(played.candidates.shape[1], dtype=np.float32)[chosen])
    assert played.policy.dtype == np.float32 and not np.allclose(improved.policy, played.policy)
