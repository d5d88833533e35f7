"""A torch :class:`EfficientZeroNet` as the search's ``root`` and ``recurrent_fn``.

Evaluation and reanalyze search with it on the network's own device, and the exporter
(:mod:`ez_robot.export.onnx_export`) compares a bundle's graphs with it; training
picks it or the same network's graphs on onnxruntime through
:func:`ez_robot.inference.make_inference`.
"""
from __future__ import annotations

import numpy as np
import torch

from ez_robot.mcts import RootOutput
from ez_robot.networks import support_to_scalar

__all__ = ["TorchInference"]


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
