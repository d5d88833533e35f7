"""Torch glue between an :class:`EfficientZeroNet` and the search.

:class:`TorchInference` turns observations into the search's :class:`RootOutput` and
provides its ``recurrent_fn``; :func:`run_search` searches many observations in chunks
(reanalyze searches thousands at once).  Self-play, reanalyze and evaluation all come
through here, so they all run the same search.
"""
from __future__ import annotations

import numpy as np
import torch

from ez_robot.mcts import RootOutput, SearchConfig, SearchOutput, search
from ez_robot.networks import support_to_scalar

__all__ = ["TorchInference", "OnnxInference", "make_inference", "run_search", "INFERENCE_BACKENDS"]

INFERENCE_BACKENDS = ("onnxruntime", "torch")


class TorchInference:
    """Inference with a network in eval mode, under no_grad, on one device."""

    def __init__(self, net, device: torch.device | str = "cpu"):
        self.net = net
        self.device = torch.device(device)
        self.action_spec = net.action_spec

    def refresh(self) -> None:
        """Nothing to do: the calls read the network's weights as they are."""

    @torch.no_grad()
    def root(self, observations: np.ndarray) -> RootOutput:
        """observations [B, *obs_shape] -> RootOutput for B roots."""
        obs = torch.as_tensor(np.ascontiguousarray(observations), device=self.device)
        out = self.net.initial_inference(obs)
        h, c = self.net.initial_lstm_state(obs.shape[0], device=self.device)
        value = support_to_scalar(out.value_logits, *self.net.value_support)
        return RootOutput(hidden=(out.hidden, h, c), value_prefix=np.zeros(obs.shape[0], np.float32),
                          value=value.float().cpu().numpy(), policy_logits=out.policy_logits.float().cpu().numpy())

    @torch.no_grad()
    def recurrent_fn(self, hidden, actions: np.ndarray, reset_mask: np.ndarray):
        state, h, c = hidden
        if reset_mask.any():
            keep = torch.from_numpy(~reset_mask).to(self.device, h.dtype)[:, None]
            h, c = h * keep, c * keep
        action = torch.from_numpy(np.ascontiguousarray(actions)).to(
            self.device, torch.float32 if self.action_spec.sampled else torch.long)
        out = self.net.recurrent_inference(state, (h, c), action)
        return ((out.hidden, *out.lstm_state),
                support_to_scalar(out.value_prefix_logits, *self.net.reward_support).float().cpu().numpy(),
                support_to_scalar(out.value_logits, *self.net.value_support).float().cpu().numpy(),
                out.policy_logits.float().cpu().numpy())


class OnnxInference:
    """A torch network's graphs on onnxruntime (CPU, one intra-op thread): the search's
    many small network calls cost a fraction of torch's per-call overhead (measured:
    0.06 vs 0.38 ms for a batch-1 recurrent step of the DMC-state model, 2.3 vs 3.1 ms at
    batch 410; ``benchmarks/inference_bench.py``).  The graphs are the ones ``ez-robot
    export`` writes, exported again from the network's weights by :meth:`refresh`, which
    whoever changes the weights calls (~0.15 s for the state models)."""

    def __init__(self, net):
        self.net = net
        self.action_spec = net.action_spec
        self.refresh()

    def refresh(self) -> None:
        import tempfile
        from pathlib import Path

        import onnxruntime as ort

        from ez_robot.export.onnx_export import export_network
        from ez_robot.export.runtime import Networks, session_options

        with tempfile.TemporaryDirectory() as tmp:
            export_network(self.net, Path(tmp), check=False)
            options = session_options("latency")
            initial, recurrent = (ort.InferenceSession(str(Path(tmp) / name), options,
                                                       providers=["CPUExecutionProvider"])
                                  for name in ("initial.onnx", "recurrent.onnx"))
        self._networks = Networks(initial, recurrent, self.net.lstm_hidden, self.action_spec)
        self._dtype = np.uint8 if self.net.pixels else np.float32

    def root(self, observations: np.ndarray) -> RootOutput:
        return self._networks.root(np.ascontiguousarray(observations, dtype=self._dtype))

    def recurrent_fn(self, hidden, actions: np.ndarray, reset_mask: np.ndarray):
        return self._networks.recurrent_fn(hidden, actions, reset_mask)


def make_inference(net, device: torch.device | str, backend: str):
    """The inference a search uses for ``net``: onnxruntime where asked for and the
    network is on the CPU, else torch on its device."""
    if backend == "onnxruntime" and torch.device(device).type == "cpu":
        return OnnxInference(net)
    return TorchInference(net, device)


def run_search(inference: TorchInference, observations: np.ndarray, config: SearchConfig,
               rng: np.random.Generator, max_batch: int = 1024) -> SearchOutput:
    """Searches B observations, ``max_batch`` roots at a time (bounds the hidden-state pool),
    in the action mode of the inference's network."""
    spec = inference.action_spec
    if len(observations) <= max_batch:
        return search(inference.root(observations), inference.recurrent_fn, config, rng, action_spec=spec)
    parts = [search(inference.root(observations[i:i + max_batch]), inference.recurrent_fn, config, rng,
                    action_spec=spec) for i in range(0, len(observations), max_batch)]
    return SearchOutput(**{name: None if getattr(parts[0], name) is None else
                           np.concatenate([getattr(p, name) for p in parts])
                           for name in SearchOutput.__dataclass_fields__})
