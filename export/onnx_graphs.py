"""A torch network as the two ONNX graphs of a bundle (the names and shapes are
:data:`ez_robot.export.bundle.INITIAL` and :data:`~ez_robot.export.bundle.RECURRENT`),
both with a dynamic batch axis and opset :data:`OPSET`:

- ``initial.onnx``: observation [B, *obs] (raw: uint8 pixels or float32 states; the
  scaling is inside the graph) -> hidden, value [B], policy_logits [B, P] (P: A logits in
  joint mode, the sampled modes' policy parameters otherwise, see
  :class:`ez_robot.action_modes.ActionSpec`);
- ``recurrent.onnx``: hidden, lstm_h, lstm_c [B, lstm_hidden], action [B] int64 (joint
  mode) or [B, D] float32 in [-1, 1] (the sampled modes), reset [B] float32 (1 = restart
  the value-prefix LSTM before this step) -> next_hidden, next_h, next_c, value_prefix [B],
  value [B], policy_logits [B, P].

Supports become scalars inside the graphs, so the runtime needs no torch and no value
transform.  The exporter (:mod:`ez_robot.export.onnx_export`) writes a bundle with these
graphs; training's :class:`ez_robot.inference.OnnxInference` runs them for self-play.
"""
from __future__ import annotations

import copy
import warnings
from pathlib import Path

import torch
import torch.nn as nn

from ez_robot.errors import ExportError
from ez_robot.export.bundle import INITIAL, RECURRENT
from ez_robot.networks import support_to_scalar

__all__ = ["export_network", "OPSET"]

OPSET = 17


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
        (_Initial(net).eval(), (observation,), INITIAL),
        (_Recurrent(net).eval(), (hidden, h, c, action, reset), RECURRENT),
    ]
    paths = []
    for module, args, graph in graphs:
        name, inputs, outputs = graph.file, list(graph.inputs), list(graph.outputs)
        path = Path(directory) / name
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
