"""Network inference benchmark: the two entry points the search calls.

    python benchmarks/inference_bench.py [--threads 1] [--device cpu]

``initial_inference`` and ``recurrent_inference`` (+ support -> scalar, as
``TorchInference`` does), eval mode, no grad, for the DMC-state MLP (cartpole_swingup
preset, 125 actions) and the Atari ResNet (96x96x12, 18 actions), at the batch sizes
self-play (1, 16) and reanalyze (256, 1024) use.  Median of repeated calls; rows/s is
batch / time.
"""
import argparse
import time

import numpy as np
import torch

from ez_robot.config import load_config
from ez_robot.inference import TorchInference
from ez_robot.networks import make_network


def median_ms(fn, seconds=2.0):
    fn()
    times, start = [], time.perf_counter()
    while time.perf_counter() - start < seconds or len(times) < 5:
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1000 * float(np.median(times))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), device {args.device}")
    print("| model | batch | initial (ms) | recurrent (ms) | recurrent rows/s |")
    print("|---|---|---|---|---|")
    for label, task, obs_shape, actions in [("DMC state MLP", "cartpole_swingup", (5,), 125),
                                            ("Atari ResNet", "atari:Pong", (12, 96, 96), 18)]:
        config = load_config(task)
        net = make_network(obs_shape, actions, config.model).to(args.device).eval()
        inference = TorchInference(net, args.device)
        rng = np.random.default_rng(0)
        for batch in (1, 16, 256, 1024):
            if len(obs_shape) == 3:
                if batch > 256:
                    continue  # 1024 Atari observations are 340 MB; reanalyze chunks below that
                obs = rng.integers(0, 256, (batch, *obs_shape), dtype=np.uint8)
            else:
                obs = rng.normal(size=(batch, *obs_shape)).astype(np.float32)
            root = inference.root(obs)
            actions_in = rng.integers(0, actions, batch).astype(np.int32)
            reset = np.zeros(batch, bool)
            initial = median_ms(lambda: inference.root(obs))
            recurrent = median_ms(lambda: inference.recurrent_fn(root.hidden, actions_in, reset))
            print(f"| {label} | {batch} | {initial:.2f} | {recurrent:.2f} | {batch * 1000 / recurrent:,.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()
