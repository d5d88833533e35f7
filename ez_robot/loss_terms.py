"""The terms of EfficientZero's loss by name, and how each enters the total and the logged
metrics.

One table, read by the loss (:mod:`ez_robot.losses`, which computes the terms, sums them
and logs them) and by the reports (which plot the logged ones).  It needs no torch, so a
report runs where torch is not installed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

__all__ = ["Term", "ROOT", "UNROLLED", "TERMS", "DIAGNOSTICS", "LOSSES"]

ROOT = "root"
"""A term of the root step u = 0, weighted by the step weights' root weight (1, or 1/K)."""
UNROLLED = "unrolled"
"""A term summed over the unrolled steps u = 1..K, weighted 1/K."""


@dataclass(frozen=True)
class Term:
    """One per-sample term [B] of the loss."""

    name: str
    steps: str
    """:data:`ROOT` or :data:`UNROLLED`."""
    coef: Callable[..., float] | None = None
    """Its coefficient read off the config's ``train`` section (lambda_1..3); ``None``: 1."""
    logged: bool = True
    """Logged under its name: the batch mean of the term per step (of the root step, or the
    mean over the K unrolled steps)."""


TERMS = (
    Term("value_loss", ROOT, lambda train: train.value_loss_coef),
    Term("policy_loss", ROOT, lambda train: train.policy_loss_coef),
    Term("value_prefix_loss", UNROLLED),
    Term("unrolled_value_loss", UNROLLED, lambda train: train.value_loss_coef, logged=False),
    Term("unrolled_policy_loss", UNROLLED, lambda train: train.policy_loss_coef, logged=False),
    Term("consistency_loss", UNROLLED, lambda train: train.consistency_loss_coef),
)
"""The loss's terms, in the order the total sums them."""

DIAGNOSTICS = ("policy_entropy",)
"""Per-sample terms that are logged (their batch mean) but not part of the loss."""

LOSSES = ("loss",) + tuple(term.name for term in TERMS if term.logged)
"""The logged loss metrics: the total, then its logged terms."""
