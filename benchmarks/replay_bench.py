"""Replay sampling benchmark: prioritized sampling and context preparation.

    python benchmarks/replay_bench.py

For a full DMC-state buffer (100k moves, 5 floats each) and an Atari-sized one (100k
moves of 96x96 RGB frames, stacked 4 at sample time; 2.8 GB), batch 256: the time of
``ReplayBuffer.sample`` (priorities -> indices and IS weights), of ``gather_batch``
(the frames of the K + 1 observations, the bootstrap observations reanalyze needs,
value-prefix and k-step targets of every sample), of a priority update, and of pickling
and unpickling what the Ray replay actor returns to reanalyze (protocol 5 with
out-of-band buffers, as Ray serializes; the object store's copy of those buffers, whose
size the last column gives, is not included).  Median of 20.  Two rows per buffer: no
stored search result (batch reanalyze: every bootstrap observation is gathered), and all
of them stored and fresh (buffer reanalyze: none is).
"""
import pickle
import time

import numpy as np

from _synthetic import segment
from ray import cloudpickle

from ez_robot.batch import gather_batch
from ez_robot.config import ReplayConfig
from ez_robot.ray_storage import _Sample
from ez_robot.replay import ReplayBuffer, SearchResults
from ez_robot.targets import dynamic_horizon


def median_ms(fn, repeats=20):
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times))


def ship(sample) -> int:
    """Pickles and unpickles ``sample`` as Ray does; returns the bytes of its out-of-band
    buffers (what the object store copies)."""
    buffers = []
    data = cloudpickle.dumps(sample, protocol=5, buffer_callback=buffers.append)
    pickle.loads(data, buffers=[b.raw() for b in buffers])
    return sum(b.raw().nbytes for b in buffers)


def main():
    rng = np.random.default_rng(0)
    print("| buffer | moves | sample (ms) | gather_batch (ms) | update priorities (ms) | ship a sample (ms) "
          "| shipped (MB) |")
    print("|---|---|---|---|---|---|---|")
    for label, frame_shape, stack, actions, dtype in [("DMC state (5 floats)", (5,), 1, 125, np.float32),
                                                      ("Atari (96x96 RGB, stack 4)", (3, 96, 96), 4, 18, np.uint8)]:
        replay = ReplayBuffer(ReplayConfig(capacity=100_000, min_replay_size=1))
        while len(replay) < 100_000:
            replay.add(segment(rng, moves=400, frame_shape=frame_shape, frame_stack=stack, num_actions=actions,
                               dtype=dtype, collected_at=int(rng.integers(0, 1000))))
        ref = replay.sample(256, 0.4, rng)
        sample = median_ms(lambda: replay.sample(256, 0.4, rng))
        update = median_ms(lambda: replay.update_priorities(ref.segment_ids, ref.positions, rng.random(256)))
        horizons = dynamic_horizon(np.zeros(256, np.int64), 1000, 120_000, 5, 0.3)
        for mode, search_from in (("batch reanalyze: every bootstrap", None), ("buffer reanalyze: stored", 0)):
            if search_from is not None:  # every position searched by the current target network
                for s in {id(s): s for s in ref.segments}.values():
                    s.search = SearchResults(s.root_values.copy(), s.policies.copy(), version=0)
            settings = dict(unroll_steps=5, horizons=horizons, discount=0.988, lstm_horizon=5, num_actions=actions,
                            rng=rng, search_from=search_from)
            context = median_ms(lambda: gather_batch(ref, **settings))
            shipped = _Sample(gather_batch(ref, **settings), ref.segment_ids, ref.positions, ref.weights)
            shipping = median_ms(lambda: ship(shipped))
            print(f"| {label}, {mode} | {len(replay):,} | {sample:.2f} | {context:.2f} | {update:.2f} "
                  f"| {shipping:.2f} | {ship(shipped) / 1e6:.1f} |", flush=True)


if __name__ == "__main__":
    main()
