"""A debugging trace of what each training step trains on, to compare the two trainers'
timelines step by step: with ``EZ_ROBOT_STEP_TRACE=DIR`` in the environment, every
process that trains appends one JSON line per training step to ``DIR/trace-<pid>.jsonl``;
without it nothing is computed.  It draws no random numbers: a traced run trains as an
untraced one.

A line (``step``: the training steps done before this one) holds the replay as the
step sampled it (moves, segments, decisions ``played``, the acting network's step of the
newest decision, the sweep round every segment has results of), what the sample read
(its target-network version, the oldest version of stored search results it may use,
the versions and sweep rounds of the results it found, the share of value and policy
cells they filled), the targets it trained towards (mean value target, mean entropy of
the policy targets, searches of its own), the learning rate, the acting network's
version, the importance-sampling weights and the priorities.  Nothing here imports
torch: the Ray replay actor calls :func:`replay_side`.
"""
from __future__ import annotations

import json
import os

import numpy as np

__all__ = ["ENV", "enabled", "replay_side", "learner_side", "write"]

ENV = "EZ_ROBOT_STEP_TRACE"


def enabled() -> bool:
    return bool(os.environ.get(ENV))


def replay_side(replay, ref, batch, train_steps: int, target_version: int, search_from: int | None) -> dict:
    """What the sample of training step ``train_steps`` saw in ``replay`` and read from it."""
    found = [s.search for s in ref.segments if s.search is not None and search_from is not None
             and s.search.version >= search_from]
    priorities = replay.priorities()
    bootstraps = max(int((batch.bootstrap_index >= 0).sum()), 1)
    return {"step": train_steps, "moves": len(replay), "segments": len(replay.segments),
            "newest_collected": max((int(s.collected_at[-1]) for s in replay.segments), default=-1),
            "swept_round": replay.swept_round, "target_version": target_version,
            "search_from": -1 if search_from is None else int(search_from),
            "sample_with_search": len(found) / len(ref.segments),
            "search_version_min": min((r.version for r in found), default=-1),
            "search_version_max": max((r.version for r in found), default=-1),
            "search_round_min": min((r.round for r in found), default=-1),
            "sample_collected_mean": float(np.mean([s.collected_at[p] for s, p in zip(ref.segments, ref.positions)])),
            "value_fresh": float(batch.value_fresh.sum() / bootstraps),
            "policy_fresh": float(batch.policy_fresh.sum() / max(batch.mask_policy.sum(), 1)),
            "is_weight_mean": float(ref.weights.mean()),
            "priority_mean": float(priorities.mean()), "priority_max": float(priorities.max())}


def learner_side(batch, targets, lr: float, acting_version: int, played: int) -> dict:
    """The targets the step trained towards, with the learner's state when it took it."""
    policy = np.clip(targets.policy[batch.mask_policy.astype(bool)], 1e-12, 1.0)
    entropy = -(policy * np.log(policy)).sum(-1)
    return {"value_target_mean": float(targets.value[:, 0].mean()),
            "value_target_all": float((targets.value * batch.mask_value).sum() / max(batch.mask_value.sum(), 1)),
            "policy_entropy": float(entropy.mean()) if len(entropy) else 0.0,
            "policy_searched": float(targets.searched_policy.mean()), "searches": int(targets.num_searches),
            "lr": lr, "acting_version": acting_version, "played": played}


def write(batch, targets, lr: float, acting_version: int, played: int) -> None:
    """Appends the training step's line: the replay's part (``batch.trace``, set where the
    batch was sampled) and the learner's."""
    record = {**(batch.trace or {}), **learner_side(batch, targets, lr, acting_version, played)}
    with open(os.path.join(os.environ[ENV], f"trace-{os.getpid()}.jsonl"), "a") as f:
        f.write(json.dumps(record) + "\n")
