"""A debugging trace of what each training step trains on, to compare the two trainers'
timelines step by step (``EZ_ROBOT_STEP_TRACE=DIR``: every process that trains appends
one JSON line per training step to ``DIR/trace-<pid>.jsonl``; unset, nothing is done).

A line holds the replay as the step sampled it (moves, segments, the acting network of
the newest decisions, the sweep round every segment has results of), what the sample
read (the target-network versions and sweep rounds of the stored searches, how many
cells had none), and the targets (mean value target, mean policy-target entropy), with
the learning rate, beta and the priorities.  Nothing here imports torch: the Ray replay
actor calls :func:`replay_side`.
"""
from __future__ import annotations

import json
import os

import numpy as np

__all__ = ["enabled", "replay_side", "learner_side", "write"]

ENV = "EZ_ROBOT_STEP_TRACE"


def enabled() -> bool:
    return bool(os.environ.get(ENV))


def replay_side(replay, ref, batch, train_steps: int, target_version: int, search_from) -> dict:
    """What the sample of training step ``train_steps`` saw in ``replay`` and read from it."""
    searches = [s.search for s in ref.segments]
    versions = [r.version for r in searches if r is not None]
    rounds = [r.round for r in searches if r is not None]
    priorities = np.concatenate(replay._priorities) if replay._priorities else np.zeros(1)
    return {"step": train_steps, "moves": len(replay), "segments": len(replay.segments),
            "newest_collected": max((int(s.collected_at[-1]) for s in replay.segments), default=-1),
            "swept_round": replay.swept_round, "target_version": target_version,
            "search_from": -1 if search_from is None else int(search_from),
            "sample_with_search": len(versions) / len(searches),
            "search_version_min": min(versions, default=-1), "search_version_max": max(versions, default=-1),
            "search_round_min": min(rounds, default=-1),
            "sample_collected_mean": float(np.mean([s.collected_at[p] for s, p in zip(ref.segments, ref.positions)])),
            "value_fresh": float(batch.value_fresh.sum() / max((batch.bootstrap_index >= 0).sum(), 1)),
            "policy_fresh": float(batch.policy_fresh.sum() / max(batch.mask_policy.sum(), 1)),
            "is_weight_mean": float(ref.weights.mean()),
            "priority_mean": float(priorities.mean()), "priority_max": float(priorities.max()),
            "sample_positions_sum": int(ref.positions.sum())}


def learner_side(batch, targets, lr: float, acting_version: int) -> dict:
    """The targets the step trained towards."""
    mask = batch.mask_policy.astype(bool)
    policy = np.clip(targets.policy[mask], 1e-12, 1.0)
    entropy = -(policy * np.log(policy)).sum(-1)
    return {"value_target_mean": float(targets.value[:, 0].mean()),
            "value_target_all": float((targets.value * batch.mask_value).sum() / max(batch.mask_value.sum(), 1)),
            "policy_entropy": float(entropy.mean()) if len(entropy) else 0.0,
            "policy_searched": float(targets.searched_policy.mean()), "searches": int(targets.num_searches),
            "lr": lr, "acting_version": acting_version}


def write(record: dict) -> None:
    path = os.path.join(os.environ[ENV], f"trace-{os.getpid()}.jsonl")
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
