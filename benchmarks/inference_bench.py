"""Network inference benchmark: the two entry points the search calls.

    python benchmarks/inference_bench.py [--threads 1] [--device cpu] [--models state classic atari walker]
                                         [--set model.state_body=residual ...]

``initial_inference`` and ``recurrent_inference`` (+ support -> scalar, as
``TorchInference`` does), eval mode, no grad, for the DMC-state MLP (cartpole_swingup
preset, 5 actions), the classic MLP (gym:CartPole-v1 preset, 2 actions), the Atari
ResNet (96x96x12, 18 actions) and, on request, walker_walk's state network (24 features,
gaussian actions over 6 joints: the recurrent call takes action vectors), at the batch
sizes self-play (1, 16) and reanalyze (256, 410: one buffer-sweep segment, 1024) use.
``--set`` applies config overrides to every model, as ``ez-robot train --set`` does
(e.g. ``model.state_body=residual`` for EfficientZero V2's residual state body, or
``train.value_prefix=false`` for the recurrent call without the LSTM).  Each also through
onnxruntime (the graphs ``ez-robot export`` writes, one intra-op thread), on CPU.  Median of repeated calls;
rows/s is batch / time.
"""
import argparse
import time

import numpy as np
import torch

from ez_robot.config import load_config
from ez_robot.errors import ConfigError
from ez_robot.torch_inference import TorchInference
from ez_robot.networks import make_network
from ez_robot.action_modes import ActionSpec


def median_ms(fn, seconds: float = 2.0):
    fn()
    times, start = [], time.perf_counter()
    while time.perf_counter() - start < seconds or len(times) < 5:
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1000 * float(np.median(times))


def onnx_inference(net):
    """The net's exported graphs on onnxruntime (what the onboard runtime loads)."""
    import tempfile
    from pathlib import Path

    import onnxruntime as ort

    from ez_robot.export.onnx_graphs import export_network
    from ez_robot.export.runtime import Networks, session_options

    with tempfile.TemporaryDirectory() as tmp:
        export_network(net, Path(tmp))
        options = session_options("latency")
        sessions = [ort.InferenceSession(str(Path(tmp) / name), options, providers=["CPUExecutionProvider"])
                    for name in ("initial.onnx", "recurrent.onnx")]
    return Networks(*sessions, net.lstm_hidden, net.action_spec)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--models", nargs="+", default=["state", "classic", "atari"],
                        choices=["state", "classic", "atari", "walker"])
    parser.add_argument("--seconds", type=float, default=2.0, help="timing per measurement")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="config override for every model (repeatable)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), device {args.device}"
          + "".join(f", --set {o}" for o in args.overrides))
    print("| model | batch | backend | initial (ms) | recurrent (ms) | recurrent rows/s |")
    print("|---|---|---|---|---|---|")
    models = {"state": ("DMC state MLP", "cartpole_swingup", (5,), 5), "classic": ("classic MLP", "gym:CartPole-v1",
              (4,), 2), "atari": ("Atari ResNet", "atari:Pong", (12, 96, 96), 18),
              "walker": ("walker_walk state (gaussian, 6 dims)", "walker_walk", (24,), ActionSpec("gaussian", dims=6))}
    for label, task, obs_shape, actions in (models[m] for m in args.models):
        try:
            config = load_config(task, overrides=args.overrides)
        except ConfigError as error:
            parser.error(str(error))
        net = make_network(obs_shape, actions, config.model, value_prefix=config.train.value_prefix)
        net = net.to(args.device).eval()
        backends = {"torch": TorchInference(net, args.device)}
        if args.device == "cpu":
            backends["onnxruntime"] = onnx_inference(net)
        rng = np.random.default_rng(0)
        for batch in (1, 16, 256, 410, 1024):
            if len(obs_shape) == 3:
                if batch > 256:
                    continue  # 1024 Atari observations are 340 MB; reanalyze chunks below that
                obs = rng.integers(0, 256, (batch, *obs_shape), dtype=np.uint8)
            else:
                obs = rng.normal(size=(batch, *obs_shape)).astype(np.float32)
            if isinstance(actions, ActionSpec):
                actions_in = rng.uniform(-1, 1, (batch, actions.dims)).astype(np.float32)
            else:
                actions_in = rng.integers(0, actions, batch).astype(np.int32)
            reset = np.zeros(batch, bool)
            for name, inference in backends.items():
                root = inference.root(obs)
                initial = median_ms(lambda: inference.root(obs), args.seconds)
                recurrent = median_ms(lambda: inference.recurrent_fn(root.hidden, actions_in, reset), args.seconds)
                print(f"| {label} | {batch} | {name} | {initial:.3f} | {recurrent:.3f} | "
                      f"{batch * 1000 / recurrent:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
