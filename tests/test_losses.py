"""The loss units against hand-computed values on a tiny batch, the total against the
weighted sum of its terms, and the unroll's order, LSTM restarts and gradient scaling."""
import dataclasses
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from ez_robot.action_modes import ActionSpec
from ez_robot.batch import Batch
from ez_robot.config import load_config
from ez_robot.errors import ConfigError
from ez_robot.loss_terms import DIAGNOSTICS, LOSSES, TERMS
from ez_robot.losses import EfficientZeroLoss, ModelCalls, ModelGradient, Unroll, unroll
from ez_robot.networks import InitialOutput, RecurrentOutput
from ez_robot.targets import Targets

B, K, A, SUPPORT = 2, 2, 3, (2, 1)  # 5 bins: -2..2


def train_config(**changes):
    train = load_config("gym:CartPole-v1").train
    return dataclasses.replace(train, unroll_steps=K, value_loss_coef=0.25, policy_loss_coef=1.0,
                               consistency_loss_coef=2.0, **changes)


def fake_net(spec=ActionSpec("joint", num_actions=A)):
    return SimpleNamespace(value_support=SUPPORT, reward_support=SUPPORT, action_spec=spec)


def tiny_batch(policy_size=A):
    zeros = lambda *shape: np.zeros(shape, np.float32)
    return Batch(
        frames=zeros(B, K + 1, 1), actions=np.zeros((B, K), np.int64),
        value_prefix_targets=np.array([[1.0, 3.0], [0.0, -1.0]], np.float32),
        value_partial=zeros(B, K + 1), bootstrap_discount=zeros(B, K + 1),
        bootstrap_index=np.full((B, K + 1), -1), stored_bootstrap_values=zeros(B, K + 1),
        stored_policies=zeros(B, K + 1, policy_size),
        mask_policy=np.array([[1, 1, 1], [1, 1, 0]], np.float32),
        mask_value=np.array([[1, 1, 0], [1, 0, 1]], np.float32),
        mask_value_prefix=np.array([[1, 1], [1, 0]], np.float32),
        mask_consistency=np.array([[1, 0], [1, 1]], np.float32),
        searched_values=zeros(B, K + 1), value_fresh=np.zeros((B, K + 1), bool),
        searched_policies=zeros(B, K + 1, policy_size), policy_fresh=np.zeros((B, K + 1), bool))


def tiny_targets(policy_size=A, candidates=None):
    rng = np.random.default_rng(0)
    return Targets(value=np.array([[0.0, 3.0, 8.0], [-3.0, 0.5, 1.0]], np.float32),
                   policy=rng.dirichlet(np.ones(policy_size), size=(B, K + 1)).astype(np.float32),
                   searched_policy=np.ones(B, bool), num_searches=0, candidates=candidates)


def tiny_unroll(policy_size=A, seed=0):
    generator = torch.Generator().manual_seed(seed)
    logits = lambda *shape: torch.randn(*shape, generator=generator).requires_grad_()
    return Unroll(hidden=[torch.zeros(B, 1) for _ in range(K + 1)],
                  value_logits=[logits(B, 5) for _ in range(K + 1)],
                  policy_logits=[logits(B, policy_size) for _ in range(K + 1)],
                  value_prefix_logits=[logits(B, 5) for _ in range(K)],
                  projections=[logits(B, 4) for _ in range(K)],
                  projection_targets=torch.randn(B, K, 4, generator=generator))


# --- by hand, in float64 -------------------------------------------------------------------

def two_hot(x: float) -> np.ndarray:
    """The 5-bin support's target of a scalar: h(x) split between its two nearest bins."""
    h = math.copysign(math.sqrt(abs(x) + 1) - 1, x) + 0.001 * x
    h = min(max(h, -2.0), 2.0)
    low = math.floor(h)
    out = np.zeros(5)
    out[low + 2] += 1 - (h - low)
    out[min(low + 3, 4)] += h - low
    return out


def log_softmax(x) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return x - x.max() - np.log(np.exp(x - x.max()).sum())


def numpy_of(tensors) -> np.ndarray:
    return np.stack([t.detach().double().numpy() for t in tensors], axis=1)  # [B, steps, ...]


def by_hand(unrolled: Unroll, batch: Batch, targets: Targets, policy_targets=None) -> dict:
    """Every term of the joint mode, one sample and one step at a time."""
    value, policy, prefix = (numpy_of(unrolled.value_logits), numpy_of(unrolled.policy_logits),
                             numpy_of(unrolled.value_prefix_logits))
    predicted, projected = numpy_of(unrolled.projections), unrolled.projection_targets.double().numpy()
    policy_targets = targets.policy if policy_targets is None else policy_targets
    terms = {name: np.zeros(B) for name in ("value_loss", "unrolled_value_loss", "policy_loss",
                                             "unrolled_policy_loss", "value_prefix_loss", "consistency_loss")}
    for b in range(B):
        for u in range(K + 1):
            root = "" if u == 0 else "unrolled_"
            terms[root + "value_loss"][b] += -(two_hot(targets.value[b, u]) * log_softmax(value[b, u])).sum() \
                * batch.mask_value[b, u]
            terms[root + "policy_loss"][b] += -(policy_targets[b, u] * log_softmax(policy[b, u])).sum() \
                * batch.mask_policy[b, u]
        for u in range(K):
            terms["value_prefix_loss"][b] += -(two_hot(batch.value_prefix_targets[b, u])
                                               * log_softmax(prefix[b, u])).sum() * batch.mask_value_prefix[b, u]
            p, z = predicted[b, u], projected[b, u]
            terms["consistency_loss"][b] -= p @ z / (np.linalg.norm(p) * np.linalg.norm(z)) \
                * batch.mask_consistency[b, u]
    return terms


# --- the units -----------------------------------------------------------------------------

def test_each_term_is_its_hand_computed_value():
    unrolled, batch, targets = tiny_unroll(), tiny_batch(), tiny_targets()
    terms = EfficientZeroLoss(train_config(), fake_net())(unrolled, batch, targets)
    expected = by_hand(unrolled, batch, targets)
    assert set(terms) == set(expected)
    for name, value in expected.items():
        np.testing.assert_allclose(terms[name].detach().double().numpy(), value, rtol=1e-5, err_msg=name)
    # a masked cell adds nothing: sample 1's unrolled value term is its step 2 alone
    assert batch.mask_value[1, 1] == 0 and expected["unrolled_value_loss"][1] > 0


def test_policy_target_best_trains_towards_a_one_hot_of_the_target():
    unrolled, batch, targets = tiny_unroll(), tiny_batch(), tiny_targets()
    terms = EfficientZeroLoss(train_config(policy_target="best"), fake_net())(unrolled, batch, targets)
    one_hot = np.eye(A)[targets.policy.argmax(-1)]
    expected = by_hand(unrolled, batch, targets, policy_targets=one_hot)
    for name in ("policy_loss", "unrolled_policy_loss"):
        np.testing.assert_allclose(terms[name].detach().numpy(), expected[name], rtol=1e-5)


def test_the_gaussian_policy_term_is_the_candidates_cross_entropy_minus_the_entropy_bonus():
    spec, C = ActionSpec("gaussian", dims=2), 3
    rng = np.random.default_rng(1)
    candidates = np.tanh(rng.normal(size=(B, K + 1, C, spec.dims))).astype(np.float32)
    unrolled, batch, targets = tiny_unroll(policy_size=4), tiny_batch(C), tiny_targets(C, candidates)
    train = train_config(entropy_coef=0.1)
    terms = EfficientZeroLoss(train, fake_net(spec))(unrolled, batch, targets)
    params = numpy_of(unrolled.policy_logits)  # [B, K + 1, 2D]

    def log_pi(p, actions):  # log N(atanh a; mean, std) - log(1 - a^2), summed over the dimensions
        mean, std = 5 * np.tanh(p[:2] / 5), np.log1p(np.exp(p[2:] + 1)) + 0.1
        pre = np.arctanh(actions.astype(np.float64))
        return (-0.5 * ((pre - mean) / std) ** 2 - np.log(std) - 0.5 * math.log(2 * math.pi)
                - np.log(1 - actions.astype(np.float64) ** 2)).sum(-1)

    def entropy(p):  # the pre-squash Gaussian's
        std = np.log1p(np.exp(p[2:] + 1)) + 0.1
        return (np.log(std) + 0.5 * (1 + math.log(2 * math.pi))).sum()

    expected = np.zeros((B, K + 1))
    for b in range(B):
        for u in range(K + 1):
            cross = -(targets.policy[b, u] * log_pi(params[b, u], candidates[b, u])).sum()
            expected[b, u] = (cross - 0.1 * entropy(params[b, u])) * batch.mask_policy[b, u]
    np.testing.assert_allclose(terms["policy_loss"].detach().numpy(), expected[:, 0], rtol=1e-5)
    np.testing.assert_allclose(terms["unrolled_policy_loss"].detach().numpy(), expected[:, 1:].sum(1), rtol=1e-5)
    np.testing.assert_allclose(terms["policy_entropy"].numpy(), [entropy(params[b, 0]) for b in range(B)], rtol=1e-5)
    assert not terms["policy_entropy"].requires_grad  # a diagnostic, not part of the loss


# --- the total and the metrics -------------------------------------------------------------

WEIGHTS = torch.tensor([0.5, 1.5])


def weighted(terms: dict, name: str) -> float:
    return float((WEIGHTS.double() * terms[name].detach().double()).mean())


def test_the_total_is_the_weighted_sum_of_the_terms():
    unrolled, batch, targets = tiny_unroll(), tiny_batch(), tiny_targets()
    train = train_config()
    loss = EfficientZeroLoss(train, fake_net())
    terms = loss(unrolled, batch, targets)
    expected = (0.25 * weighted(terms, "value_loss") + 1.0 * weighted(terms, "policy_loss")
                + (weighted(terms, "value_prefix_loss") + 0.25 * weighted(terms, "unrolled_value_loss")
                   + 1.0 * weighted(terms, "unrolled_policy_loss") + 2.0 * weighted(terms, "consistency_loss")) / K)
    total = loss.total(terms, WEIGHTS)
    assert total.item() == pytest.approx(expected, rel=1e-6)
    total.backward()  # every logit the loss reads gets a gradient
    assert all(t.grad is not None for t in unrolled.value_logits + unrolled.policy_logits + unrolled.projections)


def test_paper_step_weights_take_the_root_terms_at_1_over_k():
    unrolled, batch, targets = tiny_unroll(), tiny_batch(), tiny_targets()
    muzero, paper = (EfficientZeroLoss(train_config(step_weights=w), fake_net()) for w in ("muzero", "paper"))
    terms = muzero(unrolled, batch, targets)
    root = 0.25 * weighted(terms, "value_loss") + 1.0 * weighted(terms, "policy_loss")
    difference = muzero.total(terms, WEIGHTS).item() - paper.total(terms, WEIGHTS).item()
    assert difference == pytest.approx((1 - 1 / K) * root, rel=1e-5)
    # the paper's L = (1/K) sum_{k=0..K} L_k: every step's terms at 1/K
    every_step = (root + weighted(terms, "value_prefix_loss") + 0.25 * weighted(terms, "unrolled_value_loss")
                  + weighted(terms, "unrolled_policy_loss") + 2.0 * weighted(terms, "consistency_loss")) / K
    assert paper.total(terms, WEIGHTS).item() == pytest.approx(every_step, rel=1e-6)


def test_consistency_off_removes_exactly_that_term():
    unrolled, batch, targets = tiny_unroll(), tiny_batch(), tiny_targets()
    on, off = (EfficientZeroLoss(train_config(consistency=c), fake_net()) for c in (True, False))
    terms_on, terms_off = on(unrolled, batch, targets), off(unrolled, batch, targets)
    assert set(terms_on) - set(terms_off) == {"consistency_loss"}
    for name, value in terms_off.items():
        assert torch.equal(value, terms_on[name]), name
    removed = 2.0 * weighted(terms_on, "consistency_loss") / K
    assert removed != 0
    difference = on.total(terms_on, WEIGHTS).item() - off.total(terms_off, WEIGHTS).item()
    assert difference == pytest.approx(removed, abs=1e-6)  # float32 totals of about 1
    metrics = off.metrics({k: v.item() for k, v in off.logged(terms_off, off.total(terms_off, WEIGHTS)).items()})
    assert metrics["consistency_loss"] == 0.0  # every run logs the same metrics


def test_the_metrics_are_the_logged_terms_per_step():
    unrolled, batch, targets = tiny_unroll(), tiny_batch(), tiny_targets()
    loss = EfficientZeroLoss(train_config(), fake_net())
    terms = loss(unrolled, batch, targets)
    total = loss.total(terms, WEIGHTS)
    values = {name: value.item() for name, value in loss.logged(terms, total).items()}
    metrics = loss.metrics(values)
    assert tuple(metrics) == LOSSES
    assert metrics["loss"] == total.item()
    assert metrics["value_loss"] == pytest.approx(terms["value_loss"].mean().item())  # the root step's
    assert metrics["value_prefix_loss"] == pytest.approx(terms["value_prefix_loss"].mean().item() / K)  # per step
    assert loss.diagnostics(values) == {}  # joint mode: no policy entropy


def test_the_table_names_every_term_and_the_logged_metrics_keep_their_names():
    names = {term.name for term in TERMS}
    assert len(names) == len(TERMS) and not names & set(DIAGNOSTICS)
    # the names are a file format: metrics.jsonl of every run, and the report's plots
    assert LOSSES == ("loss", "value_loss", "policy_loss", "value_prefix_loss", "consistency_loss")
    train = train_config()
    assert all(term.coef is None or term.coef(train) >= 0 for term in TERMS)
    spec = ActionSpec("gaussian", dims=2)
    candidates = np.zeros((B, K + 1, 3, 2), np.float32)
    terms = EfficientZeroLoss(train, fake_net(spec))(tiny_unroll(4), tiny_batch(3), tiny_targets(3, candidates))
    assert set(terms) <= names | set(DIAGNOSTICS) and "policy_entropy" in terms


def test_the_model_gradient_needs_the_gaussian_mode():
    with pytest.raises(ConfigError, match="model_gradient_coef needs the gaussian action mode"):
        ModelGradient(fake_net(), 1.0, 0.99, torch.Generator())
    ModelGradient(fake_net(), 0.0, 0.99, torch.Generator())  # off: any mode


# --- the unroll ----------------------------------------------------------------------------

class RecordingModel:
    """A model whose hidden state is the observation times ``gain``, whose dynamics add the
    action, and whose LSTM counts its steps; it records every call."""

    def __init__(self):
        self.gain = torch.tensor(3.0, requires_grad=True)
        self.calls, self.lstm_inputs = [], []

    def initial(self, obs):
        self.calls.append(("initial", len(obs)))
        hidden = obs * self.gain
        return InitialOutput(hidden, hidden.sum(-1, keepdim=True), hidden)

    def recurrent(self, hidden, lstm_state, action):
        self.calls.append(("recurrent", len(hidden)))
        self.lstm_inputs.append(lstm_state[0].clone())
        next_hidden = hidden + action[:, None]
        step_state = (lstm_state[0] + 1, lstm_state[1] + 1)
        return RecurrentOutput(next_hidden, step_state, next_hidden, next_hidden, next_hidden)

    def project(self, hidden, with_predictor):
        self.calls.append(("project", with_predictor))
        return hidden * (2.0 if with_predictor else 1.0)

    def calls_of(self):
        return ModelCalls(self.initial, self.recurrent, self.project,
                          lambda batch, device=None: (torch.zeros(batch, 1), torch.zeros(batch, 1)))


def test_the_unroll_calls_the_model_in_order_and_restarts_the_lstm():
    model, steps = RecordingModel(), 3
    observations = torch.arange(2 * (steps + 1) * 2, dtype=torch.float32).reshape(2, steps + 1, 2)
    actions = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 1.0]])
    out = unroll(model.calls_of(), observations, actions, lstm_horizon=2, consistency=True)
    assert model.calls == [("initial", 2), ("initial", 2 * steps), ("project", False),
                           ("recurrent", 2), ("project", True), ("recurrent", 2), ("project", True),
                           ("recurrent", 2), ("project", True)]
    # the LSTM state after 1 and 2 steps, then a restart after step 2 (lstm_horizon)
    assert [float(s[0, 0]) for s in model.lstm_inputs] == [0.0, 1.0, 0.0]
    assert len(out.hidden) == len(out.value_logits) == len(out.policy_logits) == steps + 1
    assert len(out.value_prefix_logits) == len(out.projections) == steps
    # s_u = 3 o_t + a_t + ... + a_{t+u-1}
    expected = 3.0 * observations[:, 0] + torch.cumsum(actions, 1)[:, -1:]
    torch.testing.assert_close(out.hidden[-1], expected)
    # the consistency targets are the real observations', with no gradient
    assert not out.projection_targets.requires_grad
    torch.testing.assert_close(out.projection_targets, 3.0 * observations[:, 1:])


def test_the_gradient_entering_the_dynamics_is_halved_at_each_step():
    model, steps = RecordingModel(), 3
    observations = torch.ones(2, steps + 1, 2)
    out = unroll(model.calls_of(), observations, torch.zeros(2, steps), lstm_horizon=5, consistency=False)
    assert out.projections == [] and out.projection_targets is None
    (gain_grad,) = torch.autograd.grad(out.hidden[-1].sum(), model.gain)
    # d s_K / d gain = o_t through K halvings: 4 observation entries x 0.5^K
    assert gain_grad.item() == pytest.approx(4 * 0.5 ** steps)
