"""The learner: one SGD step on EfficientZero's loss (:mod:`ez_robot.losses`), and the
snapshots of the network the rest of a run reads.

A step: the batch's observations on the device (stacked, augmented), the model unrolled
along it, the loss's terms, then the optimizer's step with the gradient norm clipped
(``train.max_grad_norm``) and the snapshots refreshed on their intervals.
"""
from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn.functional as F

from ez_robot.batch import Batch
from ez_robot.config import Config, search_config
from ez_robot.errors import RunError
from ez_robot.losses import EfficientZeroLoss, ModelCalls, ModelGradient, Unroll, unroll
from ez_robot.networks import support_to_scalar
from ez_robot.targets import Targets

__all__ = ["Learner", "augment"]


def augment(obs: torch.Tensor, generator: torch.Generator, max_shift: int = 4) -> torch.Tensor:
    """Random shift (up to ``max_shift`` px, edge padding) and intensity jitter of uint8
    frames [N, C, H, W]; the same transform for every frame of one stacked observation."""
    n, _, height, width = obs.shape
    padded = F.pad(obs.float(), (max_shift,) * 4, mode="replicate")
    dx = torch.randint(0, 2 * max_shift + 1, (n,), generator=generator)
    dy = torch.randint(0, 2 * max_shift + 1, (n,), generator=generator)
    rows = (dy[:, None] + torch.arange(height)[None, :]).to(obs.device)  # [N, H]
    cols = (dx[:, None] + torch.arange(width)[None, :]).to(obs.device)  # [N, W]
    index = torch.arange(n, device=obs.device)[:, None, None]
    shifted = padded.permute(0, 2, 3, 1)[index, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2)
    scale = 1.0 + 0.05 * torch.randn(n, 1, 1, 1, generator=generator).clamp(-2, 2).to(obs.device)
    return (shifted * scale).clamp(0, 255).round().to(torch.uint8)


class Learner:
    """The network being trained, its optimizer, and the two snapshots of it the rest of
    a run uses: the target network (reanalyze, refreshed every ``target_update_interval``
    steps) and the acting network (self-play, every ``selfplay_update_interval``).
    ``versions`` says at which training step each snapshot was taken."""

    def __init__(self, net: torch.nn.Module, config: Config, total_train_steps: int, device: torch.device):
        t = config.train
        self.net, self.config, self.total_train_steps, self.device = net.to(device), config, total_train_steps, device
        self.target_net = copy.deepcopy(self.net).eval()
        self.acting_net = copy.deepcopy(self.net).eval()
        self.versions = {"target": 0, "acting": 0}
        self.train_steps = 0
        if t.optimizer == "adam":
            self.optimizer = torch.optim.Adam(self.net.parameters(), lr=t.lr, weight_decay=t.weight_decay)
        else:
            self.optimizer = torch.optim.SGD(self.net.parameters(), lr=t.lr, momentum=t.momentum,
                                             weight_decay=t.weight_decay)
        # the network calls of a step, compiled or not (the snapshots above stay plain modules)
        calls = (self.net.initial_inference, self.net.recurrent_inference, self.net.project)
        if t.compile != "none":
            calls = tuple(torch.compile(call, mode=t.compile) for call in calls)
        self.model = ModelCalls(*calls, self.net.initial_lstm_state)
        self.generator = torch.Generator().manual_seed(config.seed)
        self.lstm_horizon = search_config(config).lstm_horizon
        self.loss = EfficientZeroLoss(t, self.net)
        self.model_gradient = ModelGradient(self.net, t.model_gradient_coef, search_config(config).discount,
                                            self.generator)

    def learning_rate(self, step: int) -> float:
        """Exponential decay from lr to lr_final over the run (the paper: 0.2 -> 0.02),
        times step / lr_warmup_steps during the warm-up."""
        t = self.config.train
        progress = min(step / max(self.total_train_steps, 1), 1.0)
        warmup = min(1.0, step / t.lr_warmup_steps) if t.lr_warmup_steps > 0 else 1.0
        return t.lr * (t.lr_final / t.lr) ** progress * warmup

    @property
    def q_scale(self) -> float | None:
        """train.model_gradient_coef: the running scale of Q (None: no batch yet)."""
        return self.model_gradient.q_scale

    def step(self, batch: Batch, targets: Targets, weights: np.ndarray) -> tuple[dict, np.ndarray]:
        """One optimizer step on ``batch`` with its ``targets`` and importance-sampling
        ``weights`` [B].  Returns (metrics, new priorities [B] = |v_0 - z_0|)."""
        t = self.config.train
        if not np.isfinite(targets.value).all():
            raise FloatingPointError(f"non-finite value target at training step {self.train_steps} "
                                     "(a search or a stored value returned NaN/inf)")
        self.net.train()
        # --- representation and unroll ---
        observations = self._observations(batch)
        if t.compile == "reduce-overhead":  # a new step: the CUDA graphs may reuse the last step's outputs
            torch.compiler.cudagraph_mark_step_begin()
        unrolled = unroll(self.model, observations, torch.as_tensor(batch.actions, device=self.device),
                          lstm_horizon=self.lstm_horizon, consistency=t.consistency)
        # --- losses ---
        terms = self.loss(unrolled, batch, targets)
        weights = torch.as_tensor(weights, device=self.device)
        loss = self.loss.total(terms, weights)
        # --- gradients; the step itself only once they are known to be finite ---
        lr = self.learning_rate(self.train_steps)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        model_metrics = self.model_gradient(unrolled, batch, weights) if t.model_gradient_coef > 0 else {}
        grad_norm = torch.nn.utils.clip_grad_norm_(self.net.parameters(), t.max_grad_norm)
        # One read of the device a step: the loss, the gradient norm, the logged terms and
        # the new priorities come back together (on a GPU every read waits for the queue).
        logged = self.loss.logged(terms, loss)
        priorities = self._priorities(unrolled, targets)
        host = torch.cat([torch.stack([loss.detach().float(), grad_norm.float()] +
                                      [value.float() for value in logged.values()]),
                          priorities.float()]).cpu().numpy()
        if not np.isfinite(host[0]):  # before the step: the weights stay good
            raise FloatingPointError(f"non-finite loss at training step {self.train_steps}: {host[0]}")
        if not np.isfinite(host[1]):
            raise FloatingPointError(f"non-finite gradient norm at training step {self.train_steps}")
        self.optimizer.step()
        # --- snapshots ---
        self.train_steps += 1
        self._refresh_snapshots()

        values = dict(zip(logged, host[2:2 + len(logged)].tolist()))
        metrics = {**self.loss.metrics(values), "grad_norm": float(host[1]), "lr": lr,
                   "target_value_mean": float(targets.value[:, 0].mean()),
                   "reanalyze_searches": targets.num_searches,  # roots this batch searched
                   "reanalyze_stored": targets.num_stored,  # targets it read from the buffer sweep's results
                   **self.loss.diagnostics(values), **model_metrics}
        return metrics, host[2 + len(logged):] + 1e-6

    def _observations(self, batch: Batch) -> torch.Tensor:
        """[B, K + 1, *obs_shape] o_t .. o_{t+K} on the device: stacked there (Atari copies 9
        frames a sample, not 24), pixels augmented, the normalizer's statistics updated."""
        frames = torch.as_tensor(batch.frames, device=self.device)
        if batch.frame_stack > 1:  # [B, K + S, C, ...] -> [B, K + 1, S * C, ...]: o_{t+u} is frames u .. u + S - 1
            windows = frames.unfold(1, batch.frame_stack, 1).movedim(-1, 2)
            frames = windows.reshape(windows.shape[:2] + (-1,) + windows.shape[4:])
        flat = self._augment(frames.reshape((-1,) + frames.shape[2:]))
        if self.net.normalizer is not None:  # running statistics of the states trained on
            self.net.normalizer.update(flat)
        return flat.reshape(frames.shape)

    def _augment(self, observations: torch.Tensor) -> torch.Tensor:
        """Pixels [N, C, H, W] uint8: shifted and jittered for the consistency branch; states as they are."""
        if observations.dtype == torch.uint8 and observations.dim() == 4:
            return augment(observations, self.generator)
        return observations

    def _priorities(self, unrolled: Unroll, targets: Targets) -> torch.Tensor:
        """[B] |v_0 - z_0| on the device: the network's root value against its target."""
        value_0 = support_to_scalar(unrolled.value_logits[0].detach(), *self.net.value_support)
        return (value_0 - torch.as_tensor(targets.value[:, 0], device=self.device)).abs()

    def _refresh_snapshots(self) -> None:
        t = self.config.train
        for kind, net, interval in (("acting", self.acting_net, t.selfplay_update_interval),
                                    ("target", self.target_net, t.target_update_interval)):
            if self.train_steps % interval == 0:
                net.load_state_dict(self.net.state_dict())
                self.versions[kind] = self.train_steps

    def weights(self, kind: str = "model") -> dict:
        """CPU copies of the weights of ``model`` (being trained), ``target`` or ``acting``."""
        net = {"model": self.net, "target": self.target_net, "acting": self.acting_net}[kind]
        return {name: value.detach().to("cpu", copy=True) for name, value in net.state_dict().items()}

    def state_dict(self) -> dict:
        return {"model": self.net.state_dict(), "target_model": self.target_net.state_dict(),
                "acting_model": self.acting_net.state_dict(), "optimizer": self.optimizer.state_dict(),
                "train_steps": self.train_steps, "versions": dict(self.versions),
                "generator": self.generator.get_state(), "q_scale": self.model_gradient.q_scale}

    def load_state_dict(self, state: dict) -> None:
        """Restores :meth:`state_dict`; :class:`RunError` when the weights do not fit."""
        try:
            self.net.load_state_dict(state["model"])
            self.target_net.load_state_dict(state["target_model"])
            self.acting_net.load_state_dict(state["acting_model"])
            self.optimizer.load_state_dict(state["optimizer"])
        except (RuntimeError, ValueError, KeyError) as error:
            detail = " ".join(str(error).split())
            raise RunError(f"the checkpoint's weights do not fit the network its config describes: "
                           f"{detail[:400]}") from None
        self.train_steps = int(state["train_steps"])
        self.versions = dict(state["versions"])
        self.generator.set_state(state["generator"])
        self.model_gradient.q_scale = state.get("q_scale")  # checkpoints before train.model_gradient_coef have none
