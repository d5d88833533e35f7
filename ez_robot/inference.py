"""Torch glue between an :class:`EfficientZeroNet` and the search.

:class:`TorchInference` turns observations into the search's :class:`RootOutput` and
provides its ``recurrent_fn``; :func:`run_search` searches many observations in chunks
(reanalyze searches thousands at once).  Self-play, reanalyze and evaluation all come
through here, so they all run the same search.
"""
from __future__ import annotations

import numpy as np
import torch

from ez_robot._search import RootOutput, SearchConfig, SearchOutput, search
from ez_robot.networks import support_to_scalar

__all__ = ["TorchInference", "run_search", "search_config"]


def search_config(config) -> SearchConfig:
    """The search a run's networks are searched with: ``config.search``, except that
    without the value-prefix LSTM (ablation) the network predicts per-step rewards, so
    every node is its own reset boundary and the tree reads each prediction as a reward."""
    return config.search if config.train.value_prefix else config.search.replace(lstm_horizon=1)


class TorchInference:
    """Inference with a network in eval mode, under no_grad, on one device."""

    def __init__(self, net, device: torch.device | str = "cpu"):
        self.net = net
        self.device = torch.device(device)

    @torch.no_grad()
    def root(self, observations: np.ndarray) -> RootOutput:
        """observations [B, *obs_shape] -> RootOutput for B roots."""
        obs = torch.as_tensor(np.ascontiguousarray(observations), device=self.device)
        out = self.net.initial_inference(obs)
        h, c = self.net.initial_lstm_state(obs.shape[0], device=self.device)
        value = support_to_scalar(out.value_logits, self.net.support_size)
        return RootOutput(hidden=(out.hidden, h, c), value_prefix=np.zeros(obs.shape[0], np.float32),
                          value=value.float().cpu().numpy(), policy_logits=out.policy_logits.float().cpu().numpy())

    @torch.no_grad()
    def recurrent_fn(self, hidden, actions: np.ndarray, reset_mask: np.ndarray):
        state, h, c = hidden
        if reset_mask.any():
            keep = torch.from_numpy(~reset_mask).to(self.device, h.dtype)[:, None]
            h, c = h * keep, c * keep
        action = torch.from_numpy(actions).to(self.device, torch.long)
        out = self.net.recurrent_inference(state, (h, c), action)
        support = self.net.support_size
        return ((out.hidden, *out.lstm_state),
                support_to_scalar(out.value_prefix_logits, support).float().cpu().numpy(),
                support_to_scalar(out.value_logits, support).float().cpu().numpy(),
                out.policy_logits.float().cpu().numpy())


def run_search(inference: TorchInference, observations: np.ndarray, config: SearchConfig,
               rng: np.random.Generator, max_batch: int = 1024) -> SearchOutput:
    """Searches B observations, ``max_batch`` roots at a time (bounds the hidden-state pool)."""
    if len(observations) <= max_batch:
        return search(inference.root(observations), inference.recurrent_fn, config, rng)
    parts = [search(inference.root(observations[i:i + max_batch]), inference.recurrent_fn, config, rng)
             for i in range(0, len(observations), max_batch)]
    return SearchOutput(**{name: np.concatenate([getattr(p, name) for p in parts])
                           for name in SearchOutput.__dataclass_fields__})
