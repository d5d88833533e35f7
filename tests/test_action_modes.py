"""The sampled action modes (factorized, gaussian): candidate draws and their priors, the
search over them, the config that picks a mode, and short runs of a 6-joint task through
both trainers."""
import copy
import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from ez_robot import search
from ez_robot.search_config import SearchConfig
from ez_robot.config import ConfigError, load_config
from ez_robot.networks import make_network
from ez_robot.torch_policies import policy_entropy, policy_log_prob
from ez_robot.action_modes import MEAN_BOUND, STD_MIN, ActionSpec, bin_values, log_prob, mode_action, sample_candidates

GAUSSIAN = ActionSpec("gaussian", dims=3)
FACTORIZED = ActionSpec("factorized", dims=3, bins=5)


def policy_params(spec, batch, seed=0):
    return np.random.default_rng(seed).normal(0.0, 1.0, (batch, spec.policy_size)).astype(np.float32)


# --- candidates -------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", [GAUSSIAN, FACTORIZED], ids=["gaussian", "factorized"])
@pytest.mark.parametrize("root", [True, False])
def test_candidates_are_actions_in_bounds_with_finite_priors_at_first_copies(spec, root):
    params = policy_params(spec, 7)
    actions, logits = sample_candidates(spec, params, 16, np.random.default_rng(1), root=root, policy_samples=4)
    assert actions.shape == (7, 16, 3) and actions.dtype == np.float32 and logits.shape == (7, 16)
    assert np.all(np.abs(actions) <= 1.0)
    if spec.mode == "factorized":
        assert np.isin(actions, bin_values(5)).all()
        for row_actions, row_logits in zip(actions, logits):  # one finite prior per distinct action
            distinct = {tuple(a) for a in row_actions}
            assert np.isfinite(row_logits).sum() == len(distinct)
    else:
        assert np.isfinite(logits).all()


def test_below_the_root_the_prior_is_the_share_of_the_draws():
    params = policy_params(FACTORIZED, 4)
    _, logits = sample_candidates(FACTORIZED, params, 16, np.random.default_rng(2), root=False)
    np.testing.assert_allclose(np.exp(logits.astype(np.float64)).sum(axis=1), 1.0, rtol=1e-5)


def test_the_corrected_root_prior_estimates_the_policy_not_the_wider_proposal():
    """Sampled MuZero: beta_hat / beta * pi -> pi as the draws grow, though 3/4 of them
    come from the widened proposal; without the correction the prior is the proposal's."""
    spec = ActionSpec("factorized", dims=1, bins=5)
    params = np.array([[2.0, 1.0, 0.0, -1.0, -2.0]], np.float32)
    pi = np.exp(params[0] - params[0].max())
    pi /= pi.sum()
    count = 20_000

    def prior(correction):
        actions, logits = sample_candidates(spec, params, count, np.random.default_rng(3), root=True,
                                            policy_samples=count // 4, wide_scale=3.0, correction=correction)
        first = np.isfinite(logits[0])
        mass = dict(zip(actions[0, first, 0].round(3), np.exp(logits[0, first].astype(np.float64))))
        return np.array([mass.get(round(float(v), 3), 0.0) for v in bin_values(5)])

    corrected, uncorrected = prior(True), prior(False)
    np.testing.assert_allclose(corrected / corrected.sum(), pi, atol=0.02)
    assert abs(uncorrected[0] - pi[0]) > 0.1  # the uncorrected prior is far flatter


def test_the_greedy_root_includes_the_most_likely_action():
    for spec in (GAUSSIAN, FACTORIZED):
        params = policy_params(spec, 5)
        actions, _ = sample_candidates(spec, params, 8, np.random.default_rng(4), root=True, policy_samples=2,
                                       include_mode=True)
        np.testing.assert_array_equal(actions[:, 0], mode_action(spec, params))


def test_a_candidate_bound_clips_gaussian_candidates_and_nothing_else():
    """search.candidate_bound (EfficientZero V2: 0.999): the widened draws that tanh puts at
    +-1 land on the bound; the same draws otherwise, and factorized bins untouched."""
    params = policy_params(GAUSSIAN, 4)
    params[:, GAUSSIAN.dims:] = 3.0  # wide stds: most widened draws saturate at +-1
    draw = lambda spec, p, bound: sample_candidates(spec, p, 16, np.random.default_rng(8), root=True,
                                                    policy_samples=4, bound=bound)
    free, clipped = draw(GAUSSIAN, params, 1.0)[0], draw(GAUSSIAN, params, 0.999)[0]
    assert (np.abs(free) >= 0.999).mean() > 0.3 and np.abs(clipped).max() <= np.float32(0.999)
    np.testing.assert_array_equal(clipped, np.clip(free, -0.999, 0.999))
    factorized = policy_params(FACTORIZED, 4)
    np.testing.assert_array_equal(draw(FACTORIZED, factorized, 0.5)[0], draw(FACTORIZED, factorized, 1.0)[0])
    for bad in (0.0, 1.5, float("nan")):
        with pytest.raises(ValueError, match="candidate_bound"):
            SearchConfig(candidate_bound=bad)


@pytest.mark.parametrize("spec", [GAUSSIAN, FACTORIZED], ids=["gaussian", "factorized"])
def test_numpy_and_torch_densities_agree(spec):
    """The runtime samples with numpy, the learner's loss uses torch: one density."""
    params = policy_params(spec, 6)
    actions, _ = sample_candidates(spec, params, 10, np.random.default_rng(5), root=False)
    ours = log_prob(spec, params, actions)
    theirs = policy_log_prob(spec, torch.as_tensor(params), torch.as_tensor(actions)).double().numpy()
    np.testing.assert_allclose(theirs, ours, rtol=1e-4, atol=1e-4)
    if spec.mode == "factorized":  # exact entropy: -sum p log p of each dimension
        logits = params.reshape(6, 3, 5).astype(np.float64)
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        expected = -(p * np.log(p)).sum((-1, -2))
        np.testing.assert_allclose(policy_entropy(spec, torch.as_tensor(params)).double().numpy(), expected,
                                   rtol=1e-5)


def test_the_squashed_entropy_is_that_of_the_actions_and_bounded():
    """train.entropy=squashed: the quadrature agrees with sampling the actions themselves; it
    never exceeds the uniform's dims x log 2, and past a moderate std a wider Gaussian lowers
    it (its actions pile onto the bounds) where the pre-squash entropy keeps rising."""
    torch.manual_seed(3)
    params = 0.5 * torch.randn(4, 6, dtype=torch.float64)
    mean = MEAN_BOUND * torch.tanh(params[:, :3] / MEAN_BOUND)  # the head's parametrization
    std = torch.nn.functional.softplus(params[:, 3:] + 1.0) + STD_MIN
    actions = torch.tanh(mean.unsqueeze(1) + std.unsqueeze(1) * torch.randn(4, 200_000, 3, dtype=torch.float64))
    sampled = -policy_log_prob(GAUSSIAN, params, actions).mean(-1)
    np.testing.assert_allclose(policy_entropy(GAUSSIAN, params, "squashed").numpy(), sampled.numpy(), atol=0.02)

    widths = torch.linspace(-2.0, 8.0, 41, dtype=torch.float64, requires_grad=True)
    wide = torch.cat([torch.zeros(41, 3, dtype=torch.float64), widths[:, None].expand(41, 3)], dim=1)
    squashed = policy_entropy(GAUSSIAN, wide, "squashed")
    assert (squashed <= 3 * math.log(2.0) + 1e-9).all()
    (grad,) = torch.autograd.grad(squashed.sum(), widths)
    assert (grad[widths > 1.0] < 0).all() and (grad[widths < -1.0] > 0).all()
    (pre_grad,) = torch.autograd.grad(policy_entropy(GAUSSIAN, wide).sum(), widths)
    assert (pre_grad > 0).all()


def test_the_clipped_entropy_is_what_v2s_sampled_estimate_averages_to():
    """train.entropy=clipped: EfficientZero V2's estimate (draws a = clip(tanh(x), +-0.999),
    -mean of log N(atanh a) - log(1 - a^2), reparameterized) averaged over many draws, in
    value and gradient; at wide stds it is flat where the squashed entropy keeps falling."""
    torch.manual_seed(4)
    raw = torch.tensor([[0.0, 2.0, -3.0, 4.5, 2.0, -1.0], [0.3, -4.0, 1.0, -2.0, 0.5, 6.0]], dtype=torch.float64)
    params = raw.clone().requires_grad_()
    exact = policy_entropy(GAUSSIAN, params, "clipped")
    (exact_grad,) = torch.autograd.grad(exact.sum(), params)

    drawn = raw.clone().requires_grad_()
    mean = MEAN_BOUND * torch.tanh(drawn[:, :3] / MEAN_BOUND)
    std = torch.nn.functional.softplus(drawn[:, 3:] + 1.0) + STD_MIN
    x = mean.unsqueeze(1) + std.unsqueeze(1) * torch.randn(2, 400_000, 3, dtype=torch.float64)
    a = torch.tanh(x).clamp(-0.999, 0.999)
    z = (torch.atanh(a) - mean.unsqueeze(1)) / std.unsqueeze(1)
    log_pi = -0.5 * z * z - torch.log(std).unsqueeze(1) - 0.5 * math.log(2 * math.pi) - torch.log(1 - a * a)
    sampled = -log_pi.sum(-1).mean(-1)
    (sampled_grad,) = torch.autograd.grad(sampled.sum(), drawn)
    np.testing.assert_allclose(exact.detach().numpy(), sampled.detach().numpy(), atol=0.02)
    np.testing.assert_allclose(exact_grad.numpy(), sampled_grad.numpy(), atol=0.03)

    widths = torch.tensor([6.0, 8.0, 10.0], dtype=torch.float64, requires_grad=True)  # stds ~7 to ~11
    wide = torch.cat([torch.zeros(3, 3, dtype=torch.float64), widths[:, None].expand(3, 3)], dim=1)
    (clipped_grad,) = torch.autograd.grad(policy_entropy(GAUSSIAN, wide, "clipped").sum(), widths)
    (squashed_grad,) = torch.autograd.grad(policy_entropy(GAUSSIAN, wide, "squashed").sum(), widths)
    assert (clipped_grad.abs() < 0.1 * squashed_grad.abs()).all() and (squashed_grad < 0).all()


def test_wrong_policy_shapes_are_named():
    with pytest.raises(ValueError, match=r"must have shape \[B, 6\] for gaussian \(3 dims\)"):
        sample_candidates(GAUSSIAN, np.zeros((2, 5)), 4, np.random.default_rng(0), root=False)
    with pytest.raises(ValueError, match="needs dims >= 1"):
        ActionSpec("gaussian")


# --- the search --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gaussian_net():
    config = load_config("walker_walk", overrides=["model.latent_dim=16", "model.mlp_hidden=32",
                                                   "model.head_hidden=16", "model.lstm_hidden=16",
                                                   "model.projection_hidden=16", "model.projection_out=16",
                                                   "model.support_size=10"])
    torch.manual_seed(0)
    net = make_network((24,), ActionSpec("gaussian", dims=6), config.model)
    with torch.no_grad():
        for parameter in net.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.2)
    return net.eval()


@pytest.mark.parametrize("noise", [True, False], ids=["training", "greedy"])
def test_sampled_search_returns_one_of_its_candidates_and_an_improved_policy(gaussian_net, noise):
    from ez_robot.torch_inference import TorchInference

    inference = TorchInference(gaussian_net, "cpu")
    obs = np.random.default_rng(6).standard_normal((5, 24)).astype(np.float32)
    config = SearchConfig(num_simulations=24, num_candidates=8, add_noise=noise, discount=0.99)
    out = search(inference.root(obs), inference.recurrent_fn, config, np.random.default_rng(7),
                 action_spec=gaussian_net.action_spec)
    assert out.candidates.shape == (5, 8, 6) and out.actions.shape == (5, 6)
    assert all(any(np.array_equal(a, c) for c in cs) for a, cs in zip(out.actions, out.candidates))
    np.testing.assert_allclose(out.policy.sum(axis=1), 1.0, rtol=1e-5)
    assert (out.visit_counts.sum(axis=1) == 24).all() and (out.simulations == 24).all()
    assert np.isfinite(out.root_q_values).all()
    again = search(inference.root(obs), inference.recurrent_fn, config, np.random.default_rng(7),
                   action_spec=gaussian_net.action_spec)
    np.testing.assert_array_equal(again.actions, out.actions)  # pure: same rng, same result


# --- config ------------------------------------------------------------------------------------

def test_auto_picks_joint_where_the_bins_fit_and_gaussian_beyond():
    assert load_config("cartpole_swingup").env.action_mode == "joint"
    walker = load_config("walker_walk")
    assert walker.env.action_mode == "gaussian" and walker.search.num_simulations == 32  # the preset's mode
    assert load_config("walker_walk", overrides=["env.action_mode=factorized"]).env.action_mode == "factorized"
    assert load_config("cartpole_swingup", overrides=["env.action_mode=gaussian"]).search.num_simulations == 32
    assert load_config("cartpole_swingup").search.num_simulations == 50


def test_a_discrete_task_refuses_a_sampled_mode():
    with pytest.raises(ConfigError, match="gym:CartPole-v1 has discrete actions: env.action_mode must be joint"):
        load_config("gym:CartPole-v1", overrides=["env.action_mode=gaussian"])
    with pytest.raises(ConfigError, match="env.action_mode"):
        load_config("walker_walk", overrides=["env.action_mode=sideways"])


# --- the model-gradient term (train.model_gradient_coef) -------------------------------------

def sampled_batch(spec, config, batch=16, obs_dims=24, candidates=4, seed=0):
    """A hand-made batch of a sampled mode: random states and actions, every target known,
    a uniform improved policy over random candidates."""
    from ez_robot.batch import Batch
    from ez_robot.targets import Targets

    rng = np.random.default_rng(seed)
    K, D = config.train.unroll_steps, spec.dims
    ones = lambda *shape: np.ones(shape, np.float32)
    context = Batch(
        frames=rng.normal(size=(batch, K + 1, obs_dims)).astype(np.float32),
        actions=rng.uniform(-1, 1, (batch, K, D)).astype(np.float32),
        value_prefix_targets=rng.uniform(0, 2, (batch, K)).astype(np.float32),
        value_partial=np.zeros((batch, K + 1), np.float32), bootstrap_discount=np.zeros((batch, K + 1), np.float32),
        bootstrap_index=np.full((batch, K + 1), -1), stored_bootstrap_values=np.zeros((batch, K + 1), np.float32),
        stored_policies=ones(batch, K + 1, candidates) / candidates, mask_policy=ones(batch, K + 1),
        mask_value=ones(batch, K + 1), mask_value_prefix=ones(batch, K), mask_consistency=ones(batch, K),
        searched_values=np.zeros((batch, K + 1), np.float32), value_fresh=np.zeros((batch, K + 1), bool),
        searched_policies=ones(batch, K + 1, candidates) / candidates, policy_fresh=np.zeros((batch, K + 1), bool))
    targets = Targets(value=rng.uniform(0, 20, (batch, K + 1)).astype(np.float32),
                      policy=ones(batch, K + 1, candidates) / candidates, searched_policy=np.ones(batch, bool),
                      num_searches=0,
                      candidates=np.tanh(rng.normal(size=(batch, K + 1, candidates, D))).astype(np.float32))
    return context, targets, np.ones(batch, np.float32)


def model_gradient_setup(*overrides):
    config = load_config("walker_walk", overrides=["model.latent_dim=16", "model.mlp_hidden=32",
                                                   "model.head_hidden=16", "model.lstm_hidden=16",
                                                   "model.projection_hidden=16", "model.projection_out=16",
                                                   "model.support_size=10", *overrides])
    torch.manual_seed(0)
    net = make_network((24,), ActionSpec("gaussian", dims=6), config.model, value_prefix=config.train.value_prefix)
    with torch.no_grad():  # heads that are not zero (the last layers start so)
        for parameter in net.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    return config, net


@pytest.mark.parametrize("value_prefix", [True, False])
def test_the_model_gradient_term_moves_the_policy_head_alone(value_prefix):
    """train.model_gradient_coef > 0 changes the step of the policy head and of nothing else:
    the model is the critic of that term, not trained by it (no gradient clip engages)."""
    from ez_robot.learner import Learner

    config, net = model_gradient_setup(f"train.value_prefix={str(value_prefix).lower()}", "train.max_grad_norm=1e9")
    with_term = dataclasses.replace(config, train=dataclasses.replace(config.train, model_gradient_coef=1.0))
    context, targets, weights = sampled_batch(net.action_spec, config)
    after = {}
    for name, cfg in (("off", config), ("on", with_term)):
        learner = Learner(copy.deepcopy(net), cfg, 100, torch.device("cpu"))
        metrics, _ = learner.step(context, targets, weights)
        after[name] = dict(learner.net.named_parameters())
        if name == "on":
            assert math.isfinite(metrics["model_q"]) and metrics["model_q_scale"] >= 1.0
            assert 0.0 < metrics["model_gradient_share"] < 1.0
            resumed = Learner(copy.deepcopy(net), cfg, 100, torch.device("cpu"))
            resumed.load_state_dict(learner.state_dict())  # a checkpoint keeps the running scale of Q
            assert resumed.q_scale == learner.q_scale is not None
    changed = [n for n in after["off"] if not torch.equal(after["off"][n], after["on"][n])]
    assert changed and all(n.startswith("policy_head.") for n in changed)


def test_the_model_gradient_term_climbs_the_models_q():
    """With a model whose reward is flat and whose value rises with the first action dimension
    alone, the term (and
    nothing else training the policy) moves the policy's mean up that dimension, not the others."""
    from ez_robot.learner import Learner
    from ez_robot.torch_policies import gaussian_policy

    config, net = model_gradient_setup("train.policy_loss_coef=0", "train.optimizer=adam", "train.lr=0.01",
                                       "train.lr_final=0.01", "train.model_gradient_coef=1")
    learner = Learner(net, config, 100, torch.device("cpu"))
    bins = torch.arange(-10, 11, dtype=torch.float32)
    original = net.recurrent_inference

    def value_up_dimension_0(hidden, lstm_state, action):  # read by the term only: the loss's calls were bound before
        out = original(hidden, lstm_state, action)
        return out._replace(value_prefix_logits=torch.zeros_like(out.value_prefix_logits),
                            value_logits=2.0 * action[:, :1] * bins)

    net.recurrent_inference = value_up_dimension_0
    context, targets, weights = sampled_batch(net.action_spec, config)
    states = torch.as_tensor(context.frames[:, 0])

    def means():
        with torch.no_grad():
            return gaussian_policy(net.initial_inference(states).policy_logits, 6)[0].mean(0)

    before = means()
    for _ in range(30):
        learner.step(context, targets, weights)
    moved = means() - before
    assert moved[0] > 0.3
    assert moved[1:].abs().max() < 0.3 * moved[0]


def test_the_model_gradient_term_needs_the_gaussian_mode():
    with pytest.raises(ConfigError, match="model_gradient_coef"):
        load_config("walker_walk", overrides=["env.action_mode=factorized", "train.model_gradient_coef=1"])
    with pytest.raises(ConfigError, match="model_gradient_coef"):
        load_config("cartpole_swingup", overrides=["train.model_gradient_coef=1"])  # joint by default
    with pytest.raises(ConfigError, match="model_gradient_coef"):
        load_config("walker_walk", overrides=["train.model_gradient_coef=-1"])
    assert load_config("walker_walk", overrides=["train.model_gradient_coef=0.5"]).train.model_gradient_coef == 0.5


# --- runs --------------------------------------------------------------------------------------

TINY = ["replay.min_replay_size=60", "train.batch_size=8", "search.num_simulations=4", "search.num_candidates=4",
        "train.train_steps_per_agent_step=0.25", "train.eval_episodes=1", "model.latent_dim=16",
        "model.mlp_hidden=32", "model.head_hidden=16", "model.lstm_hidden=16", "model.projection_hidden=16",
        "model.projection_out=16", "model.support_size=10"]


@pytest.mark.parametrize("mode,trainer,body", [
    ("gaussian", "single", "mlp"), ("factorized", "single", "residual"),
    pytest.param("gaussian", "ray", "mlp", marks=pytest.mark.slow)])
def test_a_six_joint_task_trains(tmp_path, mode, trainer, body):
    """walker_walk (6 dims) end to end: self-play, reanalyze, training, eval and the
    checkpoint, in each mode and each state body.  The Ray trainer's run is slow (a minute
    on 2 cores, most of it its workers starting); a sampled mode through Ray is in the
    default suite with the custom env (tests/test_custom_env.py)."""
    from ez_robot import ray_trainer, trainer as single_trainer
    from ez_robot.checkpoint import load_run

    config = load_config("walker_walk", budget="240", seed=1,
                         overrides=TINY + [f"env.action_mode={mode}", "env.factorized_bins=5",
                                           f"model.state_body={body}"]
                         + (["train.entropy=squashed"] if mode == "gaussian" else []))
    if trainer == "single":
        summary = single_trainer.train(config, tmp_path, device="cpu", progress=False, checkpoint_interval=20,
                                       eval_interval=1000)  # one evaluation, at the end
    else:
        import ray
        from ez_robot.ray_cluster import init_ray

        init_ray(num_cpus=2)
        try:
            summary = ray_trainer.train(config, tmp_path, workers=1, reanalyze_workers=1, device="cpu",
                                        progress=False, checkpoint_interval=20, eval_interval=1000)
        finally:
            ray.shutdown()
    assert summary["agent_steps"] == 120 and summary["train_steps"] == 30
    run = load_run(tmp_path)
    assert run.net.action_spec == ActionSpec(mode, dims=6, bins=5 if mode == "factorized" else 0)
    assert all(torch.isfinite(p).all() for p in run.net.parameters())
    assert run.net.residual_body == (body == "residual")  # the checkpoint rebuilds the body it trained
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert any(r["kind"] == "eval" and math.isfinite(r["mean"]) for r in records)
    # the replay keeps each move's candidates, the improved policy over them and the vector taken
    segment = np.load(sorted((tmp_path / "checkpoints" / "replay").glob("segment-*.npz"))[0])
    assert segment["candidates"].shape[1:] == (4, 6) and segment["actions"].shape[1:] == (6,)
    assert segment["policies"].shape[1:] == (4,)


def test_on_a_bandit_the_search_picks_the_best_candidate():
    """One rewarded step, -|a - target|^2, then nothing: with enough simulations every candidate is tried
    and the greedy search acts on the one closest to the target."""
    spec = ActionSpec("gaussian", dims=2)
    target = np.array([0.5, -0.3], np.float32)
    batch = 6

    def recurrent_fn(depth, actions, reset_mask):  # the hidden state counts the steps taken
        first = depth[:, 0] == 0
        reward = np.where(first, -((np.asarray(actions) - target) ** 2).sum(axis=1), 0.0).astype(np.float32)
        return depth + 1, reward, np.zeros(len(actions), np.float32), np.zeros((len(actions), 4), np.float32)

    from ez_robot.mcts import RootOutput

    root = RootOutput(hidden=np.zeros((batch, 1), np.float32), value_prefix=np.zeros(batch, np.float32),
                      value=np.zeros(batch, np.float32), policy_logits=np.zeros((batch, 4), np.float32))
    config = SearchConfig(num_simulations=64, num_candidates=8, add_noise=False, discount=0.99, lstm_horizon=1)
    out = search(root, recurrent_fn, config, np.random.default_rng(8), action_spec=spec)
    distance = ((out.candidates - target) ** 2).sum(axis=2)
    np.testing.assert_array_equal(out.actions, out.candidates[np.arange(batch), distance.argmin(axis=1)])
    assert len({tuple(a) for a in out.candidates[:, 1].round(5)}) == batch  # rows drew their own candidates
    assert len({tuple(a) for a in out.actions.round(5)}) > 1  # and the best is not always the mode


def test_interior_candidates_bound_the_children_below_the_root_only():
    """search.interior_candidates (EfficientZero V2's code: 2): each node below the root
    expands at most that many distinct actions, the root keeps all K, and the narrower
    tree reaches deeper with the same simulations."""
    spec = ActionSpec("gaussian", dims=2)
    batch = 3

    def run(interior):
        applied = {}  # parent node id -> the distinct actions searched from it
        counter = [batch]

        def recurrent_fn(node, actions, reset_mask):  # the hidden state is a unique node id
            for parent, action in zip(node[:, 0], np.asarray(actions)):
                applied.setdefault(int(parent), set()).add(tuple(action.round(6)))
            ids = np.arange(counter[0], counter[0] + len(actions), dtype=np.float32)[:, None]
            counter[0] += len(actions)
            zeros = np.zeros(len(actions), np.float32)
            return ids, zeros + 0.1, zeros, np.zeros((len(actions), 4), np.float32)

        from ez_robot.mcts import RootOutput

        root = RootOutput(hidden=np.arange(batch, dtype=np.float32)[:, None], value_prefix=np.zeros(batch, np.float32),
                          value=np.zeros(batch, np.float32), policy_logits=np.zeros((batch, 4), np.float32))
        config = SearchConfig(num_simulations=32, num_candidates=16, interior_candidates=interior, add_noise=False,
                              discount=0.99, lstm_horizon=1, proposal_correction=False)
        out = search(root, recurrent_fn, config, np.random.default_rng(3), action_spec=spec)
        roots = [len(applied[b]) for b in range(batch)]
        below = max(len(actions) for parent, actions in applied.items() if parent >= batch)
        return roots, below, float(np.mean(out.mean_depth))

    roots_all, below_all, depth_all = run(0)
    roots_two, below_two, depth_two = run(2)
    assert roots_two == roots_all == [16] * batch  # 32 simulations try every root candidate
    assert below_two == 2 < below_all
    assert depth_two > depth_all
    with pytest.raises(ValueError, match="interior_candidates"):
        SearchConfig(num_candidates=8, interior_candidates=9)
