"""Reanalyze benchmark: one training step's target computation, the main cost of training.

    python benchmarks/reanalyze_bench.py [--batch 256] [--threads 1]

A batch is sampled from a synthetic replay; its context is prepared; ``reanalyze``
then searches every bootstrap observation (off-policy value correction) and 99% of the
policy observations with the target network, 50 simulations, in one batched call.
Reported: roots searched, wall time split into context / search, and roots/s, for the
DMC-state preset (cartpole_swingup) and, at a smaller batch, the Atari ResNet.
"""
import argparse
import time

import numpy as np
import torch

from _synthetic import segment
from ez_robot.config import ReplayConfig, load_config
from ez_robot.inference import TorchInference, effective_search_config
from ez_robot.networks import make_network
from ez_robot.reanalyze import reanalyze
from ez_robot.replay import ReplayBuffer
from ez_robot.targets import dynamic_horizon, prepare_context


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--atari-batch", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), device {args.device}")
    print("| model | batch | roots searched | context (ms) | search (s) | roots/s |")
    print("|---|---|---|---|---|---|")
    for label, task, frame_shape, stack, actions, dtype, batch in [
            ("DMC state MLP", "cartpole_swingup", (5,), 1, 125, np.float32, args.batch),
            ("Atari ResNet", "atari:Pong", (3, 96, 96), 4, 18, np.uint8, args.atari_batch)]:
        config = load_config(task)
        rng = np.random.default_rng(0)
        replay = ReplayBuffer(ReplayConfig(capacity=20_000, min_replay_size=1))
        for _ in range(10):
            replay.add(segment(rng, moves=400, frame_shape=frame_shape, frame_stack=stack, num_actions=actions,
                               dtype=dtype))
        obs_shape = (frame_shape[0] * stack, *frame_shape[1:])
        net = make_network(obs_shape, actions, config.model).to(args.device).eval()
        inference = TorchInference(net, args.device)
        search_config = effective_search_config(config.search, True)
        t = config.train
        for repeat in range(2):  # the first call warms up
            ref = replay.sample(batch, 0.4, rng)
            start = time.perf_counter()
            horizons = dynamic_horizon(np.zeros(batch, np.int64), 0, 120_000, t.td_steps, t.dynamic_horizon_tau)
            context = prepare_context(ref, unroll_steps=t.unroll_steps, horizons=horizons,
                                      discount=search_config.discount, lstm_horizon=search_config.lstm_horizon,
                                      num_actions=actions, rng=rng)
            middle = time.perf_counter()
            targets = reanalyze(context, ref.segments, inference, search_config, rng,
                                policy_ratio=t.reanalyze_policy_ratio, off_policy_correction=True)
            end = time.perf_counter()
        print(f"| {label} | {batch} | {targets.num_searches} | {1000 * (middle - start):.1f} | {end - middle:.2f} "
              f"| {targets.num_searches / (end - middle):,.0f} |", flush=True)


if __name__ == "__main__":
    main()
