"""Batched EfficientZero MCTS over the C++ tree: one simulation loop, two policies over it.

:func:`simulate` is the loop (select, model step, expand, back up); :func:`puct_policy`
(joint actions, the paper) and :func:`gumbel_policy` (sampled candidates, EfficientZero
V2) set up the tree and read its result; :func:`search` picks one by the action spec.
Self-play, reanalyze, evaluation and the onboard runtime all call :func:`search`.  It
is pure: the result depends only on its arguments (the Dirichlet noise and the action
samples come from the ``rng`` passed in).  It imports neither torch nor onnxruntime;
hidden states may be numpy arrays or torch tensors, or tuples of them (for example a
latent state plus the LSTM's ``(h, c)``), each with the batch on axis 0.
"""
from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Tuple

import numpy as np

from ez_robot.ctree import Tree, child_rows
from ez_robot.action_modes import ActionSpec, InteriorCandidates, sample_candidates
from ez_robot.checks import is_finite_number
from ez_robot.search_config import SearchConfig

__all__ = ["RootOutput", "SearchOutput", "RecurrentFn", "search", "simulate", "puct_policy", "gumbel_policy",
           "visit_policy"]

@dataclass(frozen=True)
class RootOutput:
    """What initial inference returns for B observations."""

    hidden: Any
    """Hidden state(s): an array/tensor [B, ...] or a tuple of them (latent, LSTM h, c)."""
    value_prefix: np.ndarray
    """[B] value prefix predicted at the root (0 when the LSTM state is fresh)."""
    value: np.ndarray
    """[B] value predicted at the root (the root value when no simulation runs)."""
    policy_logits: np.ndarray
    """[B, A] policy logits at the root."""


@dataclass(frozen=True)
class SearchOutput:
    visit_counts: np.ndarray
    """[B, A] int32 root visit counts; each row sums to num_simulations."""
    root_values: np.ndarray
    """[B] float32 mean backed-up value at the root (nu^MCTS)."""
    root_q_values: np.ndarray
    """[B, A] float32 Q(root, a), NaN for unvisited actions (sampled modes: [B, K] the
    completed Q, with the mixed value estimate standing in for unvisited candidates)."""
    policy: np.ndarray
    """[B, A] float32 visit distribution after temperature (the policy target at T = 1)."""
    actions: np.ndarray
    """[B] int64 selected actions: sampled from `policy`, or the most visited at T = 0
    (sampled modes: [B, D] float32, the candidate sequential halving chose)."""
    max_depth: np.ndarray
    """[B] int32 deepest leaf expanded."""
    mean_depth: np.ndarray
    """[B] float32 mean depth of the expanded leaves."""
    simulations: np.ndarray
    """[B] int32 simulations that ran (fewer than asked when a deadline stopped the search)."""
    candidates: "np.ndarray | None" = None
    """Sampled action modes: [B, K, D] float32 the root's candidate actions, which
    ``visit_counts``, ``root_q_values`` and ``policy`` (the improved policy, the policy
    target) are over; ``actions`` [B, D] is the chosen candidate.  None in joint mode."""


RecurrentFn = Callable[[Any, np.ndarray, np.ndarray], Tuple[Any, Any, Any, Any]]
"""recurrent_fn(hidden, actions [R] int32 (sampled modes: [R, D] float32 vectors),
reset_mask [R] bool) -> (next_hidden, value_prefix [R], value [R], policy_logits [R, P]).
R is the number of roots B, or a multiple of it when the sampled search sends several
simulations in one call (:func:`simulate`): one output row per input row.

``reset_mask[b]`` is True when the value-prefix LSTM must start afresh from this step:
the caller zeroes that row's LSTM state before stepping it."""


def search(root: RootOutput, recurrent_fn: RecurrentFn, config: SearchConfig,
           rng: np.random.Generator, *, deadline: float | None = None,
           action_spec: ActionSpec | None = None, first_visits_together: bool = True) -> SearchOutput:
    """Runs ``config.num_simulations`` batched simulations from B roots.

    ``action_spec`` says what the policy outputs are (default: A joint discrete actions,
    A from ``root.policy_logits``) and so which policy searches: :func:`puct_policy`
    (joint mode: every action a child, pUCT at every node, the paper) or
    :func:`gumbel_policy` (the sampled modes, factorized and gaussian: K candidates drawn
    at every expanded node, Gumbel sequential halving at the root).  Both run the one
    simulation loop, :func:`simulate`.

    ``deadline`` (a ``time.perf_counter()`` value) makes the search anytime: no new
    simulation starts once it has passed, and the output describes the simulations that
    ran (``simulations``; visit counts sum to it).  With no simulation at all the policy
    is uniform and the action is the root prior's most likely one.

    ``first_visits_together=False`` makes the Gumbel search's first round one network call
    per simulation (:func:`simulate`); the result is the same up to float rounding.
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"search needs rng, a numpy.random.Generator (np.random.default_rng(seed)), got "
                        f"{type(rng).__name__}")
    if not isinstance(config, SearchConfig):
        raise TypeError(f"search needs config, a SearchConfig, got {type(config).__name__}")
    if deadline is not None and not (is_finite_number(deadline) or deadline == math.inf):
        raise ValueError(f"deadline must be a time.perf_counter() value (or inf: none), got {deadline!r}")
    if action_spec is not None and action_spec.sampled:
        return gumbel_policy(root, recurrent_fn, config, rng, action_spec, deadline=deadline,
                             first_visits_together=first_visits_together)
    return puct_policy(root, recurrent_fn, config, rng, deadline=deadline)


FIRST_VISIT_ROWS = 4096
"""Most rows one network call of the root's first round may take (:func:`simulate`)."""


def simulate(tree: Tree, root_hidden: Any, recurrent_fn: RecurrentFn, num_simulations: int, batch: int,
             expand: Callable[[int, Any], np.ndarray], *, deadline: float | None = None,
             child_actions: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
             first_visits_together: bool = True) -> int:
    """The search loop: select a leaf per root, run the model there, expand it, back up.

    Each simulation asks the tree for one leaf per root (``tree.traverse``: the parent's
    hidden-state row, the child chosen and where the value-prefix LSTM restarts), runs
    ``recurrent_fn`` once on the batch, and hands the tree the predictions and the new
    node's child logits, ``expand(simulation, policy_outputs)``.  ``child_actions(rows,
    children)`` maps the chosen children to the actions ``recurrent_fn`` takes (default:
    the child indices themselves, joint mode).  Returns the simulations that ran (fewer
    than asked once ``deadline`` has passed).

    In Gumbel mode the first simulations visit each considered root candidate once, in an
    order fixed at the root, and do not depend on each other's results; with
    ``first_visits_together`` they go to ``recurrent_fn`` as one call of k * B rows
    (k simulations, at most :data:`FIRST_VISIT_ROWS` rows a call) and are backed up in
    their order: the same search as one call per simulation, in fewer, larger calls."""
    pool = _HiddenPool(root_hidden, num_simulations + 1, batch)
    simulation = 0
    while first_visits_together and simulation < num_simulations:
        k = min(tree.first_visits_left(), num_simulations - simulation, max(1, FIRST_VISIT_ROWS // batch))
        if k < 2:
            break
        if deadline is not None and time.perf_counter() >= deadline:
            return simulation
        parent_rows, children, reset_mask = tree.traverse_first_visits(k)
        actions = children if child_actions is None else child_actions(parent_rows, children)
        next_hidden, value_prefix, value, policy_outputs = recurrent_fn(pool.gather(parent_rows), actions, reset_mask)
        _check_rows(k * batch, value_prefix, value, policy_outputs)
        pool.put(simulation + 1, next_hidden, nodes=k)
        logits = np.empty((k * batch, tree.num_actions), np.float32)
        for j in range(k):  # each simulation's nodes in turn (expand may reuse its output buffer)
            logits[j * batch:(j + 1) * batch] = expand(simulation + j, policy_outputs[j * batch:(j + 1) * batch])
        tree.expand_and_backup_first_visits(_as_float32(value_prefix, "value_prefix"),
                                            _as_float32(value, "value"), logits)
        simulation += k
    for simulation in range(simulation, num_simulations):
        if deadline is not None and time.perf_counter() >= deadline:
            return simulation
        parent_rows, children, reset_mask = tree.traverse()
        actions = children if child_actions is None else child_actions(parent_rows, children)
        next_hidden, value_prefix, value, policy_outputs = recurrent_fn(pool.gather(parent_rows), actions, reset_mask)
        pool.put(simulation + 1, next_hidden)
        logits = expand(simulation, policy_outputs)
        tree.expand_and_backup(_as_float32(value_prefix, "value_prefix"), _as_float32(value, "value"), logits)
    return num_simulations


def puct_policy(root: RootOutput, recurrent_fn: RecurrentFn, config: SearchConfig, rng: np.random.Generator, *,
                deadline: float | None = None) -> SearchOutput:
    """Joint discrete actions (the paper): every action is a child, selected by pUCT with
    Dirichlet noise on the root prior; the output policy is the visit distribution."""
    logits = _as_float32(root.policy_logits, "root.policy_logits")
    if logits.ndim != 2:
        raise ValueError(f"root.policy_logits must have shape [B, A], got {logits.shape}")
    batch, num_actions = logits.shape
    if batch == 0 or num_actions == 0:
        raise ValueError(f"search needs B >= 1 roots and A >= 1 actions, got policy_logits of shape {logits.shape}")
    tree = Tree(batch, num_actions, config.num_simulations, c1=config.c1, c2=config.c2,
                discount=config.discount, lstm_horizon=config.lstm_horizon,
                min_max_epsilon=config.min_max_epsilon, root_mean_q=config.root_unvisited_q == "mean")
    noise = None
    if config.add_noise and config.dirichlet_fraction > 0:
        noise = rng.dirichlet(np.full(num_actions, config.dirichlet_alpha), size=batch).astype(np.float32)
    tree.reset(_as_float32(root.value_prefix, "root.value_prefix"), _as_float32(root.value, "root.value"),
               logits, noise, config.dirichlet_fraction)

    done = simulate(tree, root.hidden, recurrent_fn, config.num_simulations, batch,
                    lambda _, step_logits: _as_float32(step_logits, "policy_logits"), deadline=deadline)

    visit_counts = tree.root_visit_counts()
    policy = visit_policy(visit_counts, config.temperature)
    if done == 0:  # nothing searched (uniform policy): act on the network's prior
        actions = logits.argmax(axis=1).astype(np.int64)
    else:
        actions = _select(policy, visit_counts, config.temperature, rng)
    max_depth, mean_depth = tree.depth_stats()
    return SearchOutput(
        visit_counts=visit_counts,
        root_values=tree.root_values(),
        root_q_values=tree.root_q_values(),
        policy=policy,
        actions=actions,
        max_depth=max_depth,
        mean_depth=mean_depth,
        simulations=np.full(batch, done, np.int32),
    )


def gumbel_policy(root: RootOutput, recurrent_fn: RecurrentFn, config: SearchConfig, rng: np.random.Generator,
                  spec: ActionSpec, *, deadline: float | None = None,
                  first_visits_together: bool = True) -> SearchOutput:
    """Gumbel search over sampled candidates (EfficientZero V2; Danihelka et al. 2022).

    Every expanded node gets K candidates drawn from its policy outputs (the root's by
    :func:`ez_robot.action_modes.sample_candidates`; below it ``interior_candidates`` of them,
    the other child slots masked with a -inf logit, by
    :class:`ez_robot.action_modes.InteriorCandidates`, the same draws from numbers drawn
    ahead for many simulations at once); the tree keeps their indices
    as its children and this policy keeps the action vectors in a pool laid out like the
    hidden states (row ``node * B + b``).  With root noise on (training) the root draws
    Gumbel noise and acts on the candidate sequential halving keeps; without (evaluation)
    it adds the policy's most likely action to the root candidates and draws no noise.
    The output policy is the improved policy over the root candidates."""
    params = _as_float32(root.policy_logits, "root.policy_logits")
    if params.ndim != 2 or params.shape[1] != spec.policy_size:
        raise ValueError(f"root.policy_logits must have shape [B, {spec.policy_size}] for {spec.describe()}, "
                         f"got {params.shape}")
    batch, count = params.shape[0], config.num_candidates
    interior = config.interior_candidates or count
    if batch == 0:
        raise ValueError("search needs B >= 1 roots")
    greedy = not config.add_noise
    candidates, logits = sample_candidates(spec, params, count, rng, root=True,
                                           policy_samples=config.root_policy_samples, wide_scale=config.wide_scale,
                                           correction=config.proposal_correction, include_mode=greedy,
                                           bound=config.candidate_bound)
    gumbel = None if greedy or not config.gumbel_noise else rng.gumbel(size=(batch, count)).astype(np.float32)
    tree = Tree(batch, count, config.num_simulations, c1=config.c1, c2=config.c2, discount=config.discount,
                lstm_horizon=config.lstm_horizon, min_max_epsilon=config.min_max_epsilon, gumbel=True,
                c_visit=config.c_visit, c_scale=config.c_scale, max_considered=count, ezv2_tree=config.ezv2_tree)
    tree.reset(_as_float32(root.value_prefix, "root.value_prefix"), _as_float32(root.value, "root.value"),
               logits, gumbel)
    action_pool = np.empty(((config.num_simulations + 1) * batch, count, spec.dims), np.float32)
    action_pool[:batch] = candidates
    # below the root: `interior` candidates per node, the tree's other child slots masked
    draw_interior = InteriorCandidates(spec, batch, interior, count, rng, config.num_simulations,
                                       config.candidate_bound)

    policy_shape = (batch, spec.policy_size)

    def expand(simulation: int, step_params) -> np.ndarray:
        step_params = _as_float32(step_params, "policy_logits")
        if step_params.shape != policy_shape:
            raise ValueError(f"recurrent_fn returned policy outputs of shape {step_params.shape}, expected "
                             f"{policy_shape}")
        start = (simulation + 1) * batch
        return draw_interior(simulation, step_params, action_pool[start:start + batch])

    done = simulate(tree, root.hidden, recurrent_fn, config.num_simulations, batch, expand, deadline=deadline,
                    child_actions=functools.partial(child_rows, action_pool),  # [B, D] action_pool[rows, children]
                    first_visits_together=first_visits_together)
    draw_interior.finish(done)

    chosen = tree.best_actions(gumbel=not greedy)
    max_depth, mean_depth = tree.depth_stats()
    return SearchOutput(
        visit_counts=tree.root_visit_counts(),
        root_values=tree.root_values(),
        root_q_values=tree.root_completed_q(),
        policy=np.eye(count, dtype=np.float32)[chosen] if config.played_policy else tree.improved_policy(),
        actions=candidates[np.arange(batch), chosen],
        max_depth=max_depth,
        mean_depth=mean_depth,
        simulations=np.full(batch, done, np.int32),
        candidates=candidates,
    )


def visit_policy(visit_counts: np.ndarray, temperature: float) -> np.ndarray:
    """pi(a) = N(a)^(1/T) / sum_b N(b)^(1/T); T = 0 puts all mass on the most visited
    action (lowest index on ties).  Rows with no visits (0 simulations) are uniform."""
    counts = np.asarray(visit_counts, dtype=np.float64)
    batch, num_actions = counts.shape
    if temperature == 0:
        policy = np.zeros_like(counts)
        policy[np.arange(batch), counts.argmax(axis=1)] = 1.0
        return policy.astype(np.float32)
    top = counts.max(axis=1, keepdims=True)
    # Scaling by the largest count first keeps N^(1/T) finite for small T.
    scaled = np.divide(counts, top, out=np.ones_like(counts), where=top > 0) ** (1.0 / temperature)
    return (scaled / scaled.sum(axis=1, keepdims=True)).astype(np.float32)


def _select(policy, visit_counts, temperature, rng):
    if temperature == 0:
        return visit_counts.argmax(axis=1).astype(np.int64)
    cumulative = np.cumsum(policy.astype(np.float64), axis=1)
    draws = rng.random(policy.shape[0]) * cumulative[:, -1]
    actions = (cumulative <= draws[:, None]).sum(axis=1)
    return np.minimum(actions, policy.shape[1] - 1).astype(np.int64)


def _as_float32(x, name: str) -> np.ndarray:
    if type(x) is np.ndarray and x.dtype == np.float32 and x.flags.c_contiguous:
        return x  # the common case, checked cheaply: the search calls this three times a simulation
    if hasattr(x, "detach"):  # a torch tensor; torch itself is never imported here
        x = x.detach().cpu().numpy()
    try:
        return np.ascontiguousarray(x, dtype=np.float32)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name} must be a numeric array, got {type(x).__name__}: {error}") from None


def _check_rows(rows: int, *outputs) -> None:
    for name, output in zip(("value_prefix", "value", "policy outputs"), outputs):
        got = getattr(output, "shape", (None,))[:1]
        if tuple(got) != (rows,):
            raise ValueError(f"recurrent_fn was given {rows} rows and returned {name} of shape "
                             f"{tuple(getattr(output, 'shape', ()))}: it must return one row per input row")


class _HiddenPool:
    """Hidden states of every node, one flat [nodes * B, ...] buffer per leaf of the pytree.

    Node ``n`` of tree ``b`` lives in row ``n * B + b`` (node 0 is the root, node ``n``
    was made by simulation ``n - 1``); the tree's traverse returns these rows directly,
    so a gather is a single take along axis 0.
    """

    def __init__(self, root_hidden, capacity: int, batch: int):
        self._is_tuple = isinstance(root_hidden, (tuple, list))
        leaves = list(root_hidden) if self._is_tuple else [root_hidden]
        self._batch = batch
        self._torch = any(not isinstance(leaf, np.ndarray) and hasattr(leaf, "detach") for leaf in leaves)
        if self._torch:
            import torch  # only when the caller's hidden states are tensors

            self._device = leaves[0].device
            self._pools = [torch.empty((capacity * batch,) + tuple(leaf.shape[1:]), dtype=leaf.dtype,
                                       device=leaf.device) for leaf in leaves]
        else:
            leaves = [np.asarray(leaf) for leaf in leaves]
            self._pools = [np.empty((capacity * batch,) + leaf.shape[1:], dtype=leaf.dtype) for leaf in leaves]
        self._shapes = [(batch,) + tuple(pool.shape[1:]) for pool in self._pools]
        for leaf in leaves:
            if tuple(leaf.shape[:1]) != (batch,):
                raise ValueError(f"root.hidden must have the batch ({batch}) on axis 0, got shape {tuple(leaf.shape)}")
        self.put(0, root_hidden)

    def put(self, node: int, hidden, nodes: int = 1) -> None:
        """Stores the hidden states of ``nodes`` consecutive nodes from ``node`` on (rows
        ``node * B`` to ``(node + nodes) * B``: one network call's outputs)."""
        leaves = hidden if self._is_tuple else (hidden,)
        if isinstance(hidden, (tuple, list)) != self._is_tuple or len(leaves) != len(self._pools):
            self._refuse(hidden, nodes)
        start, rows = node * self._batch, nodes * self._batch
        for pool, shape, leaf in zip(self._pools, self._shapes, leaves):
            if getattr(leaf, "shape", None) != (rows,) + shape[1:]:
                self._refuse(hidden, nodes)
            pool[start:start + rows] = leaf

    def _refuse(self, hidden, nodes: int = 1) -> None:
        """Raises the error that says how ``hidden`` differs from the root's hidden state."""
        if isinstance(hidden, (tuple, list)) != self._is_tuple:
            got = f"a {type(hidden).__name__} of {len(hidden)}" if isinstance(hidden, (tuple, list)) else \
                f"one {type(hidden).__name__}"
            want = f"a tuple of {len(self._pools)}" if self._is_tuple else "one array"
            raise ValueError(f"recurrent_fn returned {got} as the hidden state, but the root's hidden state was "
                             f"{want}: it must return the same structure")
        leaves = hidden if self._is_tuple else (hidden,)
        if len(leaves) != len(self._pools):
            raise ValueError(f"recurrent_fn returned {len(leaves)} hidden arrays, the root had {len(self._pools)}")
        for shape, leaf in zip(self._shapes, leaves):
            shape = (nodes * self._batch,) + shape[1:]
            if not hasattr(leaf, "shape"):
                raise ValueError(f"recurrent_fn returned a {type(leaf).__name__} in the hidden state; it must be "
                                 "numpy arrays or torch tensors with the batch on axis 0")
            if tuple(leaf.shape) != shape:
                raise ValueError(f"recurrent_fn returned a hidden state of shape {tuple(leaf.shape)}, expected {shape}")

    def gather(self, rows: np.ndarray):
        if self._torch:
            import torch

            index = torch.from_numpy(rows).to(self._device, dtype=torch.long)
            leaves = [pool.index_select(0, index) for pool in self._pools]
        else:
            leaves = [pool.take(rows, axis=0) for pool in self._pools]
        return tuple(leaves) if self._is_tuple else leaves[0]
