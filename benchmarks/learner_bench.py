"""Learner benchmark: one SGD step (EfficientZero's loss, backward, optimizer), the cost
that is left per training step once reanalyze reads stored search results.

    python benchmarks/learner_bench.py [--threads 1 2] [--steps 30] [--profile]
                                       [--device cuda] [--batch 256] [--precision fp32 tf32 bf16]

A synthetic batch (context from a synthetic replay, value and policy targets from it,
no search) for the DMC-state preset (cartpole_swingup: batch 256, 5 actions), the
classic preset (gym:CartPole-v1: batch 64, 2 actions), the DMC-pixels preset
(``cartpole_swingup:pixels``: the ResNet on 3 stacked 84x84 RGB frames, the paper's batch of
256, 5 actions), at batch 16, the Atari ResNet (Pong: 6 actions), and ``cheetah_run:ezv2``:
the Gaussian mode (6 dimensions, 16 candidates per target) with ``--config ezv2_states``
(EfficientZero V2's residual body, no value prefix, Adam), the walker/cheetah command.
Median step time per torch thread count; ``--profile`` adds the operators that take the
most time (torch.profiler, first thread count).  ``--device cuda`` times the step on a GPU
(synchronized; the batch starts on the host, as in a run), ``--batch`` overrides every
preset's batch (Atari's 16 is for CPU), and ``--precision`` adds a row per precision:
``fp32`` (torch's default: on a GPU, TensorFloat-32 convolutions and fp32 matmuls), ``tf32``
(TensorFloat-32 matmuls too) or ``bf16`` (the step under ``torch.autocast`` to bfloat16).
Neither switch is one the learner sets: on an H200 neither paid (benchmarks/README.md).
``--compile [MODE ...]`` adds a row per ``train.compile`` mode (default: ``default``).
``--set KEY=VALUE`` applies config overrides to every preset, as ``ez-robot train --set`` does
(``--set train.model_gradient_coef=1`` times the Gaussian mode's model-gradient actor term).
``--checkpoint RUN`` adds a row ``trained``: the step with RUN's learner (its trained weights
and optimizer state) instead of fresh ones; give RUN's task (``cheetah_run`` is the default
command's cheetah) and its ``--set`` overrides.
"""
import argparse
import dataclasses
import time

import numpy as np
import torch

from _synthetic import segment
from ez_robot.batch import gather_batch
from ez_robot.checkpoint import read_checkpoint
from ez_robot.config import ReplayConfig, load_config, recipe_overrides
from ez_robot.errors import RunError
from ez_robot.learner import Learner
from ez_robot.networks import make_network
from ez_robot.action_modes import ActionSpec
from ez_robot.replay import ReplayBuffer
from ez_robot.targets import Targets


def synthetic_replay(config, frame_shape, stack, actions, dtype, rng):
    """``actions``: A (joint mode) or an ActionSpec (the sampled modes)."""
    sampled = (config.search.num_candidates, actions.dims) if isinstance(actions, ActionSpec) else None
    replay = ReplayBuffer(ReplayConfig(capacity=20_000, min_replay_size=1))
    for _ in range(4):
        replay.add(segment(rng, moves=400, frame_shape=frame_shape, frame_stack=stack, num_actions=actions,
                           dtype=dtype, sampled=sampled))
    return replay


def batch_for(config, replay, actions, batch, rng):
    t = config.train
    ref = replay.sample(batch, 0.4, rng)
    context = gather_batch(ref, unroll_steps=t.unroll_steps, horizons=np.full(batch, t.td_steps),
                           discount=config.search.discount, lstm_horizon=config.search.lstm_horizon,
                           num_actions=actions, rng=rng)
    value = context.value_partial + context.bootstrap_discount * context.stored_bootstrap_values
    targets = Targets(value=value.astype(np.float32), policy=context.stored_policies,
                      searched_policy=np.ones(batch, bool), num_searches=0, candidates=context.stored_candidates)
    return context, targets, ref.weights


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--tasks", nargs="+",
                        default=["cartpole_swingup", "gym:CartPole-v1", "atari:Pong", "cartpole_swingup:pixels",
                                 "cheetah_run:ezv2"])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--batch", type=int, default=None, help="batch for every preset (default: the preset's)")
    parser.add_argument("--compile", nargs="*", default=None, choices=["default", "reduce-overhead"],
                        help="also time the step with train.compile=MODE (torch.compile of the step's network calls)")
    parser.add_argument("--precision", nargs="+", default=["fp32"], choices=["fp32", "tf32", "bf16"])
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override for every preset (repeatable)")
    parser.add_argument("--checkpoint", default=None, metavar="RUN",
                        help="also time the step with RUN's trained learner (weights and optimizer state)")
    args = parser.parse_args()
    trained = read_checkpoint(args.checkpoint)["learner"] if args.checkpoint else None
    cases = {"cartpole_swingup": ((5,), 1, 5, np.float32, None), "gym:CartPole-v1": ((4,), 1, 2, np.float32, None),
             "atari:Pong": ((3, 96, 96), 4, 6, np.uint8, 16),
             "cartpole_swingup:pixels": ((3, 84, 84), 3, 5, np.uint8, None),
             "cheetah_run": ((17,), 1, ActionSpec("gaussian", dims=6), np.float32, None),
             "cheetah_run:ezv2": ((17,), 1, ActionSpec("gaussian", dims=6), np.float32, None)}
    device = torch.device(args.device)
    print(f"torch {torch.__version__}; {device}"
          + (f" ({torch.cuda.get_device_name()})" if device.type == "cuda" else "") + f"; median of {args.steps} steps")
    print("| preset | batch | precision | host batch (ms) | "
          + " | ".join(f"{n} thread(s) (ms)" for n in args.threads) + " |")
    print("|---|---|---|---|" + "---|" * len(args.threads))
    profiles = []
    for task in args.tasks:
        frame_shape, stack, actions, dtype, batch = cases[task]
        if task.endswith(":pixels"):
            config = load_config(task.removesuffix(":pixels"), obs="pixels", overrides=args.overrides)
        elif task.endswith(":ezv2"):
            config = load_config(task.removesuffix(":ezv2"),
                                 overrides=recipe_overrides("ezv2_states") + args.overrides)
        else:
            config = load_config(task, overrides=args.overrides)
        batch = args.batch or batch or config.train.batch_size
        rng = np.random.default_rng(0)
        replay = synthetic_replay(config, frame_shape, stack, actions, dtype, rng)
        host = []  # what the replay does per batch in a run: sample, gather frames, build the targets' context
        for _ in range(3):
            start = time.perf_counter()
            context, targets, weights = batch_for(config, replay, actions, batch, rng)
            host.append(time.perf_counter() - start)
        obs_shape = (frame_shape[0] * stack, *frame_shape[1:])
        compiled = [f"compiled:{mode}" for mode in (args.compile or ["default"])] if args.compile is not None else []
        for precision in args.precision + compiled + (["trained"] if trained else []):
            torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"  # torch's default: off
            times = []
            for threads in args.threads:
                torch.set_num_threads(threads)
                torch.manual_seed(0)
                net = make_network(obs_shape, actions, config.model, value_prefix=config.train.value_prefix)
                mode = precision.split(":")[1] if precision.startswith("compiled") else "none"
                train = dataclasses.replace(config.train, compile=mode)
                learner = Learner(net, dataclasses.replace(config, train=train), 10**6, device)
                if precision == "trained":
                    try:
                        learner.load_state_dict(trained)
                    except RunError as error:
                        raise SystemExit(f"error: {args.checkpoint}'s learner does not fit {task}'s preset (give the "
                                         f"run's task and --set overrides): {str(error).splitlines()[0]}") from None
                if mode != "none":
                    start = time.perf_counter()
                    learner.step(context, targets, weights)
                    print(f"compiled {task} in {time.perf_counter() - start:.0f} s", flush=True)
                # bf16: the step under autocast (forward and loss in bfloat16 where torch deems it safe, the
                # weights and the optimizer fp32); the learner has no such option (it did not pay, see README)
                step = torch.autocast(device.type, dtype=torch.bfloat16)(learner.step) if precision == "bf16" \
                    else learner.step
                try:
                    step(context, targets, weights)  # warm-up
                except RuntimeError as error:  # a precision this device or torch does not support
                    print(f"| {task} | {batch} | {precision} | failed: {str(error).splitlines()[0][:120]} |")
                    break
                samples = []
                for _ in range(args.steps):
                    start = time.perf_counter()
                    step(context, targets, weights)
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                    samples.append(time.perf_counter() - start)
                times.append(1000 * float(np.median(samples)))
                if args.profile and threads == args.threads[0]:
                    from torch.profiler import ProfilerActivity, profile

                    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
                    with profile(activities=activities) as prof:
                        for _ in range(5):
                            step(context, targets, weights)
                    for key in ["self_cpu_time_total"] + (["self_cuda_time_total"] if device.type == "cuda" else []):
                        profiles.append((f"{task} {precision} by {key}",
                                         prof.key_averages().table(sort_by=key, row_limit=15)))
            if device.type == "cuda" and precision == args.precision[0]:  # the observations' copy alone
                stacked = np.ascontiguousarray(context.observations)  # what the learner copied before 2026-12-05
                for name, array in (("frames", context.frames), ("stacked observations", stacked)):
                    copies = []
                    for _ in range(5):
                        start = time.perf_counter()
                        torch.as_tensor(array, device=device)
                        torch.cuda.synchronize()
                        copies.append(time.perf_counter() - start)
                    print(f"host-to-device copy of the {name} ({array.nbytes / 1e6:.0f} MB, "
                          f"pageable): {1000 * float(np.median(copies)):.1f} ms")
            if len(times) < len(args.threads):
                continue
            print(f"| {task} ({config.preset}) | {batch} | {precision} | {1000 * float(np.median(host)):.1f} | "
                  + " | ".join(f"{t:.1f}" for t in times) + " |", flush=True)
        torch.backends.cuda.matmul.allow_tf32 = False
    for task, table in profiles:
        print(f"\n{task}, {args.threads[0]} thread(s), 5 steps:\n{table}")


if __name__ == "__main__":
    main()
