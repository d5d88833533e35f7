"""Bad input to the tree and the search raises a clear Python exception, never a crash."""
import numpy as np
import pytest

from ez_robot import RootOutput, SearchConfig, search
from ez_robot.ctree import Tree
from tests.toy_models import ElementwiseModel

f32 = np.float32


def fresh(batch=2, actions=3, sims=4):
    tree = Tree(batch, actions, sims)
    tree.reset(np.zeros(batch, f32), np.zeros(batch, f32), np.zeros((batch, actions), f32))
    return tree


@pytest.mark.parametrize("args,match", [
    ((0, 3, 5), "batch_size must be >= 1"),
    ((2, 0, 5), "num_actions must be >= 1"),
    ((2, 3, -1), "num_simulations must be >= 0"),
])
def test_bad_sizes(args, match):
    with pytest.raises(ValueError, match=match):
        Tree(*args)


@pytest.mark.parametrize("kwargs,match", [
    ({"discount": 1.5}, "discount must be in"), ({"c1": 0.0}, "c1 must be"), ({"c2": float("nan")}, "c2 must be"),
    ({"lstm_horizon": 0}, "lstm_horizon must be"), ({"min_max_epsilon": -1.0}, "min_max_epsilon must be"),
])
def test_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Tree(2, 3, 5, **kwargs)


def test_impossible_allocation_is_a_memory_error():
    with pytest.raises(MemoryError):
        Tree(2**20, 2**14, 2**20)


def test_wrong_dtype_and_shape():
    tree = Tree(2, 3, 4)
    with pytest.raises(TypeError, match="policy_logits must have dtype float32, got float64"):
        tree.reset(np.zeros(2, f32), np.zeros(2, f32), np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"policy_logits must have shape \(2, 3\), got \(3, 2\)"):
        tree.reset(np.zeros(2, f32), np.zeros(2, f32), np.zeros((3, 2), f32))
    with pytest.raises(TypeError, match="value_prefix must be a numpy array, got list"):
        tree.reset([0.0, 0.0], np.zeros(2, f32), np.zeros((2, 3), f32))
    with pytest.raises(ValueError, match=r"noise must have shape \(2, 3\)"):
        tree.reset(np.zeros(2, f32), np.zeros(2, f32), np.zeros((2, 3), f32), np.ones(3, f32), 0.25)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_inputs(bad):
    if bad != -np.inf:  # a -inf logit masks a child (tests/test_gumbel_tree.py)
        tree = Tree(2, 3, 4)
        logits = np.zeros((2, 3), f32)
        logits[1, 2] = bad
        with pytest.raises(ValueError, match=r"root policy_logits has a non-finite value .* at \[1, 2\]"):
            tree.reset(np.zeros(2, f32), np.zeros(2, f32), logits)
    tree = fresh()
    tree.traverse()
    value = np.array([0.0, bad], f32)
    with pytest.raises(ValueError, match=r"value has a non-finite value .* at \[1\]"):
        tree.expand_and_backup(np.zeros(2, f32), value, np.zeros((2, 3), f32))
    # The failed backup changed nothing: a good one still goes through.
    tree.expand_and_backup(np.zeros(2, f32), np.zeros(2, f32), np.zeros((2, 3), f32))
    assert tree.simulations_done == 1


def test_bad_noise():
    tree = Tree(1, 2, 1)
    with pytest.raises(ValueError, match="noise must be non-negative"):
        tree.reset(np.zeros(1, f32), np.zeros(1, f32), np.zeros((1, 2), f32), np.array([[-0.5, 1.5]], f32), 0.25)
    with pytest.raises(ValueError, match=r"noise_fraction must be in \[0, 1\]"):
        tree.reset(np.zeros(1, f32), np.zeros(1, f32), np.zeros((1, 2), f32), np.full((1, 2), 0.5, f32), 2.0)


def test_call_order():
    tree = Tree(1, 2, 1)
    with pytest.raises(RuntimeError, match="reset\\(\\) must be called before traverse"):
        tree.traverse()
    tree.reset(np.zeros(1, f32), np.zeros(1, f32), np.zeros((1, 2), f32))
    with pytest.raises(RuntimeError, match="needs a traverse"):
        tree.expand_and_backup(np.zeros(1, f32), np.zeros(1, f32), np.zeros((1, 2), f32))
    tree.traverse()
    with pytest.raises(RuntimeError, match="traverse\\(\\) was called twice"):
        tree.traverse()
    tree.expand_and_backup(np.zeros(1, f32), np.zeros(1, f32), np.zeros((1, 2), f32))
    with pytest.raises(RuntimeError, match="all 1 simulations are done"):
        tree.traverse()


def test_out_of_range_node_index():
    tree = fresh(batch=2, sims=4)
    assert tree.node(1, 0)["depth"] == 0
    with pytest.raises(IndexError, match="tree index 2 out of range"):
        tree.node(2, 0)
    with pytest.raises(IndexError, match="tree index -1 out of range"):
        tree.node(-1, 0)
    with pytest.raises(IndexError, match="node index 1 out of range: tree has 1 node"):
        tree.node(0, 1)


def test_search_rejects_bad_roots_and_model_outputs():
    model = ElementwiseModel(4, 0)
    root = model.root(3, 0)
    config = SearchConfig(num_simulations=5)
    empty = RootOutput(root.hidden, root.value_prefix, root.value, np.zeros((0, 4), f32))
    with pytest.raises(ValueError, match="B >= 1 roots and A >= 1 actions"):
        search(empty, model, config, np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"policy_logits must have shape \[B, A\]"):
        search(RootOutput(root.hidden, root.value_prefix, root.value, np.zeros(4, f32)), model, config,
               np.random.default_rng(0))
    with pytest.raises(ValueError, match="root.hidden must have the batch"):
        search(RootOutput(np.zeros((2, 5), f32), root.value_prefix, root.value, root.policy_logits), model, config,
               np.random.default_rng(0))

    def nan_model(hidden, actions, reset_mask):
        next_hidden, vp, v, logits = model(hidden, actions, reset_mask)
        return next_hidden, vp, np.full_like(v, np.nan), logits

    with pytest.raises(ValueError, match="value has a non-finite value"):
        search(root, nan_model, config, np.random.default_rng(0))

    def short_model(hidden, actions, reset_mask):
        next_hidden, vp, v, logits = model(hidden, actions, reset_mask)
        return next_hidden, vp, v, logits[:, :2]

    with pytest.raises(ValueError, match=r"policy_logits must have shape \(3, 4\), got \(3, 2\)"):
        search(root, short_model, config, np.random.default_rng(0))

    def tuple_model(hidden, actions, reset_mask):  # the root's hidden state is one array here
        next_hidden, vp, v, logits = model(hidden, actions, reset_mask)
        return (next_hidden, next_hidden), vp, v, logits

    single = RootOutput(root.hidden[0], root.value_prefix, root.value, root.policy_logits)
    with pytest.raises(ValueError, match="returned a tuple of 2 as the hidden state, but the root's hidden state "
                                         "was one array"):
        search(single, lambda h, a, r: tuple_model((h, np.zeros(len(h), f32)), a, r), config,
               np.random.default_rng(0))
    with pytest.raises(TypeError, match="search needs rng, a numpy.random.Generator"):
        search(root, model, config, None)
    with pytest.raises(TypeError, match="search needs rng"):
        search(root, model, config, 0)


@pytest.mark.parametrize("field,value,match", [
    ("num_simulations", -1, r"num_simulations must be in \[0, 100000\], got -1"),
    ("num_simulations", 10**12, r"num_simulations must be in \[0, 100000\], got 1000000000000"),
    ("c1", float("inf"), "c1 must be a finite number"), ("discount", -0.1, "discount must be in"),
    ("temperature", -1.0, "temperature must be >= 0"), ("dirichlet_fraction", 1.5, "dirichlet_fraction"),
    ("num_simulations", 2.5, "num_simulations must be an int"),
])
def test_search_config_validation(field, value, match):
    with pytest.raises((ValueError, TypeError), match=match):
        SearchConfig(**{field: value})


def _random_bad_array(rng, batch, actions):
    choice = rng.integers(8)
    if choice == 0:
        return None
    if choice == 1:
        return [0.0] * batch
    if choice == 2:
        return "not an array"
    dtype = [np.float32, np.float64, np.int32, np.float16, object][rng.integers(5)]
    shape = [(batch,), (batch, actions), (actions,), (0,), (batch, actions, 1), ()][rng.integers(6)]
    x = rng.normal(size=shape).astype(dtype) if dtype is not object else np.empty(shape, dtype=object)
    if dtype is np.float32 and x.size and rng.random() < 0.5:
        x.flat[rng.integers(x.size)] = [np.nan, np.inf, -np.inf, 1e38][rng.integers(4)]
    if x.ndim == 2 and rng.random() < 0.3:
        x = x[:, ::-1]  # not contiguous
    return x


def test_fuzz_binding_with_bad_arrays():
    rng = np.random.default_rng(1234)
    allowed = (TypeError, ValueError, RuntimeError)
    for _ in range(3000):
        batch, actions = int(rng.integers(1, 4)), int(rng.integers(1, 5))
        tree = Tree(batch, actions, 3)
        args = [_random_bad_array(rng, batch, actions) for _ in range(3)]
        method = [tree.reset, tree.expand_and_backup][rng.integers(2)]
        if method == tree.expand_and_backup and rng.random() < 0.7:
            tree.reset(np.zeros(batch, f32), np.zeros(batch, f32), np.zeros((batch, actions), f32))
            tree.traverse()
        try:
            method(*args)
        except allowed:
            pass
    # and after all that, a well-formed search still works
    model = ElementwiseModel(4, 0)
    out = search(model.root(2, 0), model, SearchConfig(num_simulations=8), np.random.default_rng(0))
    assert out.visit_counts.sum() == 16
