"""A sampled batch: what the learner trains on, gathered from the replay (the CPU half of
reanalyze).

For each sampled move t and unroll index u in 0..K a :class:`Batch` holds:

- the observations o_t .. o_{t+K} (o_{t+u} is the consistency target of step u) and the
  actions a_t .. a_{t+K-1} the model unrolls with;
- value-prefix targets: the undiscounted reward sums since the last LSTM reset;
- the parts of the value target z_{t+u} (:mod:`ez_robot.targets`) that need no search:
  the discounted reward sum, gamma^l, and where the bootstrap comes from (a stored search
  result, the target network's prediction, or a search :mod:`ez_robot.reanalyze` runs);
- the policies stored at collection, which reanalyze may replace;
- masks for what lies past the end of the episode: after termination the state is
  absorbing (value and rewards 0); after truncation there is no data, so those terms
  are masked out rather than guessed.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ez_robot.config import Config, search_config
from ez_robot.action_modes import ActionSpec
from ez_robot import step_trace
from ez_robot.replay import ReplayBuffer, SampleRef
from ez_robot.schedules import priority_beta, total_train_steps
from ez_robot.targets import network_bootstraps, value_horizons

__all__ = ["Batch", "blank_batch", "gather_batch", "fresh_from", "sample_batch"]


@dataclass
class Batch:
    """A sampled batch: everything the learner needs but the searches' results
    (:class:`ez_robot.targets.Targets`).  B samples, K unroll steps."""

    frames: np.ndarray
    """[B, K + S, *frame_shape] the frames of o_t .. o_{t+K} (S = ``frame_stack``): o_{t+u}
    is frames u .. u + S - 1 stacked on axis 0 (:attr:`observations`), so a stacked batch is
    gathered, shipped and copied to a device as K + S frames a sample, not S (K + 1).  Past
    the data the segment's last frame repeats (those cells are masked)."""
    actions: np.ndarray
    """[B, K] int64 a_{t+u} (past the episode: random, masked); sampled modes: [B, K, D]
    float32 action vectors."""
    value_prefix_targets: np.ndarray
    """[B, K] float32 reward sums since the last LSTM reset, after each unrolled action."""
    value_partial: np.ndarray
    """[B, K + 1] float32 sum_{i<l} gamma^i u_{t+u+i} (the discounted reward part of z)."""
    bootstrap_discount: np.ndarray
    """[B, K + 1] float32 gamma^l where z bootstraps, 0 where it does not."""
    bootstrap_index: np.ndarray
    """[B, K + 1] int64 move index (in the segment) of the bootstrap observation, -1 if none."""
    stored_bootstrap_values: np.ndarray
    """[B, K + 1] float32 the root values stored at collection (the stale bootstrap)."""
    stored_policies: np.ndarray
    """[B, K + 1, A] float32 visit distributions stored at collection (uniform past the end);
    sampled modes: [B, K + 1, C] improved policies over ``stored_candidates``."""
    mask_policy: np.ndarray
    """[B, K + 1] float32 1 where o_{t+u} has a move (a policy target)."""
    mask_value: np.ndarray
    """[B, K + 1] float32 1 where z_{t+u} is known (within the data, or absorbing)."""
    mask_value_prefix: np.ndarray
    """[B, K] float32 1 where the value-prefix target is known."""
    mask_consistency: np.ndarray
    """[B, K] float32 1 where o_{t+u+1} exists (consistency target of step u + 1)."""
    searched_values: np.ndarray
    """[B, K + 1] float32 the stored target-network root value of the bootstrap
    observation, where ``value_fresh`` (buffer reanalyze)."""
    value_fresh: np.ndarray
    """[B, K + 1] bool the bootstrap has a stored search result recent enough to use."""
    searched_policies: np.ndarray
    """[B, K + 1, A] float32 the stored target-network visit distribution at o_{t+u}, where
    ``policy_fresh``."""
    policy_fresh: np.ndarray
    """[B, K + 1] bool o_{t+u} has a stored search result recent enough to use."""
    stored_candidates: "np.ndarray | None" = None
    """Sampled modes: [B, K + 1, C, D] float32 the candidates of ``stored_policies``."""
    searched_candidates: "np.ndarray | None" = None
    """Sampled modes: [B, K + 1, C, D] float32 the candidates of ``searched_policies``."""
    bootstrap_self: "np.ndarray | None" = None
    """[B, K + 1] bool z_{t+u} is the search value of o_{t+u} itself (l = 0): one search of
    o_{t+u} gives both its value and its policy target."""
    network_bootstrap: "np.ndarray | None" = None
    """[B, K + 1] bool z_{t+u} bootstraps from the target network's value prediction of
    its bootstrap observation, not from a search (:func:`network_bootstraps`)."""
    bootstrap_observations: "np.ndarray | None" = None
    """[N, *obs_shape] o_{t+u+l} of the N cells of :meth:`bootstraps_to_compute`, in
    row-major order: reanalyze needs no segment (a Ray replay ships one array)."""
    frame_stack: int = 1
    """S, the frames per observation."""
    trace: "dict | None" = None
    """What :mod:`ez_robot.step_trace` recorded where the batch was sampled (with
    ``EZ_ROBOT_STEP_TRACE`` set); None otherwise."""

    @property
    def observations(self) -> np.ndarray:
        """[B, K + 1, S * C, *rest] o_{t+u}: a view of :attr:`frames` (read-only for S > 1), no copy."""
        if self.frame_stack == 1:
            return self.frames
        windows = np.lib.stride_tricks.sliding_window_view(self.frames, self.frame_stack, axis=1)
        stacked = np.moveaxis(windows, -1, 2)  # [B, K + 1, S, C, *rest]: the S frames of each lie in a row
        return stacked.reshape(stacked.shape[:2] + (-1,) + stacked.shape[4:])

    def bootstraps_to_compute(self) -> np.ndarray:
        """[B, K + 1] bool the bootstraps reanalyze may search or predict: those without a
        fresh stored search value, and the network's predictions."""
        network = self.network_bootstrap if self.network_bootstrap is not None else False
        return (self.bootstrap_index >= 0) & (network | ~self.value_fresh)

    def bootstrap_observations_of(self, cells: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """[cells.sum(), *obs_shape] the bootstrap observations of ``cells`` (a subset of
        :meth:`bootstraps_to_compute`), in row-major order; into ``out`` if given."""
        held = self.bootstraps_to_compute().ravel()
        if (cells.ravel() & ~held).any():
            raise ValueError("a bootstrap observation the batch does not hold was asked for")
        slot = np.cumsum(held) - 1
        return np.take(self.bootstrap_observations, slot[cells.ravel()], axis=0, out=out)


def blank_batch(ref: SampleRef, unroll_steps: int, spec: ActionSpec, rng: np.random.Generator) -> Batch:
    """A batch with nothing filled in: every mask 0, no bootstrap, uniform policies,
    and random actions (what the unroll takes past the end of an episode)."""
    size, K = len(ref.positions), unroll_steps
    first = ref.segments[0]
    frames = np.empty((size, K + first.frame_stack) + first.frames.shape[1:], first.frames.dtype)
    num_policy = first.policies.shape[1]  # A, or the candidates per search C
    if spec.sampled:
        actions = rng.uniform(-1.0, 1.0, size=(size, K, spec.dims)).astype(np.float32)
        stored_candidates = np.zeros((size, K + 1) + first.candidates.shape[1:], np.float32)
        searched_candidates = np.zeros_like(stored_candidates)
    else:
        actions = rng.integers(spec.num_actions, size=(size, K)).astype(np.int64)
        stored_candidates = searched_candidates = None
    vp_targets = np.zeros((size, K), np.float32)
    partial = np.zeros((size, K + 1), np.float32)
    boot_discount = np.zeros((size, K + 1), np.float32)
    boot_index = np.full((size, K + 1), -1, np.int64)
    stored_values = np.zeros((size, K + 1), np.float32)
    policies = np.full((size, K + 1, num_policy), 1.0 / num_policy, np.float32)
    mask_policy = np.zeros((size, K + 1), np.float32)
    mask_value = np.zeros((size, K + 1), np.float32)
    mask_vp = np.zeros((size, K), np.float32)
    mask_consistency = np.zeros((size, K), np.float32)
    searched_values = np.zeros((size, K + 1), np.float32)
    value_fresh = np.zeros((size, K + 1), bool)
    searched_policies = np.zeros((size, K + 1, num_policy), np.float32)
    policy_fresh = np.zeros((size, K + 1), bool)
    bootstrap_self = np.zeros((size, K + 1), bool)
    return Batch(frames, actions, vp_targets, partial, boot_discount, boot_index, stored_values,
                 policies, mask_policy, mask_value, mask_vp, mask_consistency, searched_values, value_fresh,
                 searched_policies, policy_fresh, stored_candidates, searched_candidates, bootstrap_self,
                 np.zeros((size, K + 1), bool), frame_stack=first.frame_stack)


def gather_batch(ref: SampleRef, *, unroll_steps: int, horizons: np.ndarray, discount: float,
                 lstm_horizon: int, num_actions: "int | ActionSpec", rng: np.random.Generator,
                 search_from: int | None = None, network_bootstrap: np.ndarray | None = None) -> Batch:
    """Gathers observations, actions and the reward parts of every target.

    ``num_actions``: A, or the run's :class:`ez_robot.action_modes.ActionSpec` (the sampled
    modes store action vectors and policies over candidates).

    ``horizons`` [B] is l per sample (:func:`ez_robot.targets.value_horizons`); l = 0: z is
    the bootstrap itself.  ``network_bootstrap`` [B] bool: samples that bootstrap from the
    network's value prediction instead of a search (:func:`ez_robot.targets.network_bootstraps`;
    ``None``: none).
    ``search_from``: stored search results (:class:`ez_robot.replay.SearchResults`) made
    by a target network of this version or later are fresh enough to use; ``None`` uses
    none (the paper's batch reanalyze searches everything)."""
    spec = num_actions if isinstance(num_actions, ActionSpec) else ActionSpec("joint", num_actions=num_actions)
    size, K = len(ref.positions), unroll_steps
    horizons = np.asarray(horizons, np.int64)
    batch = blank_batch(ref, K, spec, rng)
    # each sample's moves t .. t + K + l_max, copied into windows (zero past its data); the
    # targets are then computed for the whole batch at once
    l_max = int(horizons.max())
    width = K + 1 + l_max
    win_rewards = np.zeros((size, width), np.float32)
    win_values = np.zeros((size, width), np.float32)
    win_searched = np.zeros((size, width), np.float32)
    left = np.empty(size, np.int64)  # moves from t to the end of the segment's data (>= 1)
    terminated = np.empty(size, bool)
    has_search = np.zeros(size, bool)
    for b, (segment, t) in enumerate(zip(ref.segments, ref.positions)):
        moves, t = segment.num_moves, int(t)
        n_moves, n_obs = min(width, moves - t), min(width, moves + 1 - t)
        left[b], terminated[b] = moves - t, segment.terminated
        win_rewards[b, :n_moves] = segment.rewards[t:t + n_moves]
        win_values[b, :n_obs] = segment.root_values[t:t + n_obs]
        n = min(K + 1, moves - t)  # unroll positions with a move
        batch.stored_policies[b, :n] = segment.policies[t:t + n]
        batch.actions[b, :min(K, n)] = segment.actions[t:t + min(K, n)]
        if spec.sampled:
            batch.stored_candidates[b, :n] = segment.candidates[t:t + n]
        search = segment.search if search_from is not None and segment.search is not None \
            and segment.search.version >= search_from else None
        if search is not None:
            has_search[b] = True
            win_searched[b, :n_obs] = search.values[t:t + n_obs]
            batch.searched_policies[b, :n] = search.policies[t:t + n]
            if spec.sampled:
                batch.searched_candidates[b, :n] = search.candidates[t:t + n]
        n_frames = min(K + segment.frame_stack, len(segment.frames) - t)  # those of o_t .. o_{t+K}
        batch.frames[b, :n_frames] = segment.frames[t:t + n_frames]
        batch.frames[b, n_frames:] = segment.frames[-1]

    u = np.arange(K + 1)[None, :]  # [1, K + 1]
    left_, ended = left[:, None], terminated[:, None]
    batch.mask_policy[:] = u < left_
    batch.policy_fresh[:] = (u < left_) & has_search[:, None]
    # value prefix after action u: the rewards since the LSTM's last restart (every
    # lstm_horizon steps), up to the data's end (the windows are zero past it)
    sums = np.concatenate([np.zeros((size, 1), np.float32), np.cumsum(win_rewards[:, :K], axis=1)], axis=1)
    steps = np.arange(K)
    restart = (steps // lstm_horizon) * lstm_horizon
    batch.value_prefix_targets[:] = sums[:, steps + 1] - sums[:, restart]
    batch.mask_value_prefix[:] = (steps[None, :] < left_) | ended
    batch.mask_consistency[:] = steps[None, :] + 1 <= left_
    # value targets: the tail covers l moves unless the episode's data ends first
    within = u <= left_  # o_{t+u} exists
    batch.mask_value[:] = within | ended  # past a termination the state is absorbing: z = 0
    horizon = np.where(within, np.minimum(horizons[:, None], left_ - u), 0)
    powers = discount ** np.arange(l_max + 1)
    tail = np.zeros((size, K + 1))
    for i in range(l_max):
        tail += np.where(i < horizon, powers[i] * win_rewards[:, u[0] + i], 0.0)
    batch.value_partial[:] = np.where(within, tail, 0.0)
    boots = within & ~(ended & (u + horizon == left_))
    rows = np.arange(size)[:, None]
    batch.bootstrap_index[:] = np.where(boots, ref.positions[:, None] + u + horizon, -1)
    batch.bootstrap_discount[:] = np.where(boots, powers[horizon], 0.0)
    batch.bootstrap_self[:] = boots & (horizon == 0)
    batch.stored_bootstrap_values[:] = np.where(boots, win_values[rows, u + horizon], 0.0)
    batch.value_fresh[:] = boots & has_search[:, None]
    batch.searched_values[:] = np.where(batch.value_fresh, win_searched[rows, u + horizon], 0.0)
    if network_bootstrap is not None:
        batch.network_bootstrap[:] = boots & np.asarray(network_bootstrap, bool)[:, None]
    cells = zip(*np.nonzero(batch.bootstraps_to_compute()))
    batch.bootstrap_observations = np.array(
        [ref.segments[b].observation(batch.bootstrap_index[b, u]) for b, u in cells],
        batch.frames.dtype).reshape((-1,) + batch.observations.shape[2:])
    return batch


def fresh_from(config, target_version: int, swept_round: int) -> int | None:
    """The oldest target-network version whose stored results a batch may use: the
    current one's with ``staleness`` 0 once its first sweep round is complete
    (``swept_round``), the previous one's while it runs (Ray sweeps beside training; one
    process completes it before the next batch); ``staleness`` target updates back
    otherwise.  ``None`` in batch mode: a batch uses none."""
    r, t = config.reanalyze, config.train
    if r.mode == "batch":
        return None
    if r.staleness == 0:
        return target_version if swept_round >= target_version else target_version - t.target_update_interval
    return target_version - r.staleness * t.target_update_interval


def sample_batch(replay: ReplayBuffer, config: Config, train_steps: int, action: "ActionSpec | int",
                 rng: np.random.Generator, target_version: int):
    """A prioritized sample and its batch (beta annealed, value horizons from each
    move's collection step, the stored search results recent enough for the target network
    of ``target_version``).  Returns (SampleRef, Batch)."""
    t, total = config.train, total_train_steps(config)
    ref = replay.sample(t.batch_size, priority_beta(config, train_steps, total), rng)
    collected = np.array([s.collected_at[p] for s, p in zip(ref.segments, ref.positions)])
    horizons = value_horizons(collected, train_steps, total, t)
    searched = search_config(config)
    search_from = fresh_from(config, target_version, replay.swept_round)
    batch = gather_batch(ref, unroll_steps=t.unroll_steps, horizons=horizons, discount=searched.discount,
                         lstm_horizon=searched.lstm_horizon, num_actions=action, rng=rng,
                         search_from=search_from,
                         network_bootstrap=network_bootstraps(collected, train_steps, total, t))
    if step_trace.enabled():
        batch.trace = step_trace.replay_side(replay, ref, batch, train_steps, target_version, search_from)
    return ref, batch
