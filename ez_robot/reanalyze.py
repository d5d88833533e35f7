"""Reanalyze: fresh searches with the target network complete a batch's targets.

- value targets (off-policy correction): the bootstrap nu_{t+u+l} is the root value of a
  search from o_{t+u+l} (without correction: the value stored at collection, l = k);
- policy targets: for ``reanalyze_policy_ratio`` of the samples (99%) the visit
  distribution of a fresh search (with fresh root noise) replaces the stored one.

Both sets of observations go through one batched call of the one search function.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ez_robot._search import SearchConfig
from ez_robot.inference import TorchInference, run_search
from ez_robot.targets import BatchContext

__all__ = ["Targets", "reanalyze"]


@dataclass
class Targets:
    value: np.ndarray
    """[B, K + 1] float32 z_{t+u}."""
    policy: np.ndarray
    """[B, K + 1, A] float32 policy targets."""
    searched_policy: np.ndarray
    """[B] bool: the sample's policy targets come from a fresh search."""
    num_searches: int
    """Roots searched for this batch."""


def reanalyze(context: BatchContext, ref_segments: list, inference: TorchInference, search_config: SearchConfig,
              rng: np.random.Generator, *, policy_ratio: float, off_policy_correction: bool,
              max_search_batch: int = 1024) -> Targets:
    batch = context.observations.shape[0]
    bootstrap = context.bootstrap_index >= 0  # [B, K + 1]
    policy_rows = rng.random(batch) < policy_ratio
    policy_cells = context.mask_policy.astype(bool) & policy_rows[:, None]

    # --- gather the roots: bootstrap observations, then policy observations ---
    roots = []
    if off_policy_correction:
        for b, u in zip(*np.nonzero(bootstrap)):
            roots.append(ref_segments[b].observation(int(context.bootstrap_index[b, u])))
    num_value_roots = len(roots)
    roots.extend(context.observations[policy_cells])

    values = context.stored_bootstrap_values.copy()
    policy = context.stored_policies.copy()
    if roots:
        out = run_search(inference, np.stack(roots), search_config.replace(temperature=1.0), rng,
                         max_batch=max_search_batch)
        if off_policy_correction:
            values[bootstrap] = out.root_values[:num_value_roots]
        policy[policy_cells] = out.policy[num_value_roots:]
    value = context.value_partial + context.bootstrap_discount * np.where(bootstrap, values, 0.0)
    return Targets(value=value.astype(np.float32), policy=policy, searched_policy=policy_rows,
                   num_searches=len(roots))
