"""The learner: EfficientZero's loss and one SGD step.

Per sample, with K unroll steps:
    L = L_0 + (1/K) sum_{k=1..K} L_k          (train.step_weights=muzero, the default)
    L = (1/K) sum_{k=0..K} L_k                (=paper: the appendix's equation, as its code)
    L_u = lambda_1 CE(pi_{t+u}, p_u) + lambda_2 CE(z_{t+u}, v_u)            (u = 0..K)
        + CE(value prefix_{t+u}, r_u) + lambda_3 (-cos(P(G^u(s)), sg(proj(H(o_{t+u})))))   (u >= 1)
weighted by the replay's importance-sampling weights.  The gradient entering the
dynamics is scaled by 0.5 at each step; the gradient norm is clipped to 5.
"""
from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn.functional as F

from ez_robot.config import Config, search_config
from ez_robot.errors import ConfigError, RunError
from ez_robot.networks import (gaussian_policy, policy_entropy, policy_log_prob, scalar_to_support, scale_gradient,
                               support_to_scalar)
from ez_robot.batch import Batch
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
        self._initial, self._recurrent, self._project = calls
        self.generator = torch.Generator().manual_seed(config.seed)
        self.lstm_horizon = search_config(config).lstm_horizon
        if t.model_gradient_coef > 0 and net.action_spec.mode != "gaussian":
            raise ConfigError(f"train.model_gradient_coef needs the gaussian action mode, not {net.action_spec.mode}")
        self.q_scale: float | None = None  # train.model_gradient_coef: the running scale of Q (None: no batch yet)

    def learning_rate(self, step: int) -> float:
        """Exponential decay from lr to lr_final over the run (the paper: 0.2 -> 0.02)."""
        t = self.config.train
        progress = min(step / max(self.total_train_steps, 1), 1.0)
        return t.lr * (t.lr_final / t.lr) ** progress

    def _observations(self, obs: np.ndarray) -> torch.Tensor:
        x = torch.as_tensor(obs, device=self.device)
        if x.dtype == torch.uint8 and x.dim() == 4:  # pixels: augment for the consistency branch
            x = augment(x, self.generator)
        return x

    def step(self, context: Batch, targets: Targets, weights: np.ndarray) -> tuple[dict, np.ndarray]:
        """One optimizer step.  Returns (metrics, new priorities [B] = |v_0 - z_0|)."""
        t, net, dev = self.config.train, self.net, self.device
        if not np.isfinite(targets.value).all():
            raise FloatingPointError(f"non-finite value target at training step {self.train_steps} "
                                     "(a search or a stored value returned NaN/inf)")
        K, S = t.unroll_steps, net.value_support
        net.train()
        obs = torch.as_tensor(context.frames, device=dev)  # stacked on the device: Atari copies 9 frames, not 24
        if context.frame_stack > 1:  # [B, K + S, C, ...] -> [B, K + 1, S * C, ...]: o_{t+u} is frames u .. u + S - 1
            windows = obs.unfold(1, context.frame_stack, 1).movedim(-1, 2)
            obs = windows.reshape(windows.shape[:2] + (-1,) + windows.shape[4:])
        batch = obs.shape[0]
        flat = self._observations(obs.reshape((-1,) + obs.shape[2:]))
        if net.normalizer is not None:  # running statistics of the states trained on
            net.normalizer.update(flat)
        obs = flat.reshape(obs.shape)
        actions = torch.as_tensor(context.actions, device=dev)
        value_target = torch.as_tensor(targets.value, device=dev)
        policy_target = torch.as_tensor(targets.policy, device=dev)
        vp_target = torch.as_tensor(context.value_prefix_targets, device=dev)
        mask_policy = torch.as_tensor(context.mask_policy, device=dev)
        mask_value = torch.as_tensor(context.mask_value, device=dev)
        mask_vp = torch.as_tensor(context.mask_value_prefix, device=dev)
        mask_cons = torch.as_tensor(context.mask_consistency, device=dev)
        w = torch.as_tensor(weights, device=dev)

        def ce(logits, target_probs):
            return -(target_probs * F.log_softmax(logits, dim=-1)).sum(-1)

        spec = net.action_spec
        squashed = t.entropy == "squashed"
        candidates = None if targets.candidates is None else torch.as_tensor(targets.candidates, device=dev)
        if t.policy_target == "best":  # all the weight on the target's most likely action
            policy_target = F.one_hot(policy_target.argmax(-1), policy_target.shape[-1]).to(policy_target.dtype)

        def policy_ce(params, u):
            """Cross-entropy of the policy target at unroll step u: over the A actions
            (joint), or over the searched candidates (sampled: -sum_i pi'(a_i) log pi(a_i)),
            minus the entropy bonus."""
            if candidates is None:
                return ce(params, policy_target[:, u])
            log_pi = policy_log_prob(spec, params, candidates[:, u])
            return -(policy_target[:, u] * log_pi).sum(-1) - t.entropy_coef * policy_entropy(spec, params, squashed)

        # --- step 0: representation and prediction ---
        if t.compile == "reduce-overhead":  # a new step: the CUDA graphs may reuse the last step's outputs
            torch.compiler.cudagraph_mark_step_begin()
        out = self._initial(obs[:, 0])
        value_0 = support_to_scalar(out.value_logits.detach(), *S)
        value_loss = ce(out.value_logits, scalar_to_support(value_target[:, 0], *S)) * mask_value[:, 0]
        policy_loss = policy_ce(out.policy_logits, 0) * mask_policy[:, 0]
        vp_loss = torch.zeros(batch, device=dev)
        consistency_loss = torch.zeros(batch, device=dev)
        unroll_value, unroll_policy = torch.zeros(batch, device=dev), torch.zeros(batch, device=dev)

        # --- unroll the dynamics K steps ---
        hidden, lstm_state = out.hidden, net.initial_lstm_state(batch, device=dev)
        hiddens = [hidden]
        if t.consistency:
            with torch.no_grad():  # stop-gradient on the branch built from real observations
                targets_proj = self._project(self._initial(
                    obs[:, 1:].reshape((-1,) + obs.shape[2:])).hidden, with_predictor=False)
                targets_proj = targets_proj.reshape(batch, K, -1)
        for k in range(1, K + 1):
            step = self._recurrent(scale_gradient(hidden, 0.5), lstm_state, actions[:, k - 1])
            hidden, lstm_state = step.hidden, step.lstm_state
            hiddens.append(hidden)
            if k % self.lstm_horizon == 0:  # the LSTM restarts, as in the search
                lstm_state = tuple(torch.zeros_like(s) for s in lstm_state)
            vp_loss = vp_loss + ce(step.value_prefix_logits, scalar_to_support(vp_target[:, k - 1], *net.reward_support)) * mask_vp[:, k - 1]
            unroll_value = unroll_value + ce(step.value_logits, scalar_to_support(value_target[:, k], *S)) * mask_value[:, k]
            unroll_policy = unroll_policy + policy_ce(step.policy_logits, k) * mask_policy[:, k]
            if t.consistency:
                predicted = self._project(hidden, with_predictor=True)
                cosine = F.cosine_similarity(predicted, targets_proj[:, k - 1], dim=-1)
                consistency_loss = consistency_loss - cosine * mask_cons[:, k - 1]

        root_weight = 1.0 / K if t.step_weights == "paper" else 1.0  # the root step's value and policy terms
        per_sample = (root_weight * (t.value_loss_coef * value_loss + t.policy_loss_coef * policy_loss)
                      + (vp_loss + t.value_loss_coef * unroll_value + t.policy_loss_coef * unroll_policy
                         + t.consistency_loss_coef * consistency_loss) / K)
        loss = (w * per_sample).mean()
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite loss at training step {self.train_steps}: {loss.item()}")

        lr = self.learning_rate(self.train_steps)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if t.model_gradient_coef > 0:
            metrics_q = self._model_gradient(torch.cat(hiddens).detach(), w.repeat(K + 1) * mask_policy.T.reshape(-1))
        grad_norm = torch.nn.utils.clip_grad_norm_(net.parameters(), t.max_grad_norm)
        if not torch.isfinite(grad_norm):  # checked before the step: the weights stay good
            raise FloatingPointError(f"non-finite gradient norm at training step {self.train_steps}")
        self.optimizer.step()
        self.train_steps += 1
        self._refresh_snapshots()

        priorities = (value_0 - value_target[:, 0]).abs().cpu().numpy() + 1e-6
        metrics = {
            "loss": loss.item(),
            "value_loss": value_loss.mean().item(),
            "policy_loss": policy_loss.mean().item(),
            "value_prefix_loss": (vp_loss / K).mean().item(),
            "consistency_loss": (consistency_loss / K).mean().item(),
            "grad_norm": float(grad_norm),
            "lr": lr,
            "target_value_mean": float(targets.value[:, 0].mean()),
            "reanalyze_searches": targets.num_searches,  # roots this batch searched
            "reanalyze_stored": targets.num_stored,  # targets it read from the buffer sweep's results
        }
        if candidates is not None:  # sampled modes: how wide the policy is (the Gaussian's per train.entropy)
            metrics["policy_entropy"] = policy_entropy(spec, out.policy_logits.detach(), squashed).mean().item()
        if t.model_gradient_coef > 0:
            metrics.update(metrics_q)
        return metrics, priorities

    def _model_gradient(self, hidden: torch.Tensor, weights: torch.Tensor) -> dict:
        """train.model_gradient_coef: adds the gradient of -coef E[w Q(s, a)] / S, a the policy's
        reparameterized draw at the (detached) hidden states s, to the policy head's gradients
        alone.  Q = r + gamma V(g(s, a)) is read off the network in eval mode (BatchNorm's
        running statistics, as the search reads it): the model is the critic here, not trained."""
        net, t = self.net, self.config.train
        head = list(net.policy_head.parameters())
        mean, std = gaussian_policy(net.policy_head(hidden), net.action_spec.dims)
        noise = torch.randn(mean.shape, generator=self.generator).to(mean.device)
        action = torch.tanh(mean + std * noise)
        net.eval()
        try:
            step = net.recurrent_inference(hidden, net.initial_lstm_state(len(hidden), device=hidden.device), action)
        finally:
            net.train()
        # a fresh LSTM's first value prefix is the first reward, as with the per-step head
        reward = support_to_scalar(step.value_prefix_logits, *net.reward_support)
        q = reward + search_config(self.config).discount * support_to_scalar(step.value_logits, *net.value_support)
        with torch.no_grad():
            spread = float(torch.quantile(q.detach().float(), 0.95) - torch.quantile(q.detach().float(), 0.05))
            self.q_scale = spread if self.q_scale is None else 0.99 * self.q_scale + 0.01 * spread
        scale = max(self.q_scale, 1.0)
        objective = -(weights * q).sum() / (scale * max(float(weights.sum()), 1.0))
        grads = torch.autograd.grad(t.model_gradient_coef * objective, head)
        # how much of the policy head's gradient is this term's (the rest: the search's targets)
        own = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        rest = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in head
                                                     if p.grad is not None] or [own.new_zeros(())]))
        for param, grad in zip(head, grads):
            param.grad = grad if param.grad is None else param.grad + grad
        return {"model_q": float(q.detach().mean()), "model_q_scale": scale,
                "model_gradient_share": float(own / (own + rest + 1e-12))}

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
                "generator": self.generator.get_state(), "q_scale": self.q_scale}

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
        self.q_scale = state.get("q_scale")  # checkpoints before train.model_gradient_coef have none
