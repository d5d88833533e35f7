"""The policies of the sampled action modes in torch: the formulas of
:mod:`ez_robot.action_modes` on policy-head outputs, in the head's dtype, and the
entropies the loss can regularize with (``train.entropy``)."""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from ez_robot.action_modes import ActionSpec, ArrayOps, factorized_log_probs, gaussian_params, log_prob

__all__ = ["TORCH", "gaussian_policy", "policy_log_prob", "policy_entropy", "ENTROPY_CLIP"]

TORCH = ArrayOps(floats=lambda x: x, float64=lambda x: x.double(), cast_like=lambda x, like: x.to(like.dtype),
                 tanh=torch.tanh, atanh=torch.atanh, log=torch.log, softplus=F.softplus,
                 log_softmax=lambda x: F.log_softmax(x, dim=-1), round=torch.round, clip=torch.clamp,
                 to_index=lambda x: x.long(), take_along=lambda x, index: torch.take_along_dim(x, index, dim=-1))
"""The policies' formulas of :mod:`ez_robot.action_modes` in torch, in the policy head's dtype."""


def gaussian_policy(params: torch.Tensor, dims: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, std) [..., D] of the pre-squash Gaussian of policy-head outputs [..., P]."""
    return gaussian_params(params, dims, TORCH)


def policy_log_prob(spec: ActionSpec, params: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """log pi(a) [..., K] of candidate actions [..., K, D] under policy-head outputs [..., P]
    (:func:`ez_robot.action_modes.log_prob` in torch)."""
    return log_prob(spec, params, actions, xp=TORCH)


def policy_entropy(spec: ActionSpec, params: torch.Tensor, kind: str = "pre_squash") -> torch.Tensor:
    """Entropy [...] of the policies (``train.entropy``): exact for the factorized
    categoricals; for the Gaussian that of the pre-squash Gaussian, or (``squashed``) that of
    the actions themselves, tanh of it, or (``clipped``) EfficientZero V2's estimate.  The
    pre-squash entropy grows without bound with the std, which piles the actions onto the
    bounds; the squashed one is at most dims x log 2 (uniform on [-1, 1]).  It has no closed
    form: per dimension it is the Gaussian's plus E[log(1 - tanh(x)^2)], taken by
    Gauss-Hermite quadrature (deterministic, exact gradients)."""
    if spec.mode == "factorized":
        logp = factorized_log_probs(spec, params, xp=TORCH)
        return -(logp.exp() * logp).sum((-1, -2))
    mean, std = gaussian_policy(params, spec.dims)
    if kind == "clipped":
        return _clipped_entropy(mean, std).sum(-1)
    entropy = torch.log(std) + 0.5 * (1.0 + math.log(2 * math.pi))
    if kind == "squashed":
        nodes, weights = _hermite_rule(params)
        x = mean.unsqueeze(-1) + std.unsqueeze(-1) * nodes  # [..., D, N]
        log_jacobian = 2.0 * (math.log(2.0) - x - F.softplus(-2.0 * x))  # log(1 - tanh(x)^2), stable
        entropy = entropy + (log_jacobian * weights).sum(-1)
    return entropy.sum(-1)


ENTROPY_CLIP = 0.999
"""``train.entropy=clipped``: the bound EfficientZero V2's code clips its sampled actions to."""
_LEGENDRE_NODES, _LEGENDRE_WEIGHTS = np.polynomial.legendre.leggauss(32)  # near float64 precision over +-8 std
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _clipped_entropy(mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Per dimension, -E[log pi(a)] for a = clip(tanh(x), +-b), x ~ N(mean, std), b =
    ENTROPY_CLIP, with log pi(a) = log N(atanh(a)) - log(1 - a^2): the expectation V2's
    1024-draw estimate (and, the integrand being continuous in x, its reparameterized
    gradient) averages to.  Exact: the two clipped tails are constants times the normal's
    tail masses; between them, Gauss-Legendre over z = (x - mean) / std within +-8."""
    c = math.atanh(ENTROPY_CLIP)
    at_clip = math.log(1.0 - ENTROPY_CLIP ** 2)  # log(1 - a^2) where a is clipped
    log_std = torch.log(std)
    low, high = (-c - mean) / std, (c - mean) / std
    tails = (torch.special.ndtr(low) * (0.5 * low * low + log_std + _HALF_LOG_2PI + at_clip)
             + torch.special.ndtr(-high) * (0.5 * high * high + log_std + _HALF_LOG_2PI + at_clip))
    lo, hi = low.clamp(min=-8.0), high.clamp(max=8.0)
    hi = torch.maximum(hi, lo)  # the inside lies beyond 8 std: nothing to add
    nodes = torch.as_tensor(_LEGENDRE_NODES, dtype=mean.dtype, device=mean.device)
    weights = torch.as_tensor(_LEGENDRE_WEIGHTS, dtype=mean.dtype, device=mean.device)
    half = (0.5 * (hi - lo)).unsqueeze(-1)
    z = (0.5 * (hi + lo)).unsqueeze(-1) + half * nodes  # [..., D, N]
    x = mean.unsqueeze(-1) + std.unsqueeze(-1) * z
    log_jacobian = 2.0 * (math.log(2.0) - x - F.softplus(-2.0 * x))  # log(1 - tanh(x)^2), stable
    neg_log_pi = 0.5 * z * z + log_std.unsqueeze(-1) + _HALF_LOG_2PI + log_jacobian  # a = tanh(x) inside
    inside = neg_log_pi * torch.exp(-0.5 * z * z - _HALF_LOG_2PI)
    return tails + (half * weights * inside).sum(-1)


HERMITE_NODES = 32
"""Quadrature points of the squashed-Gaussian entropy."""
_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(HERMITE_NODES)
_WEIGHTS = _WEIGHTS / _WEIGHTS.sum()  # E[f(z)], z ~ N(0, 1): probabilists' Gauss-Hermite, normalized


def _hermite_rule(like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The quadrature's nodes and weights in ``like``'s dtype and device."""
    return (torch.as_tensor(_NODES, dtype=like.dtype, device=like.device),
            torch.as_tensor(_WEIGHTS, dtype=like.dtype, device=like.device))
