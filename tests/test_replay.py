"""Replay sampling, priorities, IS weights and the value / value-prefix targets."""
import dataclasses

import numpy as np
import pytest

from ez_robot.config import ConfigError, ReplayConfig, load_config
from ez_robot.action_modes import ActionSpec
from ez_robot.replay import ReplayBuffer, SampleRef, SearchResults, Segment
from ez_robot.batch import Batch, gather_batch
from ez_robot.targets import dynamic_horizon, network_bootstraps, value_horizons
from tests.reference_targets import loop_context

A = 3


def segment(moves, *, own=None, rewards=None, values=None, end=False, terminated=False, stack=1, collected=0):
    rewards = np.arange(1, moves + 1, dtype=np.float32) if rewards is None else np.asarray(rewards, np.float32)
    values = np.full(moves + 1, 10.0, np.float32) if values is None else np.asarray(values, np.float32)
    own = moves if own is None else own
    frame_shape = (1, 2) if stack > 1 else (2,)  # pixel-like frames stack on their channel axis
    frames = np.arange(stack + moves, dtype=np.float32).reshape((-1,) + (1,) * len(frame_shape)) * np.ones(
        frame_shape, np.float32)
    policies = np.tile(np.array([0.2, 0.3, 0.5], np.float32), (moves, 1))
    return Segment(frames=frames, actions=np.arange(moves) % A, rewards=rewards, root_values=values,
                   policies=policies, collected_at=np.full(own, collected), num_own=own, frame_stack=stack,
                   episode_end=end, terminated=terminated)


def ref_for(seg, positions):
    from ez_robot.replay import SampleRef

    n = len(positions)
    return SampleRef([seg] * n, np.zeros(n, np.int64), np.asarray(positions, np.int64), np.ones(n, np.float32))


def context(seg, positions, horizons, K=2, discount=0.5, lstm_horizon=5):
    return gather_batch(ref_for(seg, positions), unroll_steps=K, horizons=np.asarray(horizons), discount=discount,
                        lstm_horizon=lstm_horizon, num_actions=A, rng=np.random.default_rng(0))


def test_dynamic_horizon_fresh_and_stale():
    # k = 5, tau = 0.3, T_total = 1000: every 300 steps of age costs one step of horizon
    collected = np.array([1000, 900, 700, 400, 0, 2000])
    np.testing.assert_array_equal(dynamic_horizon(collected, 1000, 1000, 5, 0.3), [5, 5, 4, 3, 2, 5])
    assert dynamic_horizon(np.array([0]), 10**6, 1000, 5, 0.3)[0] == 1


def test_mixed_value_target_horizons_by_hand():
    # k = 5, tau = 0.3, T_total = 1000; mixed (EfficientZero V2): every target the k-step one
    # with the network's value before step 400, then data older than 400 steps gets l = 0
    # (the search value of the position) and the recent rest the k-step target
    def horizons(value_target, step, collected, *more, of=value_horizons):
        train = load_config("gym:CartPole-v1", overrides=[
            "train.td_steps=5", "train.dynamic_horizon_tau=0.3", f"train.value_target={value_target}",
            "train.mixed_start=0.4", "train.mixed_window=0.4", *more]).train
        return of(np.array(collected), step, 1000, train)

    collected = [1000, 700, 601, 599, 0]
    np.testing.assert_array_equal(horizons("dynamic", 1000, collected), [5, 4, 4, 4, 2])
    np.testing.assert_array_equal(horizons("dynamic", 1000, collected, of=network_bootstraps), [False] * 5)
    np.testing.assert_array_equal(horizons("mixed", 1000, collected), [5, 5, 5, 0, 0])
    np.testing.assert_array_equal(horizons("mixed", 1000, collected, of=network_bootstraps),
                                  [True, True, True, False, False])
    np.testing.assert_array_equal(horizons("mixed", 399, [399, 0]), [5, 5])
    np.testing.assert_array_equal(horizons("mixed", 399, [399, 0], of=network_bootstraps), [True, True])
    np.testing.assert_array_equal(horizons("mixed", 400, [399, 1, 0]), [5, 5, 0])
    np.testing.assert_array_equal(horizons("dynamic", 1000, collected, "train.off_policy_correction=false"), [5] * 5)
    np.testing.assert_array_equal(horizons("dynamic", 1000, collected, "train.off_policy_correction=false",
                                           of=network_bootstraps), [True] * 5)
    with pytest.raises(ConfigError, match="off_policy_correction"):
        horizons("mixed", 1000, collected, "train.off_policy_correction=false")
    with pytest.raises(ConfigError, match="value_target"):
        horizons("sarsa", 1000, collected)


def test_a_zero_horizon_bootstraps_from_the_position_itself():
    seg = segment(12, own=2, values=np.arange(13, dtype=np.float32))
    ctx = context(seg, [0], [0])  # z_u = nu_u: no reward part, discount 1
    np.testing.assert_allclose(ctx.value_partial[0], [0, 0, 0])
    np.testing.assert_array_equal(ctx.bootstrap_index[0], [0, 1, 2])
    np.testing.assert_allclose(ctx.bootstrap_discount[0], [1, 1, 1])
    np.testing.assert_allclose(ctx.stored_bootstrap_values[0], [0, 1, 2])
    ended = context(segment(4, end=True, terminated=True), [2], [0], K=3)
    np.testing.assert_array_equal(ended.bootstrap_index[0], [2, 3, -1, -1])  # the terminal observation: z = 0
    np.testing.assert_array_equal(ended.mask_value[0], [1, 1, 1, 1])
    truncated = context(segment(4, end=True, values=[10, 10, 10, 10, 7]), [2], [0], K=3)
    np.testing.assert_array_equal(truncated.bootstrap_index[0], [2, 3, 4, -1])
    np.testing.assert_allclose(truncated.stored_bootstrap_values[0], [10, 10, 7, 0])
    np.testing.assert_array_equal(truncated.mask_value[0], [1, 1, 1, 0])


def test_value_targets_mid_episode_by_hand():
    seg = segment(12, own=2)  # rewards 1..12, stored values 10
    ctx = context(seg, [0], [3])
    # z_0 = 1 + .5*2 + .25*3 + .125*nu_3 ; z_1 = 2 + .5*3 + .25*4 + .125*nu_4
    np.testing.assert_allclose(ctx.value_partial[0], [2.75, 4.5, 6.25])
    np.testing.assert_allclose(ctx.bootstrap_discount[0], [0.125] * 3)
    np.testing.assert_array_equal(ctx.bootstrap_index[0], [3, 4, 5])
    np.testing.assert_array_equal(ctx.mask_value[0], [1, 1, 1])
    np.testing.assert_allclose(ctx.value_prefix_targets[0], [1, 1 + 2])  # undiscounted sums
    np.testing.assert_array_equal(ctx.actions[0], [0, 1])


def test_terminal_no_bootstrap_and_absorbing():
    seg = segment(4, end=True, terminated=True)  # moves 0..3, obs 4 is terminal
    ctx = context(seg, [2], [3], K=3)
    # u=0: pos 2, horizon clipped to 2: 3 + .5*4, no bootstrap (terminal)
    # u=1: pos 3: 4, no bootstrap; u=2: pos 4 = terminal obs: z = 0; u=3: pos 5 past the end: absorbing 0
    np.testing.assert_allclose(ctx.value_partial[0], [5.0, 4.0, 0.0, 0.0])
    np.testing.assert_array_equal(ctx.bootstrap_index[0], [-1, -1, -1, -1])
    np.testing.assert_array_equal(ctx.mask_value[0], [1, 1, 1, 1])
    np.testing.assert_array_equal(ctx.mask_policy[0], [1, 1, 0, 0])
    np.testing.assert_allclose(ctx.value_prefix_targets[0], [3, 7, 7])  # no reward after the end
    np.testing.assert_array_equal(ctx.mask_value_prefix[0], [1, 1, 1])
    np.testing.assert_array_equal(ctx.mask_consistency[0], [1, 1, 0])


def test_truncation_bootstraps_and_masks_what_is_unknown():
    seg = segment(4, end=True, terminated=False, values=[10, 10, 10, 10, 7])
    ctx = context(seg, [2], [3], K=3)
    # u=0: 3 + .5*4 + .25*nu(obs 4); u=1: 4 + .5*nu(obs 4); u=2: z = nu(obs 4); u=3: unknown
    np.testing.assert_allclose(ctx.value_partial[0], [5.0, 4.0, 0.0, 0.0])
    np.testing.assert_array_equal(ctx.bootstrap_index[0], [4, 4, 4, -1])
    np.testing.assert_allclose(ctx.bootstrap_discount[0], [0.25, 0.5, 1.0, 0.0])
    np.testing.assert_allclose(ctx.stored_bootstrap_values[0], [7, 7, 7, 0])
    np.testing.assert_array_equal(ctx.mask_value[0], [1, 1, 1, 0])
    np.testing.assert_array_equal(ctx.mask_value_prefix[0], [1, 1, 0])


def test_value_prefix_resets_every_lstm_horizon():
    seg = segment(10, own=1)
    ctx = context(seg, [0], [1], K=5, lstm_horizon=2)
    np.testing.assert_allclose(ctx.value_prefix_targets[0], [1, 3, 3, 7, 5])


def test_frame_stacking_from_single_frames():
    seg = segment(5, stack=4)
    obs = seg.observation(2)  # frames 2..5 stacked on axis 0
    np.testing.assert_array_equal(obs[:, 0], [2, 3, 4, 5])
    ctx = context(seg, [1], [1], K=2)
    assert ctx.observations.shape == (1, 3, 4, 2)
    np.testing.assert_array_equal(ctx.observations[0, 2], seg.observation(3))


def random_segment(rng, *, stack: int, spec: ActionSpec) -> Segment:
    """Episodes that end (terminated or truncated) or go on, of 1 to 30 moves, some with a
    stored search of version 0, 100 or 200."""
    moves = int(rng.integers(1, 31))
    own, end = int(rng.integers(1, moves + 1)), bool(rng.random() < 0.5)
    frame_shape = (2, 3) if stack > 1 else (4,)
    if spec.sampled:
        actions = rng.uniform(-1, 1, (moves, spec.dims)).astype(np.float32)
        candidates = lambda: rng.uniform(-1, 1, (moves, 4, spec.dims)).astype(np.float32)  # noqa: E731
        width = 4
    else:
        actions, candidates, width = rng.integers(spec.num_actions, size=moves), lambda: None, spec.num_actions
    segment = Segment(frames=rng.normal(size=(stack + moves,) + frame_shape).astype(np.float32), actions=actions,
                      rewards=rng.normal(size=moves).astype(np.float32),
                      root_values=rng.normal(size=moves + 1).astype(np.float32),
                      policies=rng.dirichlet(np.ones(width), moves).astype(np.float32),
                      collected_at=np.zeros(own, np.int64), num_own=own, frame_stack=stack, episode_end=end,
                      terminated=end and bool(rng.random() < 0.5), candidates=candidates())
    if rng.random() < 0.7:
        segment.search = SearchResults(values=rng.normal(size=moves + 1).astype(np.float32),
                                       policies=rng.dirichlet(np.ones(width), moves).astype(np.float32),
                                       version=100 * int(rng.integers(0, 3)), candidates=candidates())
    return segment


@pytest.mark.parametrize("stack", [1, 3])
@pytest.mark.parametrize("mode", ["joint", "gaussian"])
def test_the_batched_targets_are_the_cell_by_cell_definition(stack, mode):
    # gather_batch computes a batch's targets on whole [B, K + 1] arrays; the reference
    # walks each sample and unroll step as the definitions read.  Every case at once: episode
    # ends inside the unroll and the tail (terminated: absorbing; truncated: masked), l = 0..5,
    # stale and fresh stored searches, the network's bootstraps, LSTM restarts inside the unroll
    rng = np.random.default_rng(stack + (mode == "gaussian") * 10)
    spec = ActionSpec(mode, num_actions=A) if mode == "joint" else ActionSpec(mode, dims=2)
    segments = [random_segment(rng, stack=stack, spec=spec) for _ in range(60)]
    picks = rng.integers(len(segments), size=256)
    ref = SampleRef([segments[i] for i in picks], picks.astype(np.int64),
                    np.array([rng.integers(segments[i].num_own) for i in picks], np.int64), np.ones(256, np.float32))
    for lstm_horizon in (5, 2):
        settings = dict(unroll_steps=5, horizons=rng.integers(0, 6, 256), discount=0.97, lstm_horizon=lstm_horizon,
                        num_actions=spec, search_from=100, network_bootstrap=rng.random(256) < 0.3)
        got = gather_batch(ref, rng=np.random.default_rng(1), **settings)
        want = loop_context(ref, rng=np.random.default_rng(1), **settings)
        for field in dataclasses.fields(Batch):
            if field.name != "bootstrap_observations":
                a, b = getattr(got, field.name), getattr(want, field.name)
                if b is None:
                    assert a is None, field.name
                elif field.name in ("value_prefix_targets", "value_partial"):  # sums in another order
                    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=field.name)
                else:
                    np.testing.assert_array_equal(a, b, err_msg=field.name)
        for b, (segment, t) in enumerate(zip(ref.segments, ref.positions)):  # the stacked view, within the data
            for u in range(min(6, segment.num_moves + 1 - t)):
                np.testing.assert_array_equal(got.observations[b, u], segment.observation(t + u))
        boots = want.bootstrap_index >= 0
        assert (want.mask_value == 0).any() and ((want.mask_value == 1) & ~boots).any()  # truncated; absorbing
        assert (want.value_fresh & boots).any() and (~want.value_fresh & boots).any()
        assert (want.mask_policy == 0).any() and want.bootstrap_self.any()


def test_sampling_probabilities_and_weights():
    buf = ReplayBuffer(ReplayConfig(capacity=1000, min_replay_size=4, priority_alpha=0.5))
    sid = buf.add(segment(4))
    buf.update_priorities(np.array([sid] * 4), np.arange(4), np.array([1.0, 4.0, 9.0, 16.0]))
    np.testing.assert_allclose(buf.probabilities(), np.array([1, 2, 3, 4]) / 10)
    rng = np.random.default_rng(0)
    counts = np.zeros(4)
    for _ in range(200):
        ref = buf.sample(64, beta=1.0, rng=rng)
        np.add.at(counts, ref.positions, 1)
        # w_i = (N P(i))^-beta / max: at beta = 1 proportional to 1 / P(i)
        expected = (1 / buf.probabilities()[ref.positions]) / (1 / buf.probabilities()[ref.positions]).max()
        np.testing.assert_allclose(ref.weights, expected, rtol=1e-5)
    np.testing.assert_allclose(counts / counts.sum(), [0.1, 0.2, 0.3, 0.4], atol=0.01)


def test_new_data_enters_at_max_priority_and_eviction():
    buf = ReplayBuffer(ReplayConfig(capacity=10, min_replay_size=5))
    first = buf.add(segment(4))
    assert not buf.ready()
    buf.update_priorities(np.array([first]), np.array([0]), np.array([5.0]))
    second = buf.add(segment(3))
    assert buf.ready() and len(buf) == 7
    assert buf._priorities[1].tolist() == [5.0, 5.0, 5.0]
    buf.add(segment(6))  # 13 moves > capacity: the oldest segment goes
    assert len(buf) == 9 and buf.segments[0] is not None
    buf.update_priorities(np.array([first]), np.array([0]), np.array([1.0]))  # evicted id: ignored
    ref = buf.sample(8, 0.4, np.random.default_rng(0))
    assert set(ref.segment_ids.tolist()) <= {second, second + 1}


def test_bad_segments_are_rejected():
    with pytest.raises(ValueError, match="rewards has length 2, expected 3"):
        Segment(frames=np.zeros((4, 1)), actions=np.zeros(3), rewards=np.zeros(2), root_values=np.zeros(4),
                policies=np.zeros((3, A)), collected_at=np.zeros(3), num_own=3)


def test_min_weight_clips_the_importance_weights_from_below():
    config = ReplayConfig(capacity=1000, min_replay_size=4, priority_alpha=1.0)
    clipped = ReplayBuffer(dataclasses.replace(config, min_weight=0.3))
    plain = ReplayBuffer(config)
    for buf in (clipped, plain):
        sid = buf.add(segment(4))
        buf.update_priorities(np.array([sid] * 4), np.arange(4), np.array([1.0, 2.0, 4.0, 40.0]))
    a = clipped.sample(256, beta=1.0, rng=np.random.default_rng(3))
    b = plain.sample(256, beta=1.0, rng=np.random.default_rng(3))
    np.testing.assert_array_equal(a.positions, b.positions)  # the same moves, only the weights differ
    assert b.weights.min() < 0.3 and a.weights.min() == np.float32(0.3)
    np.testing.assert_array_equal(a.weights, np.maximum(b.weights, np.float32(0.3)))
    with pytest.raises(ConfigError, match="min_weight"):
        ReplayConfig(min_weight=1.5)
