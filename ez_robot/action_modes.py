"""Action modes: what a policy head's outputs mean, and how the search draws candidates.

Three modes (``ActionSpec.mode``):

- ``joint``: one of A discrete actions (Atari, Gymnasium Discrete, DMControl's bins^dims
  joint discretization of the paper).  The head gives A logits; the search expands every
  action (pUCT).
- ``factorized``: D action dimensions, each with ``bins`` evenly spaced values in [-1, 1]
  (both ends included).  The head gives D x bins logits and the joint policy is their
  product, so the head grows linearly with D.
- ``gaussian``: D dimensions in [-1, 1] from a tanh-squashed Gaussian.  The head gives D
  means and D standard-deviation parameters: mean 5 tanh(mu / 5), std softplus(s + 1) + 0.1
  (pre-squash), as EfficientZero V2.

The two sampled modes search K candidate actions per expanded node (Gumbel search,
:mod:`ez_robot.mcts`): the caller draws them here (the root's with
:func:`sample_candidates`, the other nodes' with :class:`InteriorCandidates`, whose
arithmetic runs in ``ez_robot.ctree``), keeps the action vectors, and hands the tree
their prior logits.  Actions are normalized vectors in [-1, 1]^D; the env side
scales them to the robot's bounds.

Prior over the candidates (Sampled MuZero, Hubert et al. 2021): with candidates drawn from
a proposal beta, the prior of candidate i is beta_hat(a_i) / beta(a_i) * pi(a_i), beta_hat
the empirical share of the draws; below the root beta = pi and the prior is beta_hat
(duplicates are merged, the copies masked with -inf).  At the root some draws come from a
wider distribution (the Gaussian with ``wide_scale`` x the std; the categoricals at
temperature ``wide_scale``), so beta is the mixture and the correction matters; it can be
switched off (``correction=False``: the prior is beta_hat alone, as EfficientZero V2).

The policies' densities (:func:`gaussian_params`, :func:`factorized_log_probs`,
:func:`log_prob`) are written once, over the array operations of :class:`ArrayOps`: numpy
(:data:`NUMPY`, in float64) for the search and the onboard runtime, torch
(``ez_robot.torch_policies.TORCH``, in the policy head's dtype) for the loss.  This module
never imports torch: the onboard runtime runs without it.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ez_robot import ctree

__all__ = ["ActionSpec", "MODES", "sample_candidates", "InteriorCandidates", "log_prob", "mode_action",
           "gaussian_params", "factorized_log_probs", "ArrayOps", "NUMPY", "bin_values", "MEAN_BOUND", "STD_MIN"]

MODES = ("joint", "factorized", "gaussian")
MEAN_BOUND = 5.0   # pre-squash means are soft-clamped to +-5 (5 tanh(mu / 5))
STD_MIN = 0.1      # smallest pre-squash std
_TANH_EPS = 1e-6   # keeps atanh and the squash Jacobian finite at the bounds


@dataclass(frozen=True)
class ActionSpec:
    """What the agent's actions are.  ``joint``: ``num_actions`` discrete actions; the
    sampled modes: ``dims`` continuous dimensions (``bins`` values each when factorized)."""

    mode: str = "joint"
    num_actions: int = 0
    """joint: A."""
    dims: int = 0
    """factorized, gaussian: D."""
    bins: int = 0
    """factorized: values per dimension."""

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"action mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.mode == "joint" and self.num_actions < 1:
            raise ValueError(f"a joint action space needs num_actions >= 1, got {self.num_actions}")
        if self.mode != "joint" and self.dims < 1:
            raise ValueError(f"a {self.mode} action space needs dims >= 1, got {self.dims}")
        if self.mode == "factorized" and self.bins < 2:
            raise ValueError(f"a factorized action space needs bins >= 2, got {self.bins}")

    @property
    def sampled(self) -> bool:
        """The search draws candidates (factorized, gaussian) instead of expanding every action."""
        return self.mode != "joint"

    @property
    def policy_size(self) -> int:
        """Outputs of the policy head."""
        return {"joint": self.num_actions, "factorized": self.dims * self.bins, "gaussian": 2 * self.dims}[self.mode]

    @property
    def action_shape(self) -> tuple:
        """Shape of one action: () for an index, (D,) for a vector."""
        return () if self.mode == "joint" else (self.dims,)

    @property
    def action_dtype(self):
        return np.int64 if self.mode == "joint" else np.float32

    def describe(self) -> str:
        if self.mode == "joint":
            return f"joint discrete ({self.num_actions} actions)"
        if self.mode == "factorized":
            return f"factorized ({self.dims} dims x {self.bins} bins)"
        return f"gaussian ({self.dims} dims)"

    def state_dict(self) -> dict:
        return {"mode": self.mode, "num_actions": self.num_actions, "dims": self.dims, "bins": self.bins}

    @classmethod
    def from_state_dict(cls, state: dict) -> "ActionSpec":
        return cls(str(state.get("mode", "joint")), int(state.get("num_actions", 0)), int(state.get("dims", 0)),
                   int(state.get("bins", 0)))


def bin_values(bins: int) -> np.ndarray:
    """[bins] float32 evenly spaced values in [-1, 1], both ends included."""
    return np.linspace(-1.0, 1.0, bins).astype(np.float32)


@functools.lru_cache(maxsize=None)
def _bin_table(bins: int, dtype=np.float32) -> np.ndarray:
    """bin_values(bins) in ``dtype``, made once and read-only (the draws index it per node)."""
    table = bin_values(bins).astype(dtype)
    table.flags.writeable = False
    return table


# --- the policies' densities, written once for numpy and torch ------------------------------

@dataclass(frozen=True)
class ArrayOps:
    """The array operations the policies' formulas use, for one array library."""

    floats: Callable
    """Head outputs or actions -> the floats the formulas compute in."""
    float64: Callable
    """-> float64 (atanh near +-1)."""
    cast_like: Callable
    """(x, y) -> x in y's dtype."""
    tanh: Callable
    atanh: Callable
    log: Callable
    softplus: Callable
    """log(1 + e^x)."""
    log_softmax: Callable
    """Over the last axis."""
    round: Callable
    """Halves to even."""
    clip: Callable
    """(x, low, high)."""
    to_index: Callable
    """-> int64."""
    take_along: Callable
    """(x, index) -> x's entries at ``index`` along the last axis, the other axes broadcast."""


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    top = logits.max(axis=-1, keepdims=True)
    return logits - top - np.log(np.exp(logits - top).sum(axis=-1, keepdims=True))


def _float64(x) -> np.ndarray:
    return np.asarray(x, np.float64)


NUMPY = ArrayOps(floats=_float64, float64=_float64, cast_like=lambda x, like: x.astype(like.dtype, copy=False),
                 tanh=np.tanh, atanh=np.arctanh, log=np.log, softplus=lambda x: np.logaddexp(0.0, x),
                 log_softmax=_log_softmax, round=np.rint, clip=np.clip, to_index=lambda x: x.astype(np.int64),
                 take_along=lambda x, index: np.take_along_axis(x, index, axis=-1))
"""numpy, everything in float64."""


def gaussian_params(params, dims: int, xp: ArrayOps = NUMPY):
    """Head outputs [..., 2D] -> (mean, std) [..., D] of the pre-squash Gaussian."""
    params = xp.floats(params)
    mean = MEAN_BOUND * xp.tanh(params[..., :dims] / MEAN_BOUND)
    std = xp.softplus(params[..., dims:2 * dims] + 1.0) + STD_MIN
    return mean, std


def factorized_log_probs(spec: ActionSpec, params, temperature: float = 1.0, xp: ArrayOps = NUMPY):
    """Head outputs [..., D x bins] -> [..., D, bins] log-probabilities of each value of each
    dimension (of the categoricals at ``temperature``)."""
    logits = xp.floats(params)
    logits = logits.reshape(logits.shape[:-1] + (spec.dims, spec.bins))
    return xp.log_softmax(logits if temperature == 1.0 else logits / temperature)


def _bin_index(spec: ActionSpec, actions, xp: ArrayOps = NUMPY):
    """Action vectors [..., D] in [-1, 1] -> nearest bin indices [..., D]."""
    scaled = (xp.floats(actions) + 1.0) * 0.5 * (spec.bins - 1)
    return xp.to_index(xp.clip(xp.round(scaled), 0, spec.bins - 1))


def log_prob(spec: ActionSpec, params, actions, scale: float = 1.0, xp: ArrayOps = NUMPY):
    """log pi(a) [..., K] of actions [..., K, D] under the policies [..., P] (numpy: float64).
    Gaussian: the density of the squashed action (Jacobian of tanh included).  ``scale``:
    under the widened policies instead (the categoricals at temperature ``scale``, the
    Gaussian with ``scale`` x its std)."""
    if spec.mode == "factorized":
        logp = factorized_log_probs(spec, params, scale, xp)[..., None, :, :]  # [..., 1, D, bins]
        index = _bin_index(spec, actions, xp)[..., None]                      # [..., K, D, 1]
        return xp.take_along(logp, index)[..., 0].sum(-1)
    if spec.mode == "gaussian":
        mean, std = gaussian_params(params, spec.dims, xp)
        mean, std = mean[..., None, :], std[..., None, :]  # [..., 1, D]
        if scale != 1.0:
            std = scale * std
        # atanh near +-1 needs float64: float32 keeps only ~6% of 1 - |a| at |a| = 1 - 1e-6
        squashed = xp.clip(xp.float64(actions), -1 + _TANH_EPS, 1 - _TANH_EPS)
        z = (xp.cast_like(xp.atanh(squashed), mean) - mean) / std
        density = (-0.5 * z * z - xp.log(std) - 0.5 * math.log(2 * math.pi)).sum(-1)
        return density - xp.cast_like(xp.log(1 - squashed * squashed).sum(-1), mean)
    raise ValueError("log_prob is for the sampled action modes")


# --- drawing the candidates at a root ------------------------------------------------------

def mode_action(spec: ActionSpec, params: np.ndarray) -> np.ndarray:
    """The most likely action of each policy (per dimension): [B, D] float32."""
    if spec.mode == "factorized":
        logits = np.asarray(params, np.float64).reshape(len(params), spec.dims, spec.bins)
        return _bin_table(spec.bins)[logits.argmax(-1)]
    if spec.mode == "gaussian":
        mean, _ = gaussian_params(params, spec.dims)
        return np.tanh(mean).astype(np.float32)
    raise ValueError("mode_action is for the sampled action modes")


def _draw(spec: ActionSpec, params: np.ndarray, count: int, scale: float, rng: np.random.Generator,
          mean_std=None) -> np.ndarray:
    """[B, count, D] float64 draws from the policy (scale 1) or its widened version;
    ``mean_std``: the Gaussian's ``gaussian_params``, if computed already."""
    batch = len(params)
    if count == 0:
        return np.zeros((batch, 0, spec.dims))
    if spec.mode == "factorized":  # the inverse CDF of each dimension's categorical, in C++
        actions = np.empty((batch, count, spec.dims), np.float32)
        ctree.factorized_candidates(params, rng.random((batch, count, spec.dims)), _bin_table(spec.bins), actions,
                                    scale)
        return actions.astype(np.float64)
    mean, std = gaussian_params(params, spec.dims) if mean_std is None else mean_std
    pre = mean[:, None] + scale * std[:, None] * rng.standard_normal((batch, count, spec.dims))
    return np.tanh(pre)


def _log_probs(spec: ActionSpec, params: np.ndarray, actions: np.ndarray, scales, mean_std=None) -> list:
    """[log_prob(spec, params, actions, scale) for scale in scales] (numpy), computing what
    the scales share once: the same operations on the same arrays, so the same values."""
    if spec.mode == "factorized":  # [B, K, D] positions of the actions' bins in the flat [B, D, bins]
        rows = np.arange(len(params) * spec.dims).reshape(len(params), 1, spec.dims)
        index = rows * spec.bins + _bin_index(spec, actions)
        return [factorized_log_probs(spec, params, scale).reshape(-1).take(index).sum(-1) for scale in scales]
    mean, std = gaussian_params(params, spec.dims) if mean_std is None else mean_std
    mean, std = mean[..., None, :], std[..., None, :]
    squashed = np.clip(np.asarray(actions, np.float64), -1 + _TANH_EPS, 1 - _TANH_EPS)
    pre_squash, jacobian = np.arctanh(squashed), np.log(1 - squashed * squashed).sum(-1)
    out = []
    for scale in scales:
        scaled = std if scale == 1.0 else scale * std
        z = (pre_squash - mean) / scaled
        out.append((-0.5 * z * z - np.log(scaled) - 0.5 * math.log(2 * math.pi)).sum(-1) - jacobian)
    return out


def _policy_and_proposal_log_probs(spec, params, actions, policy_share: float, scale: float, mean_std=None):
    """(log pi(a), log beta(a)), beta the mixture proposal: ``policy_share`` from pi, the
    rest widened."""
    if policy_share >= 1.0:
        logp, = _log_probs(spec, params, actions, (1.0,), mean_std)
        return logp, logp
    logp, wide = _log_probs(spec, params, actions, (1.0, scale), mean_std)
    if policy_share <= 0.0:
        return logp, wide
    return logp, np.logaddexp(math.log(policy_share) + logp, math.log(1.0 - policy_share) + wide)


def _merge_duplicates(actions: np.ndarray) -> np.ndarray:
    """[B, K] counts of each candidate's action among the row's candidates at its first
    occurrence, 0 at later copies."""
    counts = np.empty(actions.shape[:2], np.int32)
    ctree.duplicate_counts(np.ascontiguousarray(actions, np.float32), actions.shape[1], counts)
    return counts


def sample_candidates(spec: ActionSpec, params: np.ndarray, count: int, rng: np.random.Generator, *,
                      root: bool, policy_samples: int | None = None, wide_scale: float = 3.0,
                      correction: bool = True, include_mode: bool = False,
                      bound: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Draws ``count`` candidate actions per policy and their prior logits for the tree.

    ``params`` [B, P] are policy-head outputs.  At the root ``policy_samples`` of the draws
    come from the policy and the rest from its widened version (``wide_scale``); below the
    root all come from the policy.  ``include_mode`` replaces the first draw with the most
    likely action (greedy evaluation).  ``bound`` < 1 clips Gaussian candidates to
    [-bound, bound] (EfficientZero V2: 0.999).  Returns (actions [B, K, D] float32, logits [B, K]
    float32): log(beta_hat / beta * pi) of each candidate (with ``correction``; else log
    beta_hat), -inf at the later copies of a duplicate (factorized).  A search draws its
    nodes below the root with :class:`InteriorCandidates` instead (the same candidates,
    cheaper)."""
    if not spec.sampled:
        raise ValueError("sample_candidates is for the sampled action modes")
    params = np.asarray(params)
    if params.ndim != 2 or params.shape[1] != spec.policy_size:
        raise ValueError(f"policy parameters must have shape [B, {spec.policy_size}] for {spec.describe()}, "
                         f"got {params.shape}")
    own = count if not root or policy_samples is None else min(max(policy_samples, 0), count)
    if spec.mode == "gaussian":  # computed once for the draws, the mode and the correction
        mean_std, draw_params = gaussian_params(params, spec.dims), params
    else:  # the C++ draws read float32 or float64
        mean_std = None
        draw_params = np.ascontiguousarray(params, params.dtype if params.dtype == np.float32 else np.float64)
    actions = np.concatenate([_draw(spec, draw_params, own, 1.0, rng, mean_std),
                              _draw(spec, draw_params, count - own, wide_scale, rng, mean_std)], axis=1)
    if include_mode:
        actions[:, 0] = mode_action(spec, params) if mean_std is None else np.tanh(mean_std[0]).astype(np.float32)
    if spec.mode == "gaussian" and bound < 1.0:
        actions = np.clip(actions, -bound, bound)
    counts = _merge_duplicates(actions) if spec.mode == "factorized" else np.ones(actions.shape[:2], np.int64)
    with np.errstate(divide="ignore"):
        logits = np.log(counts / count)
    if correction and own < count:
        logp, log_proposal = _policy_and_proposal_log_probs(spec, params, actions, own / count, wide_scale, mean_std)
        logits = logits + logp - log_proposal
        logits = np.where(counts > 0, logits, -np.inf)
    return actions.astype(np.float32), logits.astype(np.float32)


# --- below the root: one search's candidates, drawn ahead ------------------------------------

@functools.lru_cache(maxsize=None)
def _log_shares(draws: int) -> np.ndarray:
    """[draws + 1] float32 log(c / draws), the prior of an action drawn c times of ``draws``
    (below the root, where the proposal is the policy); -inf at c = 0."""
    with np.errstate(divide="ignore"):
        share = np.log(np.arange(draws + 1) / draws).astype(np.float32)
    share.flags.writeable = False
    return share


class InteriorCandidates:
    """The candidates of every node one search expands below its root (B nodes per
    simulation, ``draws`` candidates each, in ``slots`` >= ``draws`` child slots).

    What :func:`sample_candidates` does per node (``root=False``), cheaper: the random
    numbers of many simulations come from one ``rng`` call, in the order per-node draws take
    them, so ``rng`` yields the same numbers; ``ez_robot.ctree`` turns a node's numbers into
    its candidates in one call (the same formulas in double; an action can differ from
    numpy's only in a float32 rounding that the last bit of a double decides, a factorized
    one only where a uniform draw lies within that bit of a bin edge).  :meth:`finish`
    leaves ``rng`` where per-node draws would have: a deadline may stop the search before it
    uses the numbers drawn for it.
    """

    BLOCK_NUMBERS = 1 << 16
    """At most this many numbers per ``rng`` call (one simulation's at least)."""

    def __init__(self, spec: ActionSpec, batch: int, draws: int, slots: int, rng: np.random.Generator,
                 simulations: int, bound: float = 1.0):
        if not spec.sampled:
            raise ValueError("InteriorCandidates is for the sampled action modes")
        if not 1 <= draws <= slots:
            raise ValueError(f"draws must be in [1, slots = {slots}], got {draws}")
        self.spec, self._rng, self._bound, self._simulations = spec, rng, float(bound), simulations
        self._gaussian = spec.mode == "gaussian"
        self._shape = (batch, draws, spec.dims)
        self._draw = rng.standard_normal if spec.mode == "gaussian" else rng.random
        self._block = max(1, min(simulations, self.BLOCK_NUMBERS // (batch * draws * spec.dims)))
        self._numbers, self._first, self._drawn, self._state = None, 0, 0, None
        share = _log_shares(draws)
        self._logits = np.full((batch, slots), -np.inf, np.float32)
        if spec.mode == "gaussian":  # every draw its own candidate: the prior is uniform
            self._logits[:, :draws] = share[1]
        else:
            self._log_share, self._bin_values = share, _bin_table(spec.bins)

    def __call__(self, simulation: int, params: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Writes the candidates of the nodes simulation ``simulation`` expanded (from their
        policies ``params`` [B, P] float32) into ``actions`` [B, slots, D] float32; returns
        their prior logits [B, slots] float32 (-inf in the slots past ``draws``), a buffer
        the next call overwrites."""
        if not self._first <= simulation < self._drawn:
            self._draw_block(simulation)
        numbers = self._numbers[simulation - self._first]
        if self._gaussian:
            ctree.gaussian_candidates(params, numbers, self._bound, actions)
        else:
            ctree.factorized_candidates(params, numbers, self._bin_values, actions, 1.0, self._log_share, self._logits)
        return self._logits

    def finish(self, simulations: int) -> None:
        """Rewinds ``rng`` to where drawing the numbers of ``simulations`` simulations leaves it."""
        if simulations < self._drawn:
            self._rng.bit_generator.state = self._state
            self._draw((simulations - self._first,) + self._shape)
            self._drawn = simulations

    def _draw_block(self, simulation: int) -> None:
        if simulation != self._drawn:
            raise ValueError(f"simulation {simulation} draws out of order (next: {self._drawn})")
        count = min(self._block, self._simulations - simulation)
        self._state = self._rng.bit_generator.state
        self._numbers = self._draw((count,) + self._shape)
        self._first, self._drawn = simulation, simulation + count
