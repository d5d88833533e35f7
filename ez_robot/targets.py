"""Training targets: what the learner trains its predictions towards, and how far each
value target looks ahead.

For each sampled move t and unroll index u in 0..K:

- the value target, the paper's off-policy correction (eq. 4):
      z_{t+u} = sum_{i<l} gamma^i u_{t+u+i} + gamma^l nu_{t+u+l},
  with the dynamic horizon l = clip(k - floor(age / (tau * T_total)), 1, k) and nu the
  root value of a fresh search (EfficientZero V2's mixed target: l = k and the target
  network's value prediction for recent data and at the start, l = 0, the search value
  itself, for old data).  This module says l and where nu comes from;
  :func:`ez_robot.batch.gather_batch` sums the rewards, :mod:`ez_robot.reanalyze`
  searches (or predicts) nu and completes the :class:`Targets`;
- the policy target: the visit distribution (or, in the sampled modes, the improved
  policy over the searched candidates) of a target-network search, or the one stored at
  collection.

The value-prefix targets need no search: they come with the batch
(:attr:`ez_robot.batch.Batch.value_prefix_targets`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Targets", "dynamic_horizon", "value_horizons", "network_bootstraps"]


@dataclass
class Targets:
    """The searched targets of a batch (:func:`ez_robot.reanalyze.reanalyze`).  B samples,
    K unroll steps."""

    value: np.ndarray
    """[B, K + 1] float32 z_{t+u}."""
    policy: np.ndarray
    """[B, K + 1, A] float32 policy targets; sampled modes: [B, K + 1, C] over ``candidates``."""
    searched_policy: np.ndarray
    """[B] bool: the sample's policy targets come from a target-network search."""
    num_searches: int
    """Roots searched for this batch."""
    num_stored: int = 0
    """Bootstraps and policies taken from stored search results instead (buffer mode)."""
    candidates: "np.ndarray | None" = None
    """Sampled modes: [B, K + 1, C, D] float32 the candidate actions ``policy`` is over."""


def dynamic_horizon(collected_at: np.ndarray, train_step: int, total_train_steps: int, td_steps: int,
                    tau: float) -> np.ndarray:
    """l in [1, k]: older data bootstraps sooner (paper, eq. 4)."""
    age = np.maximum(train_step - np.asarray(collected_at, np.int64), 0)
    return np.clip(td_steps - np.floor(age / (tau * total_train_steps)).astype(np.int64), 1, td_steps)


def value_horizons(collected_at: np.ndarray, train_step: int, total_train_steps: int, train) -> np.ndarray:
    """l per sample for ``train`` (a :class:`ez_robot.config.TrainConfig`): k without the
    off-policy correction; ``dynamic_horizon`` (the paper); or, with
    ``value_target=mixed`` (EfficientZero V2), k for every sample before ``mixed_start``,
    and afterwards k for data collected within ``mixed_window`` and 0 (the search value of
    the position itself) for older data.  Where the target bootstraps from the network's
    value instead of a search: :func:`network_bootstraps`."""
    collected_at = np.asarray(collected_at, np.int64)
    if not train.off_policy_correction:
        return np.full(len(collected_at), train.td_steps, np.int64)
    if train.value_target == "mixed":
        return np.where(network_bootstraps(collected_at, train_step, total_train_steps, train), train.td_steps, 0)
    return dynamic_horizon(collected_at, train_step, total_train_steps, train.td_steps, train.dynamic_horizon_tau)


def network_bootstraps(collected_at: np.ndarray, train_step: int, total_train_steps: int, train) -> np.ndarray:
    """[B] bool: the value target bootstraps from the target network's value prediction of
    o_{t+l} (no search).  Every sample without the off-policy correction; with
    ``value_target=mixed`` (EfficientZero V2) every sample before ``mixed_start`` and the
    recent ones after it; none with the paper's correction (a fresh search's root value)."""
    collected_at = np.asarray(collected_at, np.int64)
    if not train.off_policy_correction:
        return np.ones(len(collected_at), bool)
    if train.value_target != "mixed":
        return np.zeros(len(collected_at), bool)
    if train_step < train.mixed_start * total_train_steps:
        return np.ones(len(collected_at), bool)
    return train_step - collected_at < train.mixed_window * total_train_steps
