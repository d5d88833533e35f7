"""``ez-robot export``: a trained run's networks as ONNX, in the bundle the runtime loads.

Two graphs, both with a dynamic batch axis and opset :data:`OPSET`:

- ``initial.onnx``: observation [B, *obs] (raw: uint8 pixels or float32 states; the
  scaling is inside the graph) -> hidden, value [B], policy_logits [B, P] (P: A logits in
  joint mode, the sampled modes' policy parameters otherwise, see
  :class:`ez_robot.action_modes.ActionSpec`);
- ``recurrent.onnx``: hidden, lstm_h, lstm_c [B, lstm_hidden], action [B] int64 (joint
  mode) or [B, D] float32 in [-1, 1] (the sampled modes), reset [B] float32 (1 = restart the value-prefix LSTM before this step) -> next_hidden,
  next_h, next_c, value_prefix [B], value [B], policy_logits [B, A].

Supports become scalars inside the graphs, so the runtime needs no torch and no value
transform.  Before it reports success the exporter checks the graphs
(``onnx.checker``), compares them with torch on observations recorded from the task
(:data:`ATOL`, :data:`RTOL`), and checks that the runtime's greedy search picks the
torch search's action on every one of them.  A bundle that fails is not written.
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

import ez_robot
from ez_robot.errors import ConfigError, ExportError
from ez_robot.export.runtime import BUNDLE_FORMAT, MANIFEST, Policy
from ez_robot.networks import support_to_scalar

__all__ = ["ExportError", "export_run", "export_model", "export_network", "validate", "OPSET", "ATOL", "RTOL"]

OPSET = 17
ATOL, RTOL = 1e-4, 1e-4
"""An ONNX output passes when max |onnx - torch| <= ATOL + RTOL max |torch| over each
output (values, value prefixes, logits, hidden and LSTM states): float32 kernels sum in
a different order than torch's, so errors scale with the output's magnitude, not with
each element's."""
ACTION_ATOL = 1e-3
"""The sampled modes: the runtime's action vector matches torch's when every dimension is
within this (in [-1, 1] units); candidates are drawn from the networks' outputs, so the
outputs' float differences move them slightly."""


class _Initial(nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, observation):
        out = self.net.initial_inference(observation)
        return out.hidden, support_to_scalar(out.value_logits, *self.net.value_support), out.policy_logits


class _Recurrent(nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, hidden, lstm_h, lstm_c, action, reset):
        keep = (1.0 - reset).unsqueeze(1)
        h, c = lstm_h * keep, lstm_c * keep
        # Without the value-prefix LSTM (the ablation) the state passes through unchanged.
        out = self.net.recurrent_inference(hidden, (h, c), action)
        if self.net.reward_support == self.net.value_support:
            # One support -> scalar chain for both heads: two made nearly half the graph's nodes.
            both = support_to_scalar(torch.stack([out.value_prefix_logits, out.value_logits], 1), *self.net.value_support)
            value_prefix, value = both[:, 0], both[:, 1]
        else:  # a value-prefix support of its own
            value_prefix = support_to_scalar(out.value_prefix_logits, *self.net.reward_support)
            value = support_to_scalar(out.value_logits, *self.net.value_support)
        return (out.hidden, *out.lstm_state, value_prefix, value, out.policy_logits)


def _fold_batchnorm(net):
    """A copy of ``net`` (eval mode) with each Linear -> BatchNorm1d pair of its MLPs folded
    into one Linear: same outputs (within float32 rounding), fewer graph nodes per step.
    onnxruntime folds Conv -> BatchNorm itself, but not these."""
    from torch.nn.utils.fusion import fuse_linear_bn_eval

    net = copy.deepcopy(net).cpu().eval()
    for module in net.modules():
        if isinstance(module, nn.Sequential):
            for i in range(len(module) - 1):
                linear, bn = module[i], module[i + 1]
                if isinstance(linear, nn.Linear) and isinstance(bn, nn.BatchNorm1d):
                    module[i], module[i + 1] = fuse_linear_bn_eval(linear, bn), nn.Identity()
    return net


def export_network(net, directory: Path, check: bool = True) -> list[Path]:
    """Writes ``initial.onnx`` and ``recurrent.onnx`` of ``net`` (put in eval mode) and
    runs ``onnx.checker`` on both (unless ``check`` is False: training re-exports the
    same graph with new weights)."""
    import onnx

    net = _fold_batchnorm(net)
    batch = 2
    observation = torch.zeros((batch, *net.obs_shape), dtype=torch.uint8 if net.pixels else torch.float32)
    hidden = torch.zeros((batch, *net.hidden_shape))
    h, c = net.initial_lstm_state(batch)
    spec = net.action_spec
    # an index per row (joint), or an action vector in [-1, 1]^D (the sampled modes)
    action = torch.zeros((batch, spec.dims)) if spec.sampled else torch.zeros(batch, dtype=torch.long)
    reset = torch.zeros(batch)
    graphs = [
        # .eval(): the exporter restores each wrapper's mode afterwards, and a wrapper
        # built in train mode would leave ``net`` training (BatchNorm on batch statistics).
        (_Initial(net).eval(), (observation,), "initial.onnx", ["observation"], ["hidden", "value", "policy_logits"]),
        (_Recurrent(net).eval(), (hidden, h, c, action, reset), "recurrent.onnx",
         ["hidden", "lstm_h", "lstm_c", "action", "reset"],
         ["next_hidden", "next_h", "next_c", "value_prefix", "value", "policy_logits"]),
    ]
    paths = []
    for module, args, name, inputs, outputs in graphs:
        path = directory / name
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
            torch.onnx.export(module, args, str(path), dynamo=False, opset_version=OPSET, input_names=inputs,
                              output_names=outputs, dynamic_axes={n: {0: "batch"} for n in inputs + outputs})
        try:
            if check:
                onnx.checker.check_model(onnx.load(str(path)), full_check=True)
        except onnx.checker.ValidationError as error:
            raise ExportError(f"onnx.checker rejects {name}: {error}") from None
        paths.append(path)
    return paths


# --- checks against torch --------------------------------------------------------------

def validate(net, policy: Policy, observations: np.ndarray, search_config, seed: int = 0) -> dict:
    """Compares the bundle with torch on ``observations``: every graph output, then the
    greedy search's actions.  Returns the report the manifest keeps under ``validation``."""
    from ez_robot.mcts import search
    from ez_robot.inference import TorchInference

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
    from ez_robot.inference import TorchInference, run_search

    inference = TorchInference(net, "cpu")
    config = search_config.replace(add_noise=False, temperature=0.0,
                                   num_simulations=min(search_config.num_simulations, 8))
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    recorded = []
    while len(recorded) < count:
        recorded.append(obs)
        action = run_search(inference, obs[None], config, rng).actions[0]
        obs, _, terminated, truncated, _ = env.step(action if net.action_spec.sampled else int(action))
        if terminated or truncated:
            obs, _ = env.reset()
    return np.stack(recorded)


# --- the bundle ------------------------------------------------------------------------

def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _action_spec(env, spec) -> dict:
    """The manifest's ``action``: the mode (``spec``, an ActionSpec) and what the robot gets."""
    from ez_robot.envs.wrappers import JointDiscreteActions, NormalizedActions, find_wrapper

    if spec.sampled:  # the search gives vectors in [-1, 1]^D, mapped linearly onto the bounds
        wrapper = find_wrapper(env, NormalizedActions)  # every sampled-mode task env has it
        low, high = wrapper.action_low, wrapper.action_high
        # num_actions: the policy head's outputs (there is no finite action set)
        return {"kind": "continuous", "mode": spec.mode, "spec": spec.state_dict(), "num_actions": spec.policy_size,
                "dims": spec.dims, "low": np.asarray(low, np.float64).tolist(),
                "high": np.asarray(high, np.float64).tolist()}
    num_actions = int(spec.num_actions)
    joint = find_wrapper(env, JointDiscreteActions)
    if joint is not None:  # a continuous robot: a discrete index stands for a vector
        low, high = joint.action_low, joint.action_high
        return {"kind": "continuous", "num_actions": num_actions, "dims": len(low), "bins_per_dim": int(joint.bins),
                "low": low.tolist(), "high": high.tolist(),
                "values_per_dim": np.linspace(low, high, joint.bins, axis=1).tolist(),
                "table": joint.action_table.tolist(), "mode": "joint", "spec": spec.state_dict()}
    return {"kind": "discrete", "num_actions": num_actions, "mode": "joint", "spec": spec.state_dict()}


def _observation_layout(env) -> list[dict] | None:
    """Where each raw sensor value goes in the vector the bundle takes (gym: and custom
    tasks: the Dict keys in order; None for DMControl and Atari)."""
    from ez_robot.envs.wrappers import FlatObservations, find_wrapper, observation_layout

    wrapper = find_wrapper(env, FlatObservations)
    return observation_layout(wrapper.raw_observation_space) if wrapper is not None else None


def export_run(run_dir: str | Path, out: str | Path | None = None, *, checkpoint: str | Path | None = None,
               observations: int = 32, seed: int = 0) -> dict:
    """Exports a run's checkpoint (default: the latest) to a bundle directory (default
    ``RUN_DIR/bundle``) and returns its manifest; see :func:`export_model`.  Raises
    :class:`ez_robot.errors.RunError` when the run cannot be loaded."""
    from ez_robot.evaluation import load_run

    run = load_run(run_dir, checkpoint, "cpu")
    return export_model(run.net, run.config, Path(out) if out else Path(run_dir) / "bundle",
                        observations=observations, seed=seed,
                        source={"checkpoint": str(run.checkpoint), "counters": run.counters})


def export_model(net, config, out: str | Path, *, observations: int = 32, seed: int = 0,
                 source: dict | None = None) -> dict:
    """Writes ``net`` (trained with ``config``) as a bundle at ``out``, after validating it
    on ``observations`` observations recorded from the task; returns the manifest.

    Raises :class:`ExportError` when a check fails; the bundle is then not written (an
    older bundle at ``out`` stays as it was)."""
    from ez_robot.config import config_to_dict, search_config as run_search_config
    from ez_robot.envs import control_period, make_from_config

    if observations < 1:
        raise ConfigError(f"observations must be >= 1, got {observations}")
    out = Path(out)
    if out.exists() and not (out / MANIFEST).is_file():
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
        paths = export_network(net, staging)
        manifest = {
            "format": BUNDLE_FORMAT[0], "format_version": BUNDLE_FORMAT[1],
            "ez_robot_version": ez_robot.__version__, "torch_version": torch.__version__, "opset": OPSET,
            "task": config.env.task, **(source or {}),
            "observation": {"shape": list(space.shape), "dtype": str(space.dtype),
                            "kind": "pixels" if net.pixels else "state", "layout": _observation_layout(env),
                            "normalized_in_graph": net.normalizer is not None},
            "hidden": {"shape": [int(n) for n in net.hidden_shape], "lstm_hidden": int(net.lstm_hidden)},
            "action": _action_spec(env, spec),
            "action_repeat": config.env.action_repeat, "control_period_s": control_period(env, config.env),
            "support_size": int(net.support_size), "value_prefix": bool(net.value_prefix),
            "search": {name: getattr(search_config, name) for name in search_config.__dataclass_fields__},
            "config": config_to_dict(config),
            "files": {path.name: _sha256(path) for path in paths},
        }
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        recorded = _record_observations(env, net, search_config, observations, seed)
        manifest["validation"] = validate(net, Policy.load(staging), recorded, search_config, seed)
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        _raise_if_failed(manifest["validation"])
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)  # the bundle appears whole or not at all
    finally:
        env.close()
        shutil.rmtree(staging, ignore_errors=True)
    return manifest


def _raise_if_failed(report: dict) -> None:
    worst = max(report["max_abs_diff"].values())
    if not report["within_tolerance"]:
        raise ExportError(f"ONNX outputs differ from torch by up to {worst:.2e} (tolerance {ATOL:.0e} + "
                          f"{RTOL:.0e} x max |torch| per output); the bundle was not written")
    if report["mismatched"]:
        raise ExportError(f"the runtime's greedy action differs from the torch search's on "
                          f"{len(report['mismatched'])} of {report['observations']} recorded observations "
                          f"(max |onnx - torch| {worst:.2e}); the bundle was not written")
