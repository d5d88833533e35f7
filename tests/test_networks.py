"""Value transform, supports, and the networks' interface and initialization."""
import dataclasses

import numpy as np
import pytest
import torch

from ez_robot.config import ModelConfig
from ez_robot.networks import (inverse_value_transform, make_network, scalar_to_support, scale_gradient,
                               support_to_scalar, value_transform)

SMALL = ModelConfig(latent_dim=16, mlp_hidden=32, lstm_hidden=16, head_hidden=16, support_size=20,
                    projection_hidden=32, projection_out=24)


def test_value_transform_round_trip():
    x = torch.cat([torch.linspace(-1e4, 1e4, 2001), torch.linspace(-3, 3, 601)]).double()
    np.testing.assert_allclose(inverse_value_transform(value_transform(x)).numpy(), x.numpy(), rtol=1e-6, atol=1e-6)
    assert value_transform(torch.tensor(0.0)) == 0
    assert (value_transform(x.sort().values).diff() > 0).all()  # strictly increasing


def test_support_round_trip_and_two_hot():
    x = torch.tensor([-1000.0, -37.5, -1.0, 0.0, 0.3, 2.0, 99.0, 1000.0], dtype=torch.float64)
    probs = scalar_to_support(x, 300)
    assert probs.shape == (8, 601)
    np.testing.assert_allclose(probs.sum(-1).numpy(), 1.0)
    assert ((probs > 0).sum(-1) <= 2).all()
    back = support_to_scalar(torch.log(probs + 1e-30), 300)
    np.testing.assert_allclose(back.numpy(), x.numpy(), rtol=1e-3, atol=1e-3)
    # beyond the support: clipped to the edge bin
    edge = scalar_to_support(torch.tensor([1e9, -1e9]), 5)
    assert edge[0, -1] == 1 and edge[1, 0] == 1


def test_a_finer_support_resolves_what_integer_bins_round():
    x = torch.tensor([0.0, 0.9, 1.0, 7.3, 40.0, -2.5], dtype=torch.float64)
    probs = scalar_to_support(x, 6, scale=10)
    assert probs.shape == (6, 121) and ((probs > 0).sum(-1) <= 2).all()
    np.testing.assert_allclose(probs.sum(-1).numpy(), 1.0)
    bins = torch.arange(-60, 61, dtype=torch.float64) / 10
    np.testing.assert_allclose((probs * bins).sum(-1).numpy(), value_transform(x).numpy(), atol=1e-9)
    np.testing.assert_allclose(support_to_scalar(torch.log(probs + 1e-30), 6, scale=10).numpy(), x.numpy(),
                               rtol=1e-3, atol=1e-3)
    # the bins are tenths of h: a one-hot on the fifth bin above zero decodes to h^-1(0.4)
    fine = torch.zeros(121, dtype=torch.float64)
    fine[60 + 4] = 1.0
    np.testing.assert_allclose(support_to_scalar(torch.log(fine + 1e-30), 6, scale=10).item(),
                               inverse_value_transform(torch.tensor(0.4, dtype=torch.float64)).item(), atol=1e-9)
    # the model: a value-prefix head of its own width, the value head unchanged
    net = make_network((5,), 3, dataclasses.replace(SMALL, reward_support_size=6, reward_support_scale=10))
    out = net.recurrent_inference(net.initial_inference(torch.zeros(2, 5)).hidden, net.initial_lstm_state(2),
                                  torch.tensor([0, 1]))
    assert out.value_prefix_logits.shape == (2, 121) and out.value_logits.shape == (2, 41)
    # a finer value support: bins half a unit of h apart, the value-prefix head unchanged
    net = make_network((5,), 3, dataclasses.replace(SMALL, value_support_scale=2))
    out = net.recurrent_inference(net.initial_inference(torch.zeros(2, 5)).hidden, net.initial_lstm_state(2),
                                  torch.tensor([0, 1]))
    assert out.value_logits.shape == (2, 81) and out.value_prefix_logits.shape == (2, 41)
    assert net.value_support == (20, 2) and net.reward_support == (20, 1)


@pytest.mark.parametrize("obs_shape", [(12, 96, 96), (9, 84, 84)])
def test_pixel_model_shapes_and_zero_init(obs_shape):
    net = make_network(obs_shape, 18, ModelConfig()).eval()
    obs = torch.randint(0, 256, (2,) + obs_shape, dtype=torch.uint8)
    with torch.no_grad():
        out = net.initial_inference(obs)
        assert out.hidden.shape == (2, 64, 6, 6) and net.hidden_shape == (64, 6, 6)
        assert out.value_logits.shape == (2, 601) and out.policy_logits.shape == (2, 18)
        assert (out.policy_logits == 0).all() and support_to_scalar(out.value_logits, 300).abs().max() < 1e-3
        step = net.recurrent_inference(out.hidden, net.initial_lstm_state(2), torch.tensor([0, 17]))
        assert step.hidden.shape == (2, 64, 6, 6) and step.lstm_state[0].shape == (2, 512)
        assert step.value_prefix_logits.shape == (2, 601)


def test_mlp_model_unrolls_and_lstm_state_moves():
    net = make_network((5,), 5, SMALL).eval()
    with torch.no_grad():
        out = net.initial_inference(torch.randn(3, 5))
        hidden, state = out.hidden, net.initial_lstm_state(3)
        for k in range(7):
            step = net.recurrent_inference(hidden, state, torch.tensor([0, 2, 4]))
            assert not torch.equal(step.lstm_state[0], state[0])
            hidden, state = step.hidden, step.lstm_state
        assert hidden.shape == (3, 16)


def test_without_value_prefix_there_is_no_lstm():
    net = make_network((5,), 5, SMALL, value_prefix=False).eval()
    assert not any("lstm" in name for name, _ in net.named_parameters())
    state = net.initial_lstm_state(2)
    with torch.no_grad():
        step = net.recurrent_inference(net.initial_inference(torch.randn(2, 5)).hidden, state, torch.tensor([1, 3]))
    assert step.lstm_state is state


def test_gradient_reaches_representation_and_scale_gradient_halves_it():
    net = make_network((5,), 5, SMALL).train()
    torch.nn.init.normal_(net.reward_head[-1].weight)  # zero-initialized heads pass no gradient back yet
    out = net.initial_inference(torch.randn(4, 5))
    hidden, state = out.hidden, net.initial_lstm_state(4)
    for _ in range(3):
        step = net.recurrent_inference(hidden, state, torch.tensor([0, 1, 2, 3]))
        hidden, state = step.hidden, step.lstm_state
    step.value_prefix_logits.sum().backward()
    first = net.representation[0][0].weight
    assert first.grad is not None and first.grad.abs().sum() > 0

    x = torch.randn(5, requires_grad=True)
    y = scale_gradient(x, 0.5)
    assert torch.equal(y, x)
    (y * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 1.5)


def test_projection_shapes_and_eval_determinism():
    net = make_network((5,), 5, SMALL).eval()
    hidden = torch.randn(4, 16)
    with torch.no_grad():
        assert net.project(hidden, with_predictor=True).shape == (4, 24)
        assert torch.equal(net.project(hidden, with_predictor=False), net.project(hidden, with_predictor=False))


def test_bad_observation_shape():
    with pytest.raises(ValueError, match=r"observations must be \[D\] states or \[C, H, W\] pixels"):
        make_network((4, 4), 3, SMALL)


def test_residual_state_body_unrolls_trains_and_reads_the_action():
    config = dataclasses.replace(SMALL, state_body="residual", residual_blocks=2)
    torch.manual_seed(0)
    net = make_network((5,), 4, config).train()
    assert not hasattr(net, "dynamics_mlp")
    obs = torch.randn(4, 5)
    out = net.initial_inference(obs)
    assert out.hidden.shape == (4, 16)
    # the latent starts tanh-bounded; the blocks add updates to it
    assert net.representation[2](net.representation[1](net.representation[0](obs))).abs().max() <= 1
    hidden, state = out.hidden, net.initial_lstm_state(4)
    for _ in range(3):
        step = net.recurrent_inference(hidden, state, torch.tensor([0, 1, 2, 3]))
        hidden, state = step.hidden, step.lstm_state
    torch.nn.init.normal_(net.reward_head[-1].weight)
    net.recurrent_inference(hidden, state, torch.tensor([0, 1, 2, 3])).value_prefix_logits.sum().backward()
    untouched = [name for name, p in net.named_parameters()
                 if name.startswith(("representation", "dynamics_residual")) and (p.grad is None or not p.grad.any())]
    assert untouched == []
    with torch.no_grad():  # the next state depends on the action taken
        same = net.initial_inference(obs[:1].repeat(4, 1)).hidden
        after = net.dynamics(same, torch.tensor([0, 1, 2, 3]))
    assert torch.cdist(after, after).triu(1)[torch.triu(torch.ones(4, 4), 1).bool()].min() > 1e-4


def test_residual_state_body_takes_action_vectors_and_refuses_pixels():
    from ez_robot.errors import ConfigError
    from ez_robot.action_modes import ActionSpec

    config = dataclasses.replace(SMALL, state_body="residual")
    net = make_network((5,), ActionSpec("gaussian", dims=3), config).eval()
    with torch.no_grad():
        hidden = net.initial_inference(torch.randn(2, 5)).hidden
        assert net.dynamics(hidden, torch.tensor([[0.5, -1.0, 0.0], [1.0, 1.0, -0.2]])).shape == (2, 16)
    with pytest.raises(ConfigError, match="state_body='residual' is for state observations"):
        make_network((3, 32, 32), 4, config)
    with pytest.raises(ConfigError, match="model.state_body must be 'mlp' or 'residual', got 'resnet'"):
        ModelConfig(state_body="resnet")


@pytest.mark.parametrize("value_prefix", [True, False])
def test_head_layers_deepen_the_state_heads_and_refuse_pixels(value_prefix):
    from ez_robot.errors import ConfigError

    config = dataclasses.replace(SMALL, head_layers=2, head_hidden=24)
    torch.manual_seed(0)
    net = make_network((5,), 4, config, value_prefix=value_prefix).eval()
    for head in (net.value_head, net.policy_head, net.reward_head):
        widths = [m.out_features for m in head if isinstance(m, torch.nn.Linear)]
        assert widths[-3:-1] == [24, 24]  # two hidden layers before the output
        assert not head[-1].weight.any()  # the output still starts at zero
    with torch.no_grad():
        out = net.initial_inference(torch.randn(3, 5))
        step = net.recurrent_inference(out.hidden, net.initial_lstm_state(3), torch.tensor([0, 1, 2]))
    assert out.value_logits.shape == (3, 41) and step.value_prefix_logits.shape == (3, 41)
    with pytest.raises(ConfigError, match="model.head_layers=2 is for state observations"):
        make_network((3, 32, 32), 4, config)
    with pytest.raises(ConfigError, match="head_layers"):
        ModelConfig(head_layers=0)


# --- the policies' densities: one formula, numpy and torch -----------------------------------

def test_widened_log_probs_are_the_widened_policies_in_numpy_and_torch():
    """log_prob(scale=s): the categoricals at temperature s, the Gaussian with s x its std;
    the torch namespace runs the same formula (float32 against numpy's float64)."""
    from ez_robot.action_modes import ActionSpec, bin_values, gaussian_params, log_prob
    from ez_robot.torch_policies import TORCH

    rng = np.random.default_rng(0)
    factorized, gaussian = ActionSpec("factorized", dims=3, bins=5), ActionSpec("gaussian", dims=3)
    params = rng.normal(0, 2, (4, 15)).astype(np.float32)
    index = rng.integers(5, size=(4, 6, 3))
    logits = params.astype(np.float64).reshape(4, 3, 5) / 3.0
    log_softmax = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = np.take_along_axis(log_softmax[:, None], index[..., None], -1)[..., 0].sum(-1)
    actions = bin_values(5)[index]
    np.testing.assert_allclose(log_prob(factorized, params, actions, scale=3.0), expected, rtol=1e-12)
    np.testing.assert_allclose(log_prob(factorized, torch.as_tensor(params), torch.as_tensor(actions), scale=3.0,
                                        xp=TORCH).numpy(), expected, rtol=1e-5)

    params = rng.normal(0, 2, (4, 6)).astype(np.float32)
    actions = np.tanh(rng.normal(size=(4, 6, 3))).astype(np.float32)
    mean, std = gaussian_params(params, 3)
    pre = np.arctanh(actions.astype(np.float64))
    z = (pre - mean[:, None]) / (3.0 * std[:, None])
    expected = (-0.5 * z ** 2 - np.log(3.0 * std[:, None]) - 0.5 * np.log(2 * np.pi)
                - np.log(1 - actions.astype(np.float64) ** 2)).sum(-1)
    np.testing.assert_allclose(log_prob(gaussian, params, actions, scale=3.0), expected, rtol=1e-12)
    np.testing.assert_allclose(log_prob(gaussian, torch.as_tensor(params), torch.as_tensor(actions), scale=3.0,
                                        xp=TORCH).numpy(), expected, rtol=1e-5)
