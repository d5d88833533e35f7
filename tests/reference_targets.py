"""The batch targets written one sample and one unroll step at a time, straight from the
definitions (the paper's eq. 4 and the masks of :mod:`ez_robot.targets`): the oracle the
batched :func:`ez_robot.batch.gather_batch` must match."""
from __future__ import annotations

import dataclasses

import numpy as np

from ez_robot.action_modes import ActionSpec
from ez_robot.replay import SampleRef
from ez_robot.batch import Batch, blank_batch


def loop_context(ref: SampleRef, *, unroll_steps: int, horizons: np.ndarray, discount: float,
                 lstm_horizon: int, num_actions: "int | ActionSpec", rng: np.random.Generator,
                 search_from: int | None = None, network_bootstrap: np.ndarray | None = None) -> Batch:
    """:func:`ez_robot.batch.gather_batch` without the bootstrap observations, one
    cell at a time (into the same :func:`ez_robot.batch.blank_batch`)."""
    spec = num_actions if isinstance(num_actions, ActionSpec) else ActionSpec("joint", num_actions=num_actions)
    K = unroll_steps
    context = blank_batch(ref, K, spec, rng)  # its arrays, filled in place below
    (frames, actions, vp_targets, partial, boot_discount, boot_index, stored_values, policies, mask_policy,
     mask_value, mask_vp, mask_consistency, searched_values, value_fresh, searched_policies, policy_fresh,
     stored_candidates, searched_candidates, bootstrap_self) = (
        getattr(context, f.name) for f in dataclasses.fields(Batch)[:19])
    powers = discount ** np.arange(int(horizons.max()) + 1)

    for b, (segment, t, l) in enumerate(zip(ref.segments, ref.positions, horizons)):
        moves = segment.num_moves  # observations 0..moves exist; moves 0..moves-1 have actions
        rewards, terminated = segment.rewards, segment.terminated
        search = segment.search if search_from is not None and segment.search is not None \
            and segment.search.version >= search_from else None
        for j in range(K + segment.frame_stack):  # the frames of o_t .. o_{t+K}; past the data, the last
            frames[b, j] = segment.frames[min(t + j, len(segment.frames) - 1)]
        for u in range(K + 1):
            pos = t + u
            if pos < moves:
                mask_policy[b, u] = 1.0
                policies[b, u] = segment.policies[pos]
                if spec.sampled:
                    stored_candidates[b, u] = segment.candidates[pos]
                if search is not None:
                    searched_policies[b, u], policy_fresh[b, u] = search.policies[pos], True
                    if spec.sampled:
                        searched_candidates[b, u] = search.candidates[pos]
            if u < K:
                if pos < moves:
                    actions[b, u] = segment.actions[pos]
                # value prefix after action u: the LSTM restarts every lstm_horizon steps
                start = t + (u // lstm_horizon) * lstm_horizon
                vp_targets[b, u] = rewards[start:min(pos + 1, moves)].sum()
                mask_vp[b, u] = 1.0 if (pos < moves or terminated) else 0.0
                mask_consistency[b, u] = 1.0 if pos + 1 <= moves else 0.0
            if pos > moves:  # past the end of the episode
                mask_value[b, u] = 1.0 if terminated else 0.0  # absorbing: z = 0
                continue
            horizon = min(int(l), moves - pos)  # the tail covers k moves unless the episode ended
            partial[b, u] = float(np.dot(powers[:horizon], rewards[pos:pos + horizon]))
            mask_value[b, u] = 1.0
            if not (terminated and pos + horizon == moves):
                boot_index[b, u] = pos + horizon
                boot_discount[b, u] = powers[horizon]
                bootstrap_self[b, u] = horizon == 0
                stored_values[b, u] = segment.root_values[pos + horizon]
                if search is not None:
                    searched_values[b, u], value_fresh[b, u] = search.values[pos + horizon], True
    if network_bootstrap is not None:
        context.network_bootstrap[:] = (boot_index >= 0) & np.asarray(network_bootstrap, bool)[:, None]
    return context
