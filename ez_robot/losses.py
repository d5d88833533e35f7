"""EfficientZero's loss, as small units over one unroll of the model.

Per sample, with K unroll steps:
    L = L_0 + (1/K) sum_{k=1..K} L_k          (train.step_weights=muzero, the default)
    L = (1/K) sum_{k=0..K} L_k                (=paper: the appendix's equation, as its code)
    L_u = lambda_1 CE(pi_{t+u}, p_u) + lambda_2 CE(z_{t+u}, v_u)            (u = 0..K)
        + CE(value prefix_{t+u}, r_u) + lambda_3 (-cos(P(G^u(s)), sg(proj(H(o_{t+u})))))   (u >= 1)
weighted by the replay's importance-sampling weights.

:func:`unroll` runs the model along a batch (the gradient entering the dynamics is scaled
by 0.5 at each step).  Each unit (:class:`ValueLoss`, :class:`PolicyLoss`,
:class:`ValuePrefixLoss`, :class:`ConsistencyLoss`) maps the unroll, the batch and its
targets to named per-sample terms [B]; :class:`EfficientZeroLoss` gathers them into one
dict, from which the loss the optimizer minimizes (:meth:`EfficientZeroLoss.total`) and
the logged metrics (:meth:`EfficientZeroLoss.metrics`) are both built, by the table in
:mod:`ez_robot.loss_terms`.  :class:`ModelGradient` is the optional policy-improvement
term that reaches the policy head alone, through the model as its critic.
"""
from __future__ import annotations

import functools
import operator
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from ez_robot.batch import Batch
from ez_robot.errors import ConfigError
from ez_robot.loss_terms import DIAGNOSTICS, ROOT, TERMS, UNROLLED
from ez_robot.networks import scalar_to_support, scale_gradient, support_to_scalar
from ez_robot.targets import Targets
from ez_robot.torch_policies import gaussian_policy, policy_entropy, policy_log_prob

__all__ = ["ModelCalls", "Unroll", "unroll", "cross_entropy", "ValueLoss", "PolicyLoss", "ValuePrefixLoss",
           "ConsistencyLoss", "EfficientZeroLoss", "ModelGradient"]


# --- the unroll ---------------------------------------------------------------------------

class ModelCalls(NamedTuple):
    """The network calls an unroll makes (the learner's, ``torch.compile``d or not)."""

    initial: Callable
    """H and the heads: observations -> :class:`ez_robot.networks.InitialOutput`."""
    recurrent: Callable
    """G and the heads: (hidden, lstm_state, action) -> :class:`ez_robot.networks.RecurrentOutput`."""
    project: Callable
    """SimSiam's projection: (hidden, with_predictor) -> [B, projection_out]."""
    initial_lstm_state: Callable
    """(batch size, device) -> the value-prefix LSTM's zero state."""


@dataclass
class Unroll:
    """The model's predictions along one unroll of K steps; list index u = 0..K."""

    hidden: list[torch.Tensor] = field(default_factory=list)
    """K + 1 of [B, *hidden_shape]: s_0 = H(o_t), s_u = G(s_{u-1}, a_{t+u-1})."""
    value_logits: list[torch.Tensor] = field(default_factory=list)
    """K + 1 of [B, value bins]."""
    policy_logits: list[torch.Tensor] = field(default_factory=list)
    """K + 1 of [B, P]: policy-head outputs (joint: the A logits)."""
    value_prefix_logits: list[torch.Tensor] = field(default_factory=list)
    """K of [B, reward bins]: after the actions a_t .. a_{t+u-1}, u = 1..K."""
    projections: list[torch.Tensor] = field(default_factory=list)
    """K of [B, projection_out]: the predictor's P(proj(s_u)), u = 1..K (empty: no consistency)."""
    projection_targets: torch.Tensor | None = None
    """[B, K, projection_out] proj(H(o_{t+u})), u = 1..K, without gradient (None: no consistency)."""


def unroll(model: ModelCalls, observations: torch.Tensor, actions: torch.Tensor, *, lstm_horizon: int,
           consistency: bool) -> Unroll:
    """H on o_t, then K steps of G with the actions taken, each step's heads read off.

    ``observations`` [B, K + 1, *obs_shape] o_t .. o_{t+K}; ``actions`` [B, K] indices or
    [B, K, D] vectors.  The LSTM restarts every ``lstm_horizon`` steps, as in the search.
    With ``consistency`` the unroll also projects its hidden states and, without gradient,
    those of the real observations o_{t+1} .. o_{t+K}.  The network calls come in a fixed
    order (o_t, the consistency targets, then step by step), on which BatchNorm's running
    statistics and the rounding of the gradients depend."""
    batch, K = observations.shape[0], actions.shape[1]
    first = model.initial(observations[:, 0])
    out = Unroll([first.hidden], [first.value_logits], [first.policy_logits])
    hidden, lstm_state = first.hidden, model.initial_lstm_state(batch, device=observations.device)
    if consistency:
        with torch.no_grad():  # stop-gradient on the branch built from real observations
            targets = model.project(model.initial(observations[:, 1:].reshape((-1,) + observations.shape[2:])).hidden,
                                    with_predictor=False)
        out.projection_targets = targets.reshape(batch, K, -1)
    for k in range(1, K + 1):
        step = model.recurrent(scale_gradient(hidden, 0.5), lstm_state, actions[:, k - 1])
        hidden, lstm_state = step.hidden, step.lstm_state
        if k % lstm_horizon == 0:  # the LSTM restarts, as in the search
            lstm_state = tuple(torch.zeros_like(s) for s in lstm_state)
        out.hidden.append(hidden)
        out.value_logits.append(step.value_logits)
        out.policy_logits.append(step.policy_logits)
        out.value_prefix_logits.append(step.value_prefix_logits)
        if consistency:
            out.projections.append(model.project(hidden, with_predictor=True))
    return out


# --- the units ----------------------------------------------------------------------------

def cross_entropy(logits: torch.Tensor, target_probs: torch.Tensor) -> torch.Tensor:
    """[...] -sum_i p_i log softmax(logits)_i over the last axis."""
    return -(target_probs * F.log_softmax(logits, dim=-1)).sum(-1)


def _tensor(array: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(array, device=like.device)


class ValueLoss:
    """CE(z_{t+u}, v_u), u = 0..K: the value head's categorical prediction against the value
    target's (on the value support; masked where z is unknown)."""

    def __init__(self, support: tuple[int, int]):
        self.support = support

    def __call__(self, unrolled: Unroll, batch: Batch, targets: Targets) -> dict:
        like = unrolled.hidden[0]
        target, mask = _tensor(targets.value, like), _tensor(batch.mask_value, like)
        per_step = [cross_entropy(logits, scalar_to_support(target[:, u], *self.support)) * mask[:, u]
                    for u, logits in enumerate(unrolled.value_logits)]
        return {"value_loss": per_step[0], "unrolled_value_loss": sum(per_step[1:])}


class PolicyLoss:
    """CE(pi_{t+u}, p_u), u = 0..K: over the A actions (joint), or over the searched
    candidates (sampled modes: -sum_i pi'(a_i) log pi(a_i), minus ``train.entropy_coef`` x
    the policy's entropy, per ``train.entropy``).  ``train.policy_target=best`` puts all
    of the target's weight on its most likely action.  Sampled modes also give the root
    policy's entropy (``policy_entropy``, a diagnostic)."""

    def __init__(self, spec, train):
        self.spec, self.best = spec, train.policy_target == "best"
        self.entropy_coef, self.entropy = train.entropy_coef, train.entropy

    def __call__(self, unrolled: Unroll, batch: Batch, targets: Targets) -> dict:
        like = unrolled.hidden[0]
        target, mask = _tensor(targets.policy, like), _tensor(batch.mask_policy, like)
        if self.best:
            target = F.one_hot(target.argmax(-1), target.shape[-1]).to(target.dtype)
        candidates = None if targets.candidates is None else _tensor(targets.candidates, like)
        per_step = [self._cross_entropy(params, target[:, u], None if candidates is None else candidates[:, u])
                    * mask[:, u] for u, params in enumerate(unrolled.policy_logits)]
        terms = {"policy_loss": per_step[0], "unrolled_policy_loss": sum(per_step[1:])}
        if candidates is not None:
            terms["policy_entropy"] = policy_entropy(self.spec, unrolled.policy_logits[0].detach(), self.entropy)
        return terms

    def _cross_entropy(self, params: torch.Tensor, target: torch.Tensor, candidates: torch.Tensor | None):
        if candidates is None:
            return cross_entropy(params, target)
        log_pi = policy_log_prob(self.spec, params, candidates)
        return -(target * log_pi).sum(-1) - self.entropy_coef * policy_entropy(self.spec, params, self.entropy)


class ValuePrefixLoss:
    """CE(value prefix_{t+u}, r_u), u = 1..K: the value-prefix head (without the LSTM, the
    per-step reward head) against the reward sums since the LSTM's last restart."""

    def __init__(self, support: tuple[int, int]):
        self.support = support

    def __call__(self, unrolled: Unroll, batch: Batch, targets: Targets) -> dict:
        like = unrolled.hidden[0]
        target, mask = _tensor(batch.value_prefix_targets, like), _tensor(batch.mask_value_prefix, like)
        return {"value_prefix_loss": sum(cross_entropy(logits, scalar_to_support(target[:, u], *self.support))
                                         * mask[:, u] for u, logits in enumerate(unrolled.value_prefix_logits))}


class ConsistencyLoss:
    """-cos(P(proj(s_u)), sg(proj(H(o_{t+u})))), u = 1..K: SimSiam's temporal consistency
    between each unrolled hidden state and the real next observation's (``train.consistency``)."""

    def __call__(self, unrolled: Unroll, batch: Batch, targets: Targets) -> dict:
        mask = _tensor(batch.mask_consistency, unrolled.hidden[0])
        return {"consistency_loss": sum(
            -F.cosine_similarity(predicted, unrolled.projection_targets[:, u], dim=-1) * mask[:, u]
            for u, predicted in enumerate(unrolled.projections))}


# --- the loss -----------------------------------------------------------------------------

class EfficientZeroLoss:
    """The units a run's config switches on, and the one dict of terms they give: the loss
    the optimizer minimizes and the logged metrics both come from it."""

    def __init__(self, train, net: torch.nn.Module):
        self.train = train
        self.units = [ValueLoss(net.value_support), PolicyLoss(net.action_spec, train),
                      ValuePrefixLoss(net.reward_support)]
        if train.consistency:
            self.units.append(ConsistencyLoss())

    def __call__(self, unrolled: Unroll, batch: Batch, targets: Targets) -> dict:
        """{term name: [B] tensor} of every unit (:data:`ez_robot.loss_terms.TERMS` and
        :data:`ez_robot.loss_terms.DIAGNOSTICS`)."""
        terms = {}
        for unit in self.units:
            terms.update(unit(unrolled, batch, targets))
        return terms

    def total(self, terms: dict, weights: torch.Tensor) -> torch.Tensor:
        """(1/B) sum_b w_b L_b: the root step's terms with the step weights' root weight
        (``train.step_weights``), the unrolled steps' with 1/K, each times its coefficient."""
        K = self.train.unroll_steps
        root_weight = 1.0 / K if self.train.step_weights == "paper" else 1.0
        per_sample = root_weight * self._weighted_sum(terms, ROOT) + self._weighted_sum(terms, UNROLLED) / K
        return (weights * per_sample).mean()

    def _weighted_sum(self, terms: dict, steps: str) -> torch.Tensor:
        parts = [terms[term.name] if term.coef is None else term.coef(self.train) * terms[term.name]
                 for term in TERMS if term.steps == steps and term.name in terms]
        return functools.reduce(operator.add, parts)

    def logged(self, terms: dict, loss: torch.Tensor) -> dict:
        """The logged numbers as 0-dim tensors on the loss's device, not yet read: the
        total, each logged term's batch mean per step (:data:`ez_robot.loss_terms.LOSSES`)
        and the diagnostics' batch means.  The learner reads them with the rest of its step
        in one transfer."""
        K = self.train.unroll_steps
        logged = {"loss": loss.detach()}
        for term in (term for term in TERMS if term.logged and term.name in terms):
            logged[term.name] = (terms[term.name] if term.steps == ROOT else terms[term.name] / K).detach().mean()
        logged.update({name: terms[name].detach().mean() for name in DIAGNOSTICS if name in terms})
        return logged

    def metrics(self, values: dict) -> dict:
        """The logged loss metrics from :meth:`logged`'s numbers, read: a term switched off
        (``train.consistency``) logs 0, so that every run logs the same metrics."""
        return {"loss": values["loss"], **{term.name: values.get(term.name, 0.0) for term in TERMS if term.logged}}

    @staticmethod
    def diagnostics(values: dict) -> dict:
        """The diagnostic terms' batch means among :meth:`logged`'s numbers (not part of the loss)."""
        return {name: values[name] for name in DIAGNOSTICS if name in values}


class ModelGradient:
    """``train.model_gradient_coef``: adds the gradient of -coef E[w Q(s, a)] / S, a the
    policy's reparameterized draw at the unroll's (detached) hidden states s, to the policy
    head's gradients alone.  Q = r + gamma V(g(s, a)) is read off the network in eval mode
    (BatchNorm's running statistics, as the search reads it): the model is the critic here,
    not trained.  S, the running scale of Q (:attr:`q_scale`), is part of a checkpoint."""

    def __init__(self, net: torch.nn.Module, coef: float, discount: float, generator: torch.Generator):
        if coef > 0 and net.action_spec.mode != "gaussian":
            raise ConfigError(f"train.model_gradient_coef needs the gaussian action mode, not {net.action_spec.mode}")
        self.net, self.coef, self.discount, self.generator = net, coef, discount, generator
        self.q_scale: float | None = None  # None: no batch yet

    def __call__(self, unrolled: Unroll, batch: Batch, weights: torch.Tensor) -> dict:
        """Adds the term's gradient (after the loss's backward pass) and returns its metrics."""
        net = self.net
        hidden = torch.cat(unrolled.hidden).detach()  # [(K + 1) B, ...], step-major
        mask = _tensor(batch.mask_policy, weights)
        weights = weights.repeat(len(unrolled.hidden)) * mask.T.reshape(-1)
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
        q = reward + self.discount * support_to_scalar(step.value_logits, *net.value_support)
        with torch.no_grad():
            spread = float(torch.quantile(q.detach().float(), 0.95) - torch.quantile(q.detach().float(), 0.05))
            self.q_scale = spread if self.q_scale is None else 0.99 * self.q_scale + 0.01 * spread
        scale = max(self.q_scale, 1.0)
        objective = -(weights * q).sum() / (scale * max(float(weights.sum()), 1.0))
        grads = torch.autograd.grad(self.coef * objective, head)
        # how much of the policy head's gradient is this term's (the rest: the search's targets)
        own = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        rest = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in head
                                                     if p.grad is not None] or [own.new_zeros(())]))
        for param, grad in zip(head, grads):
            param.grad = grad if param.grad is None else param.grad + grad
        return {"model_q": float(q.detach().mean()), "model_q_scale": scale,
                "model_gradient_share": float(own / (own + rest + 1e-12))}
