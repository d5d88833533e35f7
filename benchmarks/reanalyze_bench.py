"""Reanalyze benchmark: what one training step's targets cost, in both reanalyze modes.

    python benchmarks/reanalyze_bench.py [--batch 256] [--threads 1] [--inference torch onnxruntime]

batch mode (the paper): a batch is sampled from a synthetic replay; its context is
prepared; ``reanalyze`` then searches every bootstrap observation (off-policy value
correction) and 99% of the policy observations with the target network, 50
simulations, in one batched call.  Reported: roots searched, wall time split into
context / search, and roots/s, for the DMC-state preset (cartpole_swingup, 5 actions)
and, at a smaller batch, the Atari ResNet (Pong's 6 actions) and the DMC-pixels ResNet
(cartpole_swingup from 3 stacked 84x84 frames); ``--models`` picks among them.

buffer mode: the sweep's unit of work, one 410-observation segment searched by
``search_segments``, and what that makes per training step when every stored
observation is searched once per target period (200 steps) at the buffer sizes of a
100k run (cartpole_swingup: 12,500 moves, from states or pixels; Atari: 100,000), against batch mode's
per-step search (torch), with each ``--inference`` backend (``train.inference``).
"""
import argparse
import time

import numpy as np
import torch

from _synthetic import segment
from ez_robot.batch import gather_batch
from ez_robot.config import ReplayConfig, load_config, search_config
from ez_robot.inference import make_inference
from ez_robot.torch_inference import TorchInference
from ez_robot.networks import make_network
from ez_robot.reanalyze import reanalyze, search_segments
from ez_robot.replay import ReplayBuffer
from ez_robot.targets import dynamic_horizon


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--atari-batch", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--inference", nargs="+", default=["torch", "onnxruntime"],
                        choices=["torch", "onnxruntime"], help="backends for the sweep rows")
    parser.add_argument("--models", nargs="+", default=["state", "atari", "pixels"],
                        choices=["state", "atari", "pixels"])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), device {args.device}")
    print("| model | batch | roots searched | context (ms) | search (s) | roots/s |")
    print("|---|---|---|---|---|---|")
    sweeps = []
    models = {
        "state": ("DMC state MLP", "cartpole_swingup", "state", (5,), 1, 5, np.float32, args.batch, 12_500),
        "atari": ("Atari ResNet", "atari:Pong", "state", (3, 96, 96), 4, 6, np.uint8, args.atari_batch, 100_000),
        "pixels": ("DMC pixel ResNet", "cartpole_swingup", "pixels", (3, 84, 84), 3, 5, np.uint8, args.atari_batch,
                   12_500)}
    for label, task, obs, frame_shape, stack, actions, dtype, batch, buffer in (models[m] for m in args.models):
        config = load_config(task, obs=obs)
        rng = np.random.default_rng(0)
        replay = ReplayBuffer(ReplayConfig(capacity=20_000, min_replay_size=1))
        for _ in range(10):
            replay.add(segment(rng, moves=400, frame_shape=frame_shape, frame_stack=stack, num_actions=actions,
                               dtype=dtype))
        obs_shape = (frame_shape[0] * stack, *frame_shape[1:])
        net = make_network(obs_shape, actions, config.model).to(args.device).eval()
        inference = TorchInference(net, args.device)
        searched = search_config(config)
        t = config.train
        for repeat in range(2):  # the first call warms up
            ref = replay.sample(batch, 0.4, rng)
            start = time.perf_counter()
            horizons = dynamic_horizon(np.zeros(batch, np.int64), 0, 120_000, t.td_steps, t.dynamic_horizon_tau)
            context = gather_batch(ref, unroll_steps=t.unroll_steps, horizons=horizons,
                                   discount=searched.discount, lstm_horizon=searched.lstm_horizon,
                                   num_actions=actions, rng=rng)
            middle = time.perf_counter()
            targets = reanalyze(context, inference, searched, rng,
                                policy_ratio=t.reanalyze_policy_ratio)
            end = time.perf_counter()
        print(f"| {label} | {batch} | {targets.num_searches} | {1000 * (middle - start):.1f} | {end - middle:.2f} "
              f"| {targets.num_searches / (end - middle):,.0f} |", flush=True)
        per_step = buffer / t.target_update_interval
        for backend in args.inference:
            swept = make_inference(net, args.device, backend)
            search_segments(replay.segments[:1], swept, searched, rng, version=0)  # warm-up
            start = time.perf_counter()
            search_segments(replay.segments[1:3], swept, searched, rng, version=0)
            per_observation = (time.perf_counter() - start) / sum(s.num_moves + 1 for s in replay.segments[1:3])
            sweeps.append((label, backend, buffer, per_observation, per_step, targets.num_searches / batch * args.batch,
                           (end - middle) / batch * args.batch))
    print("\nbuffer mode: the sweep per training step (one search of every stored observation per target period)")
    print("| model | sweep inference | buffer (moves) | sweep (ms per observation) | sweep roots per step "
          f"| sweep s per step | batch mode roots per step (batch {args.batch}, torch) | batch mode s per step | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, backend, buffer, per_observation, per_step, batch_roots, batch_seconds in sweeps:
        print(f"| {label} | {backend} | {buffer:,} | {1000 * per_observation:.2f} | {per_step:.0f} "
              f"| {per_step * per_observation:.3f} | {batch_roots:,.0f} | {batch_seconds:.2f} "
              f"| {batch_seconds / (per_step * per_observation):.0f}x |")

if __name__ == "__main__":
    main()
