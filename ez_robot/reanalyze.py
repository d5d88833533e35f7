"""Reanalyze: target-network searches complete a batch's targets.

- value targets (off-policy correction): the bootstrap nu_{t+u+l} is the root value of a
  target-network search from o_{t+u+l}; without correction (ablation) they are the plain
  k-step targets of the paper's section 2, l = k and the target network's predicted value
  of o_{t+u+k}, no search;
- policy targets: for ``reanalyze_policy_ratio`` of the samples (99%) the visit
  distribution of a target-network search replaces the one stored at collection.

Two ways to get those searches (``reanalyze.mode``):

- ``batch`` (the paper): every batch searches its bootstrap and policy observations, with
  fresh root noise, in one batched call of the one search function;
- ``buffer``: :func:`search_segments` searches every stored observation once per target
  network (a sweep over the replay, newest data first) and the replay keeps the results;
  a batch uses those made by a recent enough target network (``reanalyze.staleness``)
  and searches, as in batch mode, only the observations that have none.  The sweep costs
  one search per stored observation per target period, where batch mode costs batch x
  (unroll + 1) x 2 searches per training step, whatever the buffer holds.
"""
from __future__ import annotations

import numpy as np

from ez_robot.batch import Batch
from ez_robot.mcts import visit_policy
from ez_robot.search_config import SearchConfig
from ez_robot.config import search_config
from ez_robot.inference import run_search
from ez_robot.torch_inference import TorchInference
from ez_robot.replay import SearchResults
from ez_robot.targets import Targets

__all__ = ["reanalyze", "search_segments", "sweep_round", "reanalyze_search_config", "Sweeper"]


def reanalyze(batch: Batch, inference: TorchInference, search_config: SearchConfig,
              rng: np.random.Generator, *, policy_ratio: float,
              max_search_batch: int = 1024) -> Targets:
    """The targets of ``batch``: each value target's bootstrap from a stored search result
    recent enough, the target network's prediction, or a fresh search; for ``policy_ratio``
    of the samples (drawn from ``rng``) the policy targets of a target-network search,
    stored or fresh, the others keeping the policies stored at collection."""
    size = batch.frames.shape[0]
    bootstrap = batch.bootstrap_index >= 0  # [B, K + 1]
    policy_rows = rng.random(size) < policy_ratio
    policy_cells = batch.mask_policy.astype(bool) & policy_rows[:, None]

    values = batch.stored_bootstrap_values.copy()
    policy = batch.stored_policies.copy()
    candidates = None if batch.stored_candidates is None else batch.stored_candidates.copy()
    # --- stored search results (buffer reanalyze), where recent enough ---
    # the target network's value prediction, searched nowhere: the ablation's every bootstrap,
    # the mixed target's recent ones
    by_network = bootstrap & (batch.network_bootstrap if batch.network_bootstrap is not None else False)
    fresh = batch.value_fresh & ~by_network
    value_cells = bootstrap & ~fresh & ~by_network
    values[fresh] = batch.searched_values[fresh]
    if by_network.any():
        values[by_network] = _predicted_values(inference, batch.bootstrap_observations_of(by_network),
                                               max_search_batch)
    stored_policy = policy_cells & batch.policy_fresh
    policy[stored_policy] = batch.searched_policies[stored_policy]
    if candidates is not None:
        candidates[stored_policy] = batch.searched_candidates[stored_policy]
    policy_cells = policy_cells & ~batch.policy_fresh

    # --- search the rest: bootstrap observations, then policy observations; a cell whose
    # bootstrap is its own observation (l = 0) takes its value from its policy search ---
    own = batch.bootstrap_self if batch.bootstrap_self is not None else False
    shared = value_cells & policy_cells & own
    value_only = value_cells & ~shared
    num_value_roots, obs_shape = int(value_only.sum()), batch.observations.shape[2:]
    roots = np.empty((num_value_roots + int(policy_cells.sum()),) + obs_shape, batch.frames.dtype)
    batch.bootstrap_observations_of(value_only, out=roots[:num_value_roots])  # copied once, into place
    roots[num_value_roots:] = batch.observations[policy_cells]  # stacked from the frames of these cells alone
    if len(roots):
        out = run_search(inference, roots, search_config.replace(temperature=1.0), rng, max_batch=max_search_batch)
        values[value_only] = out.root_values[:num_value_roots]
        values[shared] = out.root_values[num_value_roots:][shared[policy_cells]]
        policy[policy_cells] = out.policy[num_value_roots:]  # visits at T = 1, or the improved policy
        if candidates is not None:
            candidates[policy_cells] = out.candidates[num_value_roots:]
    value = batch.value_partial + batch.bootstrap_discount * np.where(bootstrap, values, 0.0)
    num_stored = int((fresh & bootstrap).sum())
    return Targets(value=value.astype(np.float32), policy=policy, searched_policy=policy_rows,
                   num_searches=len(roots), num_stored=num_stored + int(stored_policy.sum()),
                   candidates=candidates)


def _predicted_values(inference, observations: np.ndarray, max_batch: int) -> np.ndarray:
    """The network's value prediction v(o) for each observation, in chunks of ``max_batch``."""
    if not len(observations):
        return np.zeros(0, np.float32)
    return np.concatenate([inference.root(observations[i:i + max_batch]).value
                           for i in range(0, len(observations), max_batch)])


def search_segments(segments: list, inference: TorchInference, search_config: SearchConfig,
                    rng: np.random.Generator, version: int, round: int = -1,
                    max_search_batch: int = 1024) -> list[SearchResults]:
    """One target-network search of every observation of each segment (the buffer sweep's
    unit of work), with root noise as a batch search has it."""
    observations = np.concatenate([np.stack([s.observation(i) for i in range(s.num_moves + 1)]) for s in segments])
    out = run_search(inference, observations, search_config.replace(temperature=1.0), rng, max_batch=max_search_batch)
    sampled = out.candidates is not None
    policies = out.policy if sampled else visit_policy(out.visit_counts, 1.0)
    results, start = [], 0
    for segment in segments:
        end = start + segment.num_moves + 1
        results.append(SearchResults(values=out.root_values[start:end].astype(np.float32),
                                     policies=policies[start:end - 1].astype(np.float32), version=version,
                                     round=round, candidates=out.candidates[start:end - 1] if sampled else None))
        start = end
    return results


def sweep_round(config, target_version: int, train_steps: int) -> int:
    """The sweep round now (the training step it began at): the sweep searches again
    whatever is older.  ``staleness`` 0: ``sweeps_per_target`` rounds per target network,
    evenly spread over its period; ``s`` >= 1: one round every ``s`` target periods."""
    r, interval = config.reanalyze, config.train.target_update_interval
    if r.staleness >= 1:
        return target_version - (r.staleness - 1) * interval
    every = max(interval // r.sweeps_per_target, 1)
    # The round stays inside the period of the target network the results come from, whatever
    # step count comes with it: on Ray a step count that reached the storage before its target
    # network (a period or more past target_version) once labelled old-network results with the
    # new round, which then counted as complete, and batches searched those results again.
    into_period = min(max(train_steps - target_version, 0), interval - 1)
    return target_version + into_period // every * every


def reanalyze_search_config(config) -> SearchConfig:
    """Reanalyze's searches: the run's search, with or without root noise."""
    return search_config(config).replace(add_noise=config.reanalyze.root_noise)


class Sweeper:
    """The buffer sweep inside a training loop (one process, or a Ray learner without
    reanalyze workers): after each training step it searches the stalest segments, at
    the pace that refreshes every stored observation once per ``staleness`` target
    periods (``staleness`` 0: all of them as soon as the target network changes).
    ``replay`` is a :class:`ez_robot.replay.ReplayBuffer` or anything with its
    ``observations_stored``, ``next_to_search`` and ``store_search``."""

    def __init__(self, config, inference: TorchInference, search_config: SearchConfig, rng: np.random.Generator):
        self.config, self.inference, self.search_config, self.rng = config, inference, search_config, rng
        self.credit = 0.0  # observations the sweep may search now

    def step(self, replay, target_version: int, train_steps: int) -> int:
        """One training step's share of the sweep; returns the observations searched."""
        r, t = self.config.reanalyze, self.config.train
        if r.staleness == 0:  # a round refreshes everything as soon as it begins
            self.credit = float("inf")
        else:
            self.credit += replay.observations_stored() / (r.staleness * t.target_update_interval)
        searched, older_than = 0, sweep_round(self.config, target_version, train_steps)
        while self.credit > 0:
            item = replay.next_to_search(older_than)
            if item is None:
                self.credit = 0.0  # all current: no credit piles up for later
                break
            segment_id, segment = item
            (results,) = search_segments([segment], self.inference, self.search_config, self.rng, target_version,
                                         round=older_than)
            replay.store_search(segment_id, results)
            self.credit -= segment.num_moves + 1
            searched += segment.num_moves + 1
        return searched
