"""Buffer reanalyze (stored search results) against the paper's batch reanalyze: the same
targets when nothing is stale, fresh searches where results are too old, and both modes
through both trainers."""
import numpy as np
import pytest

from ez_robot.config import load_config
from ez_robot.reanalyze import Sweeper, reanalyze, search_segments, sweep_round
from ez_robot.replay import ReplayBuffer
from ez_robot.batch import fresh_from, gather_batch
from tests.test_core import ACTIONS, mdp_segment
from tests.toy_models import ToyInference

NO_NOISE = ["search.dirichlet_fraction=0", "search.num_simulations=8", "train.batch_size=32", "search.discount=0.9",
            "train.reanalyze_policy_ratio=0.7"]


def filled_replay(config, segments=12, seed=0):
    rng = np.random.default_rng(seed)
    replay = ReplayBuffer(config.replay)
    for _ in range(segments):
        replay.add(mdp_segment(rng))
    return replay


def targets_for(config, replay, search_from, seed=3):
    """One batch's targets: the same sample, horizons and generator for either path."""
    t, rng = config.train, np.random.default_rng(seed)
    ref = replay.sample(t.batch_size, 0.4, rng)
    horizons = rng.integers(1, t.td_steps + 1, t.batch_size)
    context = gather_batch(ref, unroll_steps=t.unroll_steps, horizons=horizons, discount=config.search.discount,
                           lstm_horizon=config.search.lstm_horizon, num_actions=ACTIONS, rng=rng,
                           search_from=search_from)
    return reanalyze(context, ToyInference(ACTIONS), config.search, rng,
                     policy_ratio=t.reanalyze_policy_ratio)


def test_stored_results_give_the_targets_a_fresh_search_gives():
    config = load_config("gym:CartPole-v1", overrides=NO_NOISE)
    replay = filled_replay(config)
    results = search_segments(replay.segments, ToyInference(ACTIONS), config.search, np.random.default_rng(9),
                              version=400)
    for segment_id, result in zip(range(len(replay.segments)), results):
        replay.store_search(segment_id, result)
    fresh = targets_for(config, replay, search_from=None)  # the paper's batch reanalyze: search everything
    stored = targets_for(config, replay, search_from=400)  # every bootstrap and policy from the stored results
    assert fresh.num_searches > 100 and stored.num_searches == 0
    np.testing.assert_array_equal(stored.value, fresh.value)
    np.testing.assert_array_equal(stored.policy, fresh.policy)
    np.testing.assert_array_equal(stored.searched_policy, fresh.searched_policy)


def test_a_context_holds_the_bootstrap_observations_reanalyze_may_need_and_no_others():
    # what a Ray replay ships to reanalyze instead of the sampled segments: the bootstraps
    # without a fresh stored value, and those the network predicts (fresh or not)
    config = load_config("gym:CartPole-v1", overrides=NO_NOISE)
    replay, t = filled_replay(config), config.train
    results = search_segments(replay.segments, ToyInference(ACTIONS), config.search, np.random.default_rng(9),
                              version=400)
    for segment_id, result in enumerate(results):
        if segment_id % 2:
            replay.store_search(segment_id, result)
    rng = np.random.default_rng(3)
    ref = replay.sample(t.batch_size, 0.4, rng)
    by_network = np.arange(t.batch_size) % 3 == 0
    context = gather_batch(ref, unroll_steps=t.unroll_steps, horizons=rng.integers(1, t.td_steps + 1, t.batch_size),
                           discount=config.search.discount, lstm_horizon=config.search.lstm_horizon,
                           num_actions=ACTIONS, rng=rng, search_from=400, network_bootstrap=by_network)
    bootstrap = context.bootstrap_index >= 0
    held = context.bootstraps_to_compute()
    np.testing.assert_array_equal(held, bootstrap & (~context.value_fresh | by_network[:, None]))
    assert 0 < held.sum() < bootstrap.sum() and (held & context.value_fresh).any()
    expected = [ref.segments[b].observation(context.bootstrap_index[b, u]) for b, u in zip(*np.nonzero(held))]
    np.testing.assert_array_equal(context.bootstrap_observations, np.stack(expected))
    some = held & (np.arange(t.unroll_steps + 1) % 2 == 0)
    np.testing.assert_array_equal(context.bootstrap_observations_of(some),
                                  [ref.segments[b].observation(context.bootstrap_index[b, u])
                                   for b, u in zip(*np.nonzero(some))])
    with pytest.raises(ValueError, match="does not hold"):
        context.bootstrap_observations_of(bootstrap)


def test_a_zero_horizon_target_is_the_search_value_of_the_position_itself():
    # EfficientZero V2's search value target (train.value_target=mixed, old data): z_{t+u} is
    # the root value of the target network's search from o_{t+u}, stored or fresh alike
    config = load_config("gym:CartPole-v1", overrides=NO_NOISE)
    replay = filled_replay(config)
    results = search_segments(replay.segments, ToyInference(ACTIONS), config.search, np.random.default_rng(9),
                              version=400)
    for segment_id, result in enumerate(results):
        replay.store_search(segment_id, result)
    t, rng = config.train, np.random.default_rng(3)
    ref = replay.sample(t.batch_size, 0.4, rng)
    context = gather_batch(ref, unroll_steps=t.unroll_steps, horizons=np.zeros(t.batch_size, np.int64),
                           discount=config.search.discount, lstm_horizon=config.search.lstm_horizon,
                           num_actions=ACTIONS, rng=rng, search_from=400)
    targets = reanalyze(context, ToyInference(ACTIONS), config.search, rng,
                        policy_ratio=t.reanalyze_policy_ratio)
    expected = np.zeros_like(targets.value)
    for b, (segment_id, t0) in enumerate(zip(ref.segment_ids, ref.positions)):
        for u in range(t.unroll_steps + 1):
            if context.bootstrap_index[b, u] >= 0:
                expected[b, u] = results[segment_id].values[t0 + u]
    assert (context.bootstrap_index >= 0).sum() > 100 and targets.num_searches == 0
    np.testing.assert_allclose(targets.value, expected, rtol=1e-6)


def test_batch_reanalyze_searches_a_zero_horizon_cell_once_for_its_value_and_policy():
    # l = 0 (train.value_target=mixed): the bootstrap of z_{t+u} is o_{t+u}, also a policy
    # root; one search gives both targets, the same as two separate searches (no root noise)
    config = load_config("gym:CartPole-v1", overrides=NO_NOISE)
    replay, t = filled_replay(config), config.train
    ref = replay.sample(t.batch_size, 0.4, np.random.default_rng(3))
    context = gather_batch(ref, unroll_steps=t.unroll_steps, horizons=np.zeros(t.batch_size, np.int64),
                           discount=config.search.discount, lstm_horizon=config.search.lstm_horizon,
                           num_actions=ACTIONS, rng=np.random.default_rng(4))
    once = reanalyze(context, ToyInference(ACTIONS), config.search, np.random.default_rng(5),
                     policy_ratio=t.reanalyze_policy_ratio)
    context.bootstrap_self = None  # every bootstrap searched on its own, as before
    twice = reanalyze(context, ToyInference(ACTIONS), config.search, np.random.default_rng(5),
                      policy_ratio=t.reanalyze_policy_ratio)
    bootstraps, policy_cells = (context.bootstrap_index >= 0).sum(), \
        (context.mask_policy.astype(bool) & once.searched_policy[:, None]).sum()
    shared = ((context.bootstrap_index >= 0) & context.mask_policy.astype(bool) & once.searched_policy[:, None]).sum()
    assert shared > 50 and twice.num_searches == bootstraps + policy_cells
    assert once.num_searches == bootstraps + policy_cells - shared
    np.testing.assert_allclose(once.value, twice.value, rtol=1e-6)
    np.testing.assert_array_equal(once.policy, twice.policy)


def test_results_older_than_the_bound_are_searched_again():
    config = load_config("gym:CartPole-v1", overrides=NO_NOISE + ["reanalyze.staleness=2",
                                                                 "train.target_update_interval=100"])
    replay = filled_replay(config)
    (result,) = search_segments(replay.segments[:1], ToyInference(ACTIONS), config.search,
                                np.random.default_rng(0), version=300)
    for segment_id in range(len(replay.segments)):
        replay.store_search(segment_id, result)  # (the same episode: every segment's moves are alike)
    assert fresh_from(config, target_version=500, swept_round=300) == 300  # two updates behind: still used
    assert targets_for(config, replay, fresh_from(config, 500, 300)).num_searches == 0
    assert fresh_from(config, target_version=600, swept_round=300) == 400  # three behind: searched again
    assert targets_for(config, replay, fresh_from(config, 600, 300)).num_searches > 100
    assert fresh_from(load_config("gym:CartPole-v1", overrides=["reanalyze.mode=batch"]), 600, 300) is None
    current = load_config("gym:CartPole-v1", overrides=["reanalyze.staleness=0", "train.target_update_interval=100"])
    assert fresh_from(current, target_version=300, swept_round=300) == 300  # the current target's, once swept
    assert fresh_from(current, target_version=400, swept_round=300) == 300  # its sweep runs: the previous one's


def test_the_sweep_searches_new_data_first_and_each_segment_once_per_target():
    config = load_config("gym:CartPole-v1", overrides=NO_NOISE + ["train.target_update_interval=10",
                                                                 "reanalyze.staleness=1"])
    replay = filled_replay(config, segments=4)
    sweeper = Sweeper(config, ToyInference(ACTIONS), config.search, np.random.default_rng(0))
    per_segment = replay.segments[0].num_moves + 1
    searched = [sweeper.step(replay, target_version=10, train_steps=10) for _ in range(10)]  # one target period
    assert sum(searched) == 4 * per_segment  # every segment once, paced over the period
    assert max(searched) == per_segment and all(s.search.version == 10 for s in replay.segments)
    assert sweeper.step(replay, target_version=10, train_steps=10) == 0  # nothing older than the current target
    rng = np.random.default_rng(5)
    replay.add(mdp_segment(rng))  # new data is searched before anything is searched again
    assert sweeper.step(replay, target_version=20, train_steps=20) == per_segment
    assert replay.segments[-1].search.version == 20 and replay.segments[0].search.version == 10


def test_with_staleness_0_the_sweep_completes_at_once_and_says_so():
    config = load_config("gym:CartPole-v1", overrides=NO_NOISE + ["train.target_update_interval=10"])
    replay = filled_replay(config, segments=4)
    sweeper = Sweeper(config, ToyInference(ACTIONS), config.search, np.random.default_rng(0))
    assert sweeper.step(replay, target_version=10, train_steps=10) == 4 * (replay.segments[0].num_moves + 1)
    assert sweeper.step(replay, target_version=10, train_steps=10) == 0 and replay.swept_round == 10
    assert fresh_from(config, 10, replay.swept_round) == 10  # batches read the current target's results


def test_a_step_count_seen_before_its_target_network_keeps_the_old_targets_round():
    """On Ray a sweeping worker can read the learner's step count of a new target period
    before that period's target network reaches the storage, and searches with the old
    one.  Those results belong to the old target's round: marked as the new round, they
    completed it, batches refused them (older than the new target) and the learner searched
    them again for a whole period (seen on a GPU pixel run: half of every batch's roots)."""
    config = load_config("gym:CartPole-v1", overrides=NO_NOISE + ["train.target_update_interval=200"])
    assert [sweep_round(config, 0, steps) for steps in (0, 199, 200, 450)] == [0, 0, 0, 0]
    assert sweep_round(config, 200, 200) == 200
    four = load_config("gym:CartPole-v1", overrides=["train.target_update_interval=200",
                                                      "reanalyze.sweeps_per_target=4"])
    assert [sweep_round(four, 0, steps) for steps in (0, 49, 50, 199, 200, 260)] == [0, 0, 50, 150, 150, 150]
    replay = filled_replay(config, segments=3)
    sweeper = Sweeper(config, ToyInference(ACTIONS), config.search, np.random.default_rng(0))
    sweeper.step(replay, target_version=0, train_steps=200)  # the new step count, the old target
    assert replay.swept_round == 0 and all(s.search.version == 0 for s in replay.segments)
    assert fresh_from(config, 200, replay.swept_round) == 0  # the new round runs: the old results serve
    assert targets_for(config, replay, fresh_from(config, 200, replay.swept_round)).num_searches == 0
    per_segment = replay.segments[0].num_moves + 1
    assert sweeper.step(replay, target_version=200, train_steps=200) == 3 * per_segment  # then the new round
    assert replay.swept_round == 200 and fresh_from(config, 200, replay.swept_round) == 200


def test_sweepers_side_by_side_share_the_segments_and_the_round_completes_when_all_are_stored():
    """Ray's reanalyze workers sweep one replay: each takes a segment nobody is searching,
    and the round counts as complete only when every segment holds its results."""
    config = load_config("gym:CartPole-v1", overrides=NO_NOISE)
    replay = filled_replay(config, segments=2)
    first = replay.next_to_search(10)
    second = replay.next_to_search(10, skip={first[0]})
    assert {first[0], second[0]} == {0, 1} and replay.next_to_search(10, skip={0, 1}) is None
    assert replay.swept_round == -1  # both still being searched
    for segment_id, segment in (first, second):
        (results,) = search_segments([segment], ToyInference(ACTIONS), config.search, np.random.default_rng(0),
                                     version=10, round=10)
        replay.store_search(segment_id, results)
    assert replay.next_to_search(10, skip={}) is None and replay.swept_round == 10


def test_a_resumed_replay_searches_again_and_gives_the_targets_a_fresh_search_gives(tmp_path):
    """Checkpoints keep the segments, not their search results (which change every target
    period): a resumed buffer has none, so its first batches search everything, as batch
    mode does, and the sweep makes them again with the resumed target network."""
    from ez_robot.checkpoint import ReplayFiles

    config = load_config("gym:CartPole-v1", overrides=NO_NOISE + ["train.target_update_interval=10"])
    replay = filled_replay(config, segments=4)
    Sweeper(config, ToyInference(ACTIONS), config.search, np.random.default_rng(0)).step(replay, 10, 10)
    assert replay.swept_round == 10 and all(s.search is not None for s in replay.segments)
    files = ReplayFiles(tmp_path)
    resumed = ReplayFiles(tmp_path).load(config.replay, files.save(replay))
    assert resumed.swept_round == -1 and all(s.search is None for s in resumed.segments)
    since = fresh_from(config, 10, resumed.swept_round)
    after_resume = targets_for(config, resumed, search_from=since)
    fresh = targets_for(config, replay, search_from=None)
    assert after_resume.num_stored == 0 and after_resume.num_searches == fresh.num_searches
    np.testing.assert_array_equal(after_resume.value, fresh.value)
    np.testing.assert_array_equal(after_resume.policy, fresh.policy)
    sweeper = Sweeper(config, ToyInference(ACTIONS), config.search, np.random.default_rng(0))
    assert sweeper.step(resumed, 10, 10) == resumed.observations_stored() and resumed.swept_round == 10


def test_more_sweep_rounds_per_target_search_each_observation_again_within_its_period():
    config = load_config("gym:CartPole-v1", overrides=NO_NOISE + ["train.target_update_interval=100",
                                                                 "reanalyze.sweeps_per_target=4"])
    replay = filled_replay(config, segments=3)
    sweeper = Sweeper(config, ToyInference(ACTIONS), config.search, np.random.default_rng(0))
    stored = replay.observations_stored()
    searched = [sweeper.step(replay, target_version=100, train_steps=step) for step in range(100, 200)]
    assert [step for step, n in zip(range(100, 200), searched) if n] == [100, 125, 150, 175]
    assert all(n in (0, stored) for n in searched) and replay.swept_round == 175
    assert fresh_from(config, 100, replay.swept_round) == 100


@pytest.mark.parametrize("mode,value_target", [("batch", "dynamic"), ("buffer", "dynamic"), ("buffer", "mixed")])
def test_both_modes_train_in_one_process(tmp_path, mode, value_target):
    from ez_robot.trainer import train

    config = load_config("gym:CartPole-v1", budget="240", overrides=[
        "replay.min_replay_size=60", "train.batch_size=8", "search.num_simulations=4",
        "train.train_steps_per_agent_step=0.5", "train.eval_episodes=2", "train.target_update_interval=20",
        f"reanalyze.mode={mode}", f"train.value_target={value_target}", "train.mixed_start=0.25"])
    summary = train(config, tmp_path, device="cpu", progress=False)
    assert (summary["agent_steps"], summary["train_steps"]) == (240, 120)
    assert ("reanalyze.sweep" in summary["seconds"]) == (mode == "buffer")
