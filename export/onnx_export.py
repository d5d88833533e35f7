"""``ez-robot export``: a trained run's networks as a bundle the runtime loads.

The graphs are written by :func:`ez_robot.export.onnx_graphs.export_network` and the
manifest by :class:`ez_robot.export.bundle.Manifest` (the format's spec is
``docs/bundle_format.md``).  Before it reports success the exporter checks the graphs
(``onnx.checker``), compares them with torch on observations recorded from the task
(:data:`ATOL`, :data:`RTOL`), and checks that the runtime's greedy search picks the torch
search's action on every one of them.  A bundle that fails is not written.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import numpy as np
import torch

from ez_robot._version import __version__
from ez_robot.checkpoint import load_run
from ez_robot.errors import ConfigError, ExportError
from ez_robot.export.bundle import (FORMAT_NAME, FORMAT_VERSION, MANIFEST_FILE, ActionSection, HiddenSection,
                                    Manifest, ObservationSection, file_hashes)
from ez_robot.export.onnx_graphs import OPSET, export_network
from ez_robot.export.runtime import Policy
from ez_robot.mcts import search
from ez_robot.networks import support_to_scalar
from ez_robot.torch_inference import TorchInference

__all__ = ["ExportError", "export_run", "export_model", "validate", "ATOL", "RTOL", "ACTION_ATOL"]

ATOL, RTOL = 1e-4, 1e-4
"""An ONNX output passes when max |onnx - torch| <= ATOL + RTOL max |torch| over each
output (values, value prefixes, logits, hidden and LSTM states): float32 kernels sum in
a different order than torch's, so errors scale with the output's magnitude, not with
each element's."""
ACTION_ATOL = 1e-3
"""The sampled modes: the runtime's action vector matches torch's when every dimension is
within this (in [-1, 1] units); candidates are drawn from the networks' outputs, so the
outputs' float differences move them slightly."""


# --- checks against torch --------------------------------------------------------------

def validate(net, policy: Policy, observations: np.ndarray, search_config, seed: int = 0) -> dict:
    """Compares the bundle with torch on ``observations``: every graph output, then the
    greedy search's actions.  Returns the report the manifest keeps under ``validation``."""
    rng = np.random.default_rng(seed)
    batch = len(observations)
    with torch.no_grad():
        init = net.initial_inference(torch.as_tensor(observations))
        ort_initial = policy.networks.initial(observations)
        torch_initial = [init.hidden, support_to_scalar(init.value_logits, *net.value_support), init.policy_logits]
        # A used LSTM state (not only zeros), random actions and a mix of reset rows.
        h = rng.standard_normal((batch, net.lstm_hidden)).astype(np.float32)
        c = rng.standard_normal((batch, net.lstm_hidden)).astype(np.float32)
        spec = net.action_spec
        action = rng.uniform(-1, 1, (batch, spec.dims)).astype(np.float32) if spec.sampled else \
            rng.integers(0, spec.num_actions, batch)
        reset = (rng.random(batch) < 0.5).astype(np.float32)
        keep = torch.as_tensor(1 - reset)[:, None]
        lstm = (torch.as_tensor(h) * keep, torch.as_tensor(c) * keep)
        rec = net.recurrent_inference(init.hidden, lstm, torch.as_tensor(action))
        ort_recurrent = policy.networks.recurrent(ort_initial[0], h, c, action, reset)
        torch_recurrent = [rec.hidden, *rec.lstm_state,
                           support_to_scalar(rec.value_prefix_logits, *net.reward_support),
                           support_to_scalar(rec.value_logits, *net.value_support), rec.policy_logits]
    diffs, excess = {}, 0.0
    for graph, ours, theirs in [("initial", ort_initial, torch_initial), ("recurrent", ort_recurrent, torch_recurrent)]:
        diffs[graph] = 0.0
        for a, b in zip(ours, theirs):
            b = b.numpy()
            diff = float(np.abs(a - b).max())
            diffs[graph] = max(diffs[graph], diff)
            excess = max(excess, diff - ATOL - RTOL * float(np.abs(b).max()))

    inference = TorchInference(net, "cpu")
    greedy = search_config.replace(add_noise=False, temperature=0.0)
    spec = net.action_spec
    # Same seed on both sides: the sampled modes draw the same candidates (up to the
    # networks' float differences), joint mode draws nothing in a greedy search.
    torch_actions = search(inference.root(observations), inference.recurrent_fn, greedy, np.random.default_rng(seed),
                           action_spec=spec).actions
    runtime_actions = policy.search(observations, num_simulations=greedy.num_simulations,
                                    rng=np.random.default_rng(seed)).actions
    if spec.sampled:  # vectors: equal within ACTION_ATOL per dimension
        same = np.all(np.abs(torch_actions - runtime_actions) <= ACTION_ATOL, axis=1)
    else:
        same = torch_actions == runtime_actions
    return {"observations": batch, "max_abs_diff": diffs, "atol": ATOL, "rtol": RTOL,
            "within_tolerance": excess <= 0, "num_simulations": greedy.num_simulations,
            "actions_equal": int(same.sum()), "mismatched": np.flatnonzero(~same).tolist()}


def _record_observations(env, net, search_config, count: int, seed: int) -> np.ndarray:
    """Observations the trained policy meets: a cheap greedy torch search in the eval env."""
    inference = TorchInference(net, "cpu")
    config = search_config.replace(add_noise=False, temperature=0.0,
                                   num_simulations=min(search_config.num_simulations, 8))
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    recorded = []
    while len(recorded) < count:
        recorded.append(obs)
        action = search(inference.root(obs[None]), inference.recurrent_fn, config, rng,
                        action_spec=inference.action_spec).actions[0]
        obs, _, terminated, truncated, _ = env.step(action if net.action_spec.sampled else int(action))
        if terminated or truncated:
            obs, _ = env.reset()
    return np.stack(recorded)


# --- the bundle ------------------------------------------------------------------------

def _action_section(env, spec) -> ActionSection:
    """The manifest's ``action``: the mode (``spec``, an ActionSpec) and what the robot gets."""
    from ez_robot.envs.wrappers import JointDiscreteActions, NormalizedActions, find_wrapper

    if spec.sampled:  # the search gives vectors in [-1, 1]^D, mapped linearly onto the bounds
        wrapper = find_wrapper(env, NormalizedActions)  # every sampled-mode task env has it
        low, high = wrapper.action_low, wrapper.action_high
        # num_actions: the policy head's outputs (there is no finite action set)
        return ActionSection(kind="continuous", mode=spec.mode, spec=spec, num_actions=spec.policy_size,
                             dims=spec.dims, low=_floats(low), high=_floats(high))
    num_actions = int(spec.num_actions)
    joint = find_wrapper(env, JointDiscreteActions)
    if joint is not None:  # a continuous robot: a discrete index stands for a vector
        low, high = joint.action_low, joint.action_high
        return ActionSection(kind="continuous", mode="joint", spec=spec, num_actions=num_actions, dims=len(low),
                             bins_per_dim=int(joint.bins), low=_floats(low), high=_floats(high),
                             values_per_dim=tuple(map(_floats, np.linspace(low, high, joint.bins, axis=1))),
                             table=tuple(map(_floats, joint.action_table)))
    return ActionSection(kind="discrete", mode="joint", spec=spec, num_actions=num_actions)


def _floats(values) -> tuple[float, ...]:
    return tuple(float(v) for v in np.asarray(values, np.float64))


def _observation_layout(env) -> list[dict] | None:
    """Where each raw sensor value goes in the vector the bundle takes (gym: and custom
    tasks: the Dict keys in order; None for DMControl and Atari)."""
    from ez_robot.envs.wrappers import FlatObservations, find_wrapper, observation_layout

    wrapper = find_wrapper(env, FlatObservations)
    return observation_layout(wrapper.raw_observation_space) if wrapper is not None else None


def export_run(run_dir: str | Path, out: str | Path | None = None, *, checkpoint: str | Path | None = None,
               observations: int = 32, seed: int = 0, trust_task: bool = False) -> dict:
    """Exports a run's checkpoint (default: the latest) to a bundle directory (default
    ``RUN_DIR/bundle``) and returns its manifest; see :func:`export_model`.  Raises
    :class:`ez_robot.errors.RunError` when the run cannot be loaded; ``trust_task``
    allows a factory task (:func:`ez_robot.checkpoint.load_run`)."""
    run = load_run(run_dir, checkpoint, "cpu", trust_task=trust_task)
    return export_model(run.net, run.config, Path(out) if out else Path(run_dir) / "bundle",
                        observations=observations, seed=seed,
                        source={"checkpoint": str(run.checkpoint), "counters": run.counters})


def export_model(net, config, out: str | Path, *, observations: int = 32, seed: int = 0,
                 source: dict | None = None) -> dict:
    """Writes ``net`` (trained with ``config``) as a bundle at ``out``, after validating it
    on ``observations`` observations recorded from the task; returns the manifest.

    Raises :class:`ExportError` when a check fails; the bundle is then not written (an
    older bundle at ``out`` stays as it was).  ``source`` (``checkpoint``, ``counters``)
    says where the weights came from."""
    from ez_robot.config import config_to_dict, search_config as run_search_config
    from ez_robot.envs import control_period, make_from_config

    if observations < 1:
        raise ConfigError(f"observations must be >= 1, got {observations}")
    out = Path(out)
    if out.exists() and not (out / MANIFEST_FILE).is_file():
        raise ExportError(f"{out} exists and is not a bundle; give another directory")
    search_config = run_search_config(config)
    env = make_from_config(config.env, seed=seed, mode="eval")
    space = env.observation_space
    spec = net.action_spec
    env_actions = env.action_space.shape[0] if spec.sampled else getattr(env.action_space, "n", None)
    net_actions = spec.dims if spec.sampled else spec.num_actions
    if tuple(space.shape) != tuple(net.obs_shape) or env_actions != net_actions:
        env.close()
        raise ExportError(f"the network takes observations {tuple(net.obs_shape)} and has {spec.describe()} actions, "
                          f"but {config.env.task} gives observations {tuple(space.shape)} and {env.action_space}")
    staging = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir(parents=True)
    except OSError as error:  # a parent that is a file, a place the user may not write to
        env.close()
        raise ExportError(f"cannot write the bundle at {out}: {error.strerror}") from None
    try:
        export_network(net, staging)
        source = dict(source or {})
        manifest = Manifest(
            format=FORMAT_NAME, format_version=FORMAT_VERSION, ez_robot_version=__version__,
            torch_version=torch.__version__, opset=OPSET, task=config.env.task,
            checkpoint=source.pop("checkpoint", None), counters=source.pop("counters", None), extra=source,
            observation=ObservationSection(shape=tuple(space.shape), dtype=str(space.dtype),
                                           kind="pixels" if net.pixels else "state", layout=_observation_layout(env),
                                           normalized_in_graph=net.normalizer is not None),
            hidden=HiddenSection(shape=tuple(int(n) for n in net.hidden_shape), lstm_hidden=int(net.lstm_hidden)),
            action=_action_section(env, spec), action_repeat=config.env.action_repeat,
            control_period_s=control_period(env, config.env), support_size=int(net.support_size),
            value_prefix=bool(net.value_prefix), search=search_config, config=config_to_dict(config),
            files=file_hashes(staging))
        manifest.write(staging)
        recorded = _record_observations(env, net, search_config, observations, seed)
        manifest = dataclasses.replace(
            manifest, validation=validate(net, Policy.load(staging), recorded, search_config, seed))
        manifest.write(staging)
        _raise_if_failed(manifest.validation)
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)  # the bundle appears whole or not at all
    finally:
        env.close()
        shutil.rmtree(staging, ignore_errors=True)
    return manifest.to_json()


def _raise_if_failed(report: dict) -> None:
    worst = max(report["max_abs_diff"].values())
    if not report["within_tolerance"]:
        raise ExportError(f"ONNX outputs differ from torch by up to {worst:.2e} (tolerance {ATOL:.0e} + "
                          f"{RTOL:.0e} x max |torch| per output); the bundle was not written")
    if report["mismatched"]:
        raise ExportError(f"the runtime's greedy action differs from the torch search's on "
                          f"{len(report['mismatched'])} of {report['observations']} recorded observations "
                          f"(max |onnx - torch| {worst:.2e}); the bundle was not written")
