"""``search.ezv2_tree``: the C++ tree with EfficientZero V2's tree conventions, against the
plain-Python tree that has one switch per convention (``tests/reference_ezv2_tree.py``;
``benchmarks/peers/ezv2_parity.py`` checks that tree, at V2's side, against V2's own search)."""
import numpy as np
import pytest

from ez_robot.ctree import Tree, ezv2_halving
from tests import reference_ezv2_tree as ref
from tests.test_gumbel_tree import MaskedModel, random_root, readouts, run_tree
from tests.toy_models import ElementwiseModel

f32 = np.float32


def reference(model, hidden, value, logits, sims, noise, discount, horizon):
    """One root searched by the reference tree at V2's side; its read-outs."""
    k = len(logits)
    conv = ref.Conventions(discount=discount, lstm_horizon=horizon, gumbel=noise is not None, **ref.EZV2_TREE)
    tree = ref._Tree(conv, sims, k, 50.0, 0.1, 0.01, np.zeros(k) if noise is None else noise.astype(np.float64),
                     logits.astype(np.float64), float(value))
    hiddens = {0: hidden}
    for _ in range(sims):
        node, action = tree.traverse()
        depth = tree.depth[node]
        reset = np.array([depth > 0 and depth % horizon == 0])
        next_hidden, value_prefix, leaf_value, leaf_logits = model(hiddens[node], np.array([action]), reset)
        tree.expand_and_backup(float(value_prefix[0]), float(leaf_value[0]), leaf_logits[0].astype(np.float64))
        hiddens[len(tree.parent) - 1] = next_hidden
    return dict(visits=np.array([tree.child_visits(0, a) for a in range(k)]), value=tree.root_value(),
                policy=tree.improved_policy(0)[0], q=tree.completed_q(0)[0], best=tree.best_action())


CASES = [  # (batch, K, simulations, lstm_horizon, Gumbel noise)
    (3, 16, 32, 5, False), (2, 16, 32, 1, True), (4, 8, 20, 3, True), (2, 5, 50, 2, False),
    (3, 16, 8, 5, False), (2, 16, 64, 5, True), (2, 3, 12, 4, True),
]


@pytest.mark.parametrize("batch,k,sims,horizon,noise", CASES)
@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("first_visits", [0, 64], ids=["one-by-one", "first-round-at-once"])
def test_the_ezv2_tree_matches_the_reference_at_v2s_side(batch, k, sims, horizon, noise, seed, first_visits):
    model = MaskedModel(ElementwiseModel(k, seed), cut=-1.5)
    hidden, vp, v, logits = random_root(model.model, batch, seed + 10)
    g = np.random.default_rng(seed).gumbel(size=(batch, k)).astype(f32) if noise else None
    tree = run_tree(model, hidden, vp, v, logits, sims, noise=g, gumbel=True, ezv2_tree=True, discount=0.98,
                    lstm_horizon=horizon, max_considered=k, first_visits=first_visits)
    got = readouts(tree)
    for b in range(batch):
        want = reference(model, tuple(h[b:b + 1] for h in hidden), v[b], logits[b], sims, None if g is None else g[b],
                         0.98, horizon)
        np.testing.assert_array_equal(got["visits"][b], want["visits"])
        np.testing.assert_allclose(got["value"][b], want["value"], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(got["policy"][b], want["policy"], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(got["q"][b], want["q"], rtol=1e-6, atol=1e-6)
        assert got["best"][b] == got["best_greedy"][b] == want["best"]


def test_the_ezv2_tree_differs_from_ours():
    """The same inputs through both trees: a switch that changed nothing would be no switch."""
    model = ElementwiseModel(16, 3)
    hidden, vp, v, logits = random_root(model, 4, 5, mask_share=0.0)
    ours, theirs = (readouts(run_tree(model, hidden, vp, v, logits, 32, gumbel=True, ezv2_tree=flag))
                    for flag in (False, True))
    # V2 counts the root's network value as one of 33 backups
    assert not np.allclose(ours["value"], theirs["value"]) and not np.allclose(ours["policy"], theirs["policy"])


def test_the_ezv2_halving_schedule():
    # 32 simulations over 16 candidates: 16 x 1 visit, 8 x 1, 4 x 2, as V2's code has it
    want = np.zeros(32, np.int32)
    want[[15, 23, 31]] = [8, 4, 2]
    np.testing.assert_array_equal(ezv2_halving(16, 32), want)
    for m in range(1, 20):
        for n in range(0, 80, 7):
            want = np.zeros(n, np.int32)
            for s, keep in (ref.their_phase_ends(n, m) if m > 1 else {}).items():
                want[s] = max(keep, 1)  # V2 would keep 0 after halving 1: we keep the last one
            np.testing.assert_array_equal(ezv2_halving(m, n), want, err_msg=f"m {m}, n {n}")


def test_ezv2_tree_needs_the_gumbel_mode():
    with pytest.raises(ValueError, match="ezv2_tree needs gumbel=True"):
        Tree(1, 4, 8, ezv2_tree=True)
