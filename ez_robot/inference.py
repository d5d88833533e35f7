"""The networks behind training's searches, and the search over many observations.

:func:`make_inference` picks a backend for a network: :class:`OnnxInference` (its graphs
on onnxruntime, CPU) or :class:`ez_robot.torch_inference.TorchInference` (torch on the
network's device).  :func:`run_search` searches many observations in chunks (reanalyze
searches thousands at once).  Self-play, reanalyze, evaluation and the Python API's
``Agent`` all come through here, so they all run the same search.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from ez_robot.export.bundle import INITIAL, RECURRENT
from ez_robot.export.onnx_graphs import export_network
from ez_robot.export.runtime import Networks, session_options
from ez_robot.mcts import SearchOutput, search
from ez_robot.search_config import SearchConfig
from ez_robot.torch_inference import TorchInference

__all__ = ["OnnxInference", "make_inference", "run_search", "INFERENCE_BACKENDS"]

INFERENCE_BACKENDS = ("onnxruntime", "torch")


class OnnxInference:
    """A torch network's graphs on onnxruntime (CPU, one intra-op thread): a search makes
    many small network calls, and onnxruntime's cost per call is a fraction of torch's
    (``benchmarks/inference_bench.py`` measures both).  The graphs are the ones ``ez-robot
    export`` writes, exported again from the network's weights by :meth:`refresh`, which
    whoever changes the weights calls."""

    def __init__(self, net):
        self.net = net
        self.action_spec = net.action_spec
        self.refresh()

    def refresh(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            export_network(self.net, Path(tmp), check=False)
            options = session_options("latency")
            initial, recurrent = (ort.InferenceSession(str(Path(tmp) / graph.file), options,
                                                       providers=["CPUExecutionProvider"])
                                  for graph in (INITIAL, RECURRENT))
        self._networks = Networks(initial, recurrent, self.net.lstm_hidden, self.action_spec)
        self._dtype = np.uint8 if self.net.pixels else np.float32

    def root(self, observations: np.ndarray):
        return self._networks.root(np.ascontiguousarray(observations, dtype=self._dtype))

    def recurrent_fn(self, hidden, actions: np.ndarray, reset_mask: np.ndarray):
        return self._networks.recurrent_fn(hidden, actions, reset_mask)


def make_inference(net, device: torch.device | str, backend: str):
    """The inference a search uses for ``net``: onnxruntime where asked for and the
    network is on the CPU, else torch on its device."""
    if backend == "onnxruntime" and torch.device(device).type == "cpu":
        return OnnxInference(net)
    return TorchInference(net, device)


def run_search(inference, observations: np.ndarray, config: SearchConfig, rng: np.random.Generator,
               max_batch: int = 1024) -> SearchOutput:
    """Searches B observations, ``max_batch`` roots at a time (bounds the hidden-state pool),
    in the action mode of ``inference``'s network (a :class:`TorchInference` or an
    :class:`OnnxInference`)."""
    spec = inference.action_spec
    if len(observations) <= max_batch:
        return search(inference.root(observations), inference.recurrent_fn, config, rng, action_spec=spec)
    parts = [search(inference.root(observations[i:i + max_batch]), inference.recurrent_fn, config, rng,
                    action_spec=spec) for i in range(0, len(observations), max_batch)]
    return SearchOutput(**{name: None if getattr(parts[0], name) is None else
                           np.concatenate([getattr(p, name) for p in parts])
                           for name in SearchOutput.__dataclass_fields__})
