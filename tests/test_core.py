"""The learner, reanalyze and the ablation switches on small hand-made data."""
import copy
import dataclasses

import numpy as np
import pytest
import torch
from torch._dynamo.utils import counters

from ez_robot.config import load_config, search_config
from ez_robot.errors import ConfigError
from ez_robot.inference import run_search
from ez_robot.torch_inference import TorchInference
from ez_robot.learner import Learner, augment
from ez_robot.networks import make_network
from ez_robot.reanalyze import reanalyze
from ez_robot.replay import ReplayBuffer, Segment
from ez_robot.batch import gather_batch
from ez_robot.targets import network_bootstraps

STATES, ACTIONS, EPISODE = 4, 2, 8


def mdp_segment(rng, collected_at=0):
    """A deterministic MDP: s -> s + 1 (mod 4); action s % 2 pays 1, the other 0."""
    states = np.arange(EPISODE + 1) % STATES
    actions = rng.integers(ACTIONS, size=EPISODE)
    rewards = (actions == states[:-1] % 2).astype(np.float32)
    return Segment(frames=np.eye(STATES, dtype=np.float32)[states], actions=actions, rewards=rewards,
                   root_values=np.zeros(EPISODE + 1, np.float32),
                   policies=np.full((EPISODE, ACTIONS), 0.5, np.float32),
                   collected_at=np.full(EPISODE, collected_at), num_own=EPISODE, episode_end=True,
                   terminated=False)


def small_config(*overrides):
    return load_config("gym:CartPole-v1", overrides=[
        "model.latent_dim=32", "model.mlp_hidden=64", "model.lstm_hidden=32", "model.head_hidden=32",
        "model.support_size=10", "model.projection_hidden=32", "model.projection_out=32",
        "search.num_simulations=8", "train.batch_size=32", "train.lr=0.05", "train.lr_final=0.05",
        "search.discount=0.9", *overrides])


def setup(config, segments=20, seed=0):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    net = make_network((STATES,), ACTIONS, config.model, value_prefix=config.train.value_prefix)
    replay = ReplayBuffer(config.replay)
    for _ in range(segments):
        replay.add(mdp_segment(rng))
    return net, replay, rng


def batch(config, net, replay, rng, target_net=None):
    t = config.train
    searched = search_config(config)
    ref = replay.sample(t.batch_size, 0.4, rng)
    collected = np.zeros(t.batch_size, np.int64)  # the samples' collection step: what the config's target reads
    context = gather_batch(ref, unroll_steps=t.unroll_steps, horizons=np.full(t.batch_size, t.td_steps),
                           discount=searched.discount, lstm_horizon=searched.lstm_horizon,
                           num_actions=ACTIONS, rng=rng,
                           network_bootstrap=network_bootstraps(collected, 0, 1000, t))
    inference = TorchInference((target_net or copy.deepcopy(net)).eval())
    targets = reanalyze(context, inference, searched, rng, policy_ratio=t.reanalyze_policy_ratio)
    return ref, context, targets


@pytest.mark.parametrize("overrides", [(), ("model.reward_support_size=4", "model.reward_support_scale=10"),
                                       ("model.value_support_scale=2",),
                                       ("train.optimizer=adam", "train.lr=3e-3", "train.lr_final=3e-3")],
                         ids=["defaults", "fine_prefix", "fine_value", "adam"])
def test_fixed_batch_loss_decreases(overrides):
    config = small_config(*overrides)
    net, replay, rng = setup(config)
    ref, context, targets = batch(config, net, replay, rng)
    learner = Learner(net, config, 1000, torch.device("cpu"))
    losses = [learner.step(context, targets, ref.weights)[0]["loss"] for _ in range(40)]
    assert losses[-1] < 0.5 * losses[0]


def test_the_learning_rate_warms_up_linearly_then_follows_its_schedule():
    config = small_config("train.lr=0.2", "train.lr_final=0.02", "train.lr_warmup_steps=100")
    net, _, _ = setup(config)
    learner = Learner(net, config, 1000, torch.device("cpu"))
    plain = Learner(copy.deepcopy(net), small_config("train.lr=0.2", "train.lr_final=0.02"), 1000,
                    torch.device("cpu"))
    assert learner.learning_rate(0) == 0.0
    assert learner.learning_rate(25) == pytest.approx(0.25 * plain.learning_rate(25))
    for step in (100, 500, 1000):
        assert learner.learning_rate(step) == plain.learning_rate(step)
    assert plain.learning_rate(0) == 0.2 and plain.learning_rate(1000) == pytest.approx(0.02)


def test_adam_moments_travel_with_the_learner_state():
    config = small_config("train.optimizer=adam", "train.lr=3e-3", "train.lr_final=3e-3")
    net, replay, rng = setup(config)
    ref, context, targets = batch(config, net, replay, rng)
    learner = Learner(net, config, 1000, torch.device("cpu"))
    assert isinstance(learner.optimizer, torch.optim.Adam)
    for _ in range(2):
        learner.step(context, targets, ref.weights)
    state = learner.state_dict()
    other = Learner(copy.deepcopy(net), config, 1000, torch.device("cpu"))
    other.load_state_dict(state)
    assert other.optimizer.state_dict()["state"][0]["exp_avg"].equal(learner.optimizer.state_dict()["state"][0]["exp_avg"])


def test_overfit_mdp_search_picks_optimal_action():
    # Consistency off: in this MDP the next observation does not depend on the action
    # (s -> s + 1 whatever is done) but the reward does.  The consistency loss aligns the
    # predicted next latent with the next observation's, which here means erasing the
    # action from the latent the value prefix is read from; with it on, the model learns
    # the average reward (measured: ~0.7 for both actions after 300 steps).
    config = small_config("train.consistency=false")
    net, replay, rng = setup(config, segments=30)
    learner = Learner(net, config, 300, torch.device("cpu"))
    target = copy.deepcopy(net)
    for step in range(300):
        ref, context, targets = batch(config, net, replay, rng, target_net=target)
        _, priorities = learner.step(context, targets, ref.weights)
        replay.update_priorities(ref.segment_ids, ref.positions, priorities)
        if step % 20 == 0:
            target.load_state_dict(net.state_dict())
    greedy = search_config(config).replace(add_noise=False, temperature=0.0, num_simulations=16)
    out = run_search(TorchInference(net.eval()), np.eye(STATES, dtype=np.float32), greedy,
                     np.random.default_rng(0))
    np.testing.assert_array_equal(out.actions, np.arange(STATES) % 2)


def test_compiled_learner_takes_the_eager_steps():
    """train.compile: the step's network calls under torch.compile (CPU here, no CUDA graphs)
    give the eager losses and weights, and the snapshots stay plain modules."""
    eager, compiled = small_config(), small_config("train.compile=default")
    net, replay, rng = setup(eager)
    ref, context, targets = batch(eager, net, replay, rng)
    learners = [Learner(copy.deepcopy(net), config, 100, torch.device("cpu")) for config in (eager, compiled)]
    counters.clear()
    for _ in range(3):
        losses = [learner.step(context, targets, ref.weights)[0]["loss"] for learner in learners]
        assert losses[1] == pytest.approx(losses[0], rel=1e-4)
    for a, b in zip(learners[0].net.parameters(), learners[1].net.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
    assert counters["stats"]["unique_graphs"] >= 3  # the three network calls went through dynamo
    assert type(learners[1].target_net) is type(net)
    assert set(learners[1].state_dict()["model"]) == set(net.state_dict())


def test_paper_step_weights_average_the_root_step_with_the_unrolled_ones():
    """train.step_weights=paper: L = (1/K) sum_k L_k, where the default (MuZero's) takes the
    root step's value and policy terms in full: the two losses differ by exactly
    (1 - 1/K) of the root terms, and nothing else changes."""
    muzero, paper = small_config(), small_config("train.step_weights=paper")
    net, replay, rng = setup(muzero)
    ref, context, targets = batch(muzero, net, replay, rng)
    weights = np.ones_like(ref.weights)  # the metrics' root losses are unweighted means
    first = [Learner(copy.deepcopy(net), config, 100, torch.device("cpu")).step(context, targets, weights)[0]
             for config in (muzero, paper)]
    t, K = muzero.train, muzero.train.unroll_steps
    root = t.value_loss_coef * first[0]["value_loss"] + t.policy_loss_coef * first[0]["policy_loss"]
    assert root > 0
    assert first[0]["loss"] - first[1]["loss"] == pytest.approx((1 - 1 / K) * root, rel=1e-5)
    for key in ("value_loss", "policy_loss", "value_prefix_loss", "consistency_loss"):
        assert first[1][key] == pytest.approx(first[0][key], rel=1e-6), key
    with pytest.raises(ConfigError, match="step_weights"):
        small_config("train.step_weights=equal")


def test_policy_target_best_trains_towards_the_most_likely_action_alone():
    """train.policy_target=best is the full loss with the search policy replaced by a
    one-hot at its argmax: the same loss to the last bit, and not the full one."""
    import dataclasses

    best, full = small_config("train.policy_target=best"), small_config()
    net, replay, rng = setup(full)
    ref, context, targets = batch(full, net, replay, rng)
    assert (targets.policy.max(-1) < 1.0).any()  # soft targets: the two losses can differ
    with torch.no_grad():  # a policy head that is not uniform (it starts so)
        for param in net.parameters():
            param.add_(0.1 * torch.randn_like(param))
    one_hot = np.eye(ACTIONS, dtype=targets.policy.dtype)[targets.policy.argmax(-1)]
    losses = {}
    for name, config, given in [("best", best, targets), ("full", full, targets),
                                ("one_hot", full, dataclasses.replace(targets, policy=one_hot))]:
        metrics, _ = Learner(copy.deepcopy(net), config, 100, torch.device("cpu")).step(context, given, ref.weights)
        losses[name] = metrics["policy_loss"]
    assert losses["best"] == losses["one_hot"]
    assert losses["best"] != losses["full"]


def test_consistency_target_branch_has_no_gradient():
    config = small_config()
    net, replay, rng = setup(config)
    ref, context, targets = batch(config, net, replay, rng)
    grad_modes = []
    net.representation.register_forward_hook(lambda *_: grad_modes.append(torch.is_grad_enabled()))
    Learner(net, config, 100, torch.device("cpu")).step(context, targets, ref.weights)
    # once with gradients (the online branch at u = 0), once without (the targets o_{t+1..t+K})
    assert grad_modes == [True, False]


def test_ablation_consistency_off():
    config = small_config("train.consistency=false")
    net, replay, rng = setup(config)
    ref, context, targets = batch(config, net, replay, rng)
    metrics, _ = Learner(net, config, 100, torch.device("cpu")).step(context, targets, ref.weights)
    assert metrics["consistency_loss"] == 0.0
    assert all(p.grad is None for p in net.projector.parameters())
    on = small_config()
    net_on, replay_on, rng_on = setup(on)
    r, c, tg = batch(on, net_on, replay_on, rng_on)
    metrics_on, _ = Learner(net_on, on, 100, torch.device("cpu")).step(c, tg, r.weights)
    assert metrics_on["consistency_loss"] != 0  # the negative cosine similarity is computed
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in net_on.predictor.parameters())


def test_ablation_value_prefix_off():
    config = small_config("train.value_prefix=false")
    net, replay, rng = setup(config)
    assert not hasattr(net, "lstm")
    assert search_config(config).lstm_horizon == 1
    ref, context, targets = batch(config, net, replay, rng)
    # per-step reward targets instead of running sums
    rewards = np.array([[s.rewards[p + u] if p + u < s.num_moves else 0.0 for u in range(5)]
                        for s, p in zip(ref.segments, ref.positions)])
    np.testing.assert_allclose(context.value_prefix_targets, rewards)
    metrics, _ = Learner(net, config, 100, torch.device("cpu")).step(context, targets, ref.weights)
    assert np.isfinite(metrics["loss"])


def test_ablation_off_policy_correction_off_bootstraps_from_predicted_values():
    """Without correction: the paper's plain k-step target, sum_{i<k} gamma^i u + gamma^k v(o_{t+k})
    with v the target network's prediction; no search, and the stored (stale) values unused."""
    config = small_config("train.off_policy_correction=false", "train.reanalyze_policy_ratio=0")
    net, replay, rng = setup(config)
    for segment in replay.segments:
        segment.root_values[:] = 7.0
    target_net = copy.deepcopy(net).eval()
    with torch.no_grad():  # a value head whose predictions differ between observations
        torch.nn.init.normal_(target_net.value_head[-1].weight, std=0.5)
    ref, context, targets = batch(config, net, replay, rng, target_net=target_net)
    assert targets.num_searches == 0  # nothing searched: predicted values, stored policies
    cells = context.bootstrap_index >= 0
    assert cells.any()
    observations = np.stack([ref.segments[b].observation(int(context.bootstrap_index[b, u]))
                             for b, u in zip(*np.nonzero(cells))])
    predicted = TorchInference(target_net).root(observations).value
    assert np.abs(predicted - 7.0).min() > 1  # distinguishable from the stored values
    bootstrap = np.zeros_like(context.value_partial)
    bootstrap[cells] = predicted
    np.testing.assert_allclose(targets.value, context.value_partial + context.bootstrap_discount * bootstrap,
                               rtol=1e-5, atol=1e-5)
    on = small_config("train.reanalyze_policy_ratio=0")
    net_on, replay_on, rng_on = setup(on)
    _, context_on, targets_on = batch(on, net_on, replay_on, rng_on)
    assert targets_on.num_searches == int((context_on.bootstrap_index >= 0).sum()) > 0


def test_mixed_value_target_bootstraps_recent_data_from_the_network_and_old_data_from_a_search():
    """train.value_target=mixed (EfficientZero V2): recent samples get the k-step target with
    the target network's predicted value (no search); old ones the search value of the
    position itself (l = 0), one search per such cell."""
    from ez_robot.targets import value_horizons

    config = small_config("train.value_target=mixed", "train.reanalyze_policy_ratio=0")
    t, searched = config.train, search_config(config)
    net, replay, rng = setup(config)
    target_net = copy.deepcopy(net).eval()
    with torch.no_grad():  # a value head whose predictions differ between observations
        torch.nn.init.normal_(target_net.value_head[-1].weight, std=0.5)
    ref = replay.sample(t.batch_size, 0.4, rng)
    collected = np.where(np.arange(t.batch_size) % 2 == 0, 990, 0)  # at step 1000 of 1000: even recent, odd old
    horizons, network = value_horizons(collected, 1000, 1000, t), network_bootstraps(collected, 1000, 1000, t)
    np.testing.assert_array_equal(network, np.arange(t.batch_size) % 2 == 0)
    np.testing.assert_array_equal(horizons, np.where(network, t.td_steps, 0))
    context = gather_batch(ref, unroll_steps=t.unroll_steps, horizons=horizons, discount=searched.discount,
                           lstm_horizon=searched.lstm_horizon, num_actions=ACTIONS, rng=rng,
                           network_bootstrap=network)
    inference = TorchInference(target_net)
    targets = reanalyze(context, inference, searched, rng, policy_ratio=0.0)
    cells = context.bootstrap_index >= 0
    by_network, by_search = cells & network[:, None], cells & ~network[:, None]
    assert by_network.any() and by_search.any()
    assert targets.num_searches == int(by_search.sum())  # nothing searched for the recent samples
    observations = lambda mask: np.stack([ref.segments[b].observation(int(context.bootstrap_index[b, u]))
                                          for b, u in zip(*np.nonzero(mask))])
    predicted = inference.root(observations(by_network)).value
    np.testing.assert_allclose(targets.value[by_network], context.value_partial[by_network]
                               + context.bootstrap_discount[by_network] * predicted, rtol=1e-5, atol=1e-5)
    # old samples: z is the search's root value of o_{t+u} itself, not the network's prediction
    assert (context.value_partial[by_search] == 0).all() and (context.bootstrap_discount[by_search] == 1).all()
    np.testing.assert_array_equal(context.bootstrap_index[by_search], np.array(
        [ref.positions[b] + u for b, u in zip(*np.nonzero(by_search))]))
    assert not np.allclose(targets.value[by_search], inference.root(observations(by_search)).value, atol=1e-3)


def test_non_finite_loss_stops_before_the_weights_change():
    config = small_config()
    net, replay, rng = setup(config)
    ref, context, targets = batch(config, net, replay, rng)
    targets.value[0, 0] = np.nan
    before = copy.deepcopy(net.state_dict())
    with pytest.raises(FloatingPointError, match="non-finite value target"):
        Learner(net, config, 100, torch.device("cpu")).step(context, targets, ref.weights)
    for name, value in net.state_dict().items():
        if "running" not in name and "num_batches" not in name:  # BN statistics move in any forward pass
            assert torch.equal(value, before[name]), name


def test_the_learner_stacks_the_frames_of_a_context_as_the_segments_do():
    # a stacked batch travels as frames and is stacked on the learner's device: every
    # observation the step trains on (within the data) is the segment's own observation
    stack, config = 3, small_config()
    rng = np.random.default_rng(0)
    net = make_network((stack * STATES,), ACTIONS, config.model, value_prefix=config.train.value_prefix)
    replay = ReplayBuffer(config.replay)
    for _ in range(10):
        frames = rng.normal(size=(stack + EPISODE, STATES)).astype(np.float32)
        replay.add(dataclasses.replace(mdp_segment(rng), frames=frames, frame_stack=stack))
    ref, context, targets = batch(config, net, replay, rng)
    learner, seen = Learner(net, config, 100, torch.device("cpu")), []
    learner._augment = lambda obs: seen.append(obs.clone()) or obs
    learner.step(context, targets, ref.weights)
    trained = seen[0].reshape(context.observations.shape).numpy()
    np.testing.assert_array_equal(trained, context.observations)
    for b, (segment, t) in enumerate(zip(ref.segments, ref.positions)):
        for u in range(min(config.train.unroll_steps + 1, segment.num_moves + 1 - t)):
            np.testing.assert_array_equal(trained[b, u], segment.observation(t + u))


def test_augment_shifts_and_keeps_dtype():
    frames = torch.zeros(6, 3, 16, 16, dtype=torch.uint8)
    frames[:, :, 6:10, 6:10] = 200
    out = augment(frames, torch.Generator().manual_seed(0))
    assert out.dtype == torch.uint8 and out.shape == frames.shape
    centers = [(o[0] > 100).nonzero().float().mean(0) for o in out]
    assert any((c - torch.tensor([7.5, 7.5])).abs().max() >= 1 for c in centers)  # moved
    assert all((c - torch.tensor([7.5, 7.5])).abs().max() <= 4 for c in centers)  # by at most 4 px


def test_self_play_that_stops_mid_episode_keeps_every_move(tmp_path):
    """cartpole episodes last 125 decisions: a 100-decision budget ends inside the first
    one, and its moves must still reach replay (as a truncation that bootstraps)."""
    from ez_robot.run_files import RunFiles
    from ez_robot.trainer import _Run

    tiny = ["model.latent_dim=16", "model.mlp_hidden=32", "model.head_hidden=16", "model.lstm_hidden=16",
            "model.projection_hidden=32", "model.projection_out=32", "model.support_size=10",
            "search.num_simulations=2", "replay.min_replay_size=100"]
    config = load_config("cartpole_swingup", budget="800", overrides=tiny)
    run = _Run(config, torch.device("cpu"), num_envs=2)
    files = RunFiles(tmp_path, config)
    while run.counters.agent_steps < config.agent_steps_budget:
        run.collect(files)
    files.close()
    assert run.counters.agent_steps == 100 and run.counters.episodes == 0
    assert len(run.replay) == 100 and run.replay.ready()  # 50 decisions in each of the 2 envs


def test_a_learner_step_reads_the_device_once(monkeypatch):
    """The finite checks, the metrics and the priorities come back in one transfer: on a GPU
    each read of a result waits for everything queued before it.  Counted here as the
    learner's and the loss's own reads of tensor values (torch's optimizer keeps its step
    counters on the CPU and is left out)."""
    import sys

    config = small_config()
    net, replay, rng = setup(config)
    ref, context, targets = batch(config, net, replay, rng)
    learner = Learner(net, config, 1000, torch.device("cpu"))
    learner.step(context, targets, ref.weights)  # warm: lazy state
    reads = []

    def counting(name):
        original = getattr(torch.Tensor, name)

        def read(self, *args, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if "ez_robot" in caller:
                reads.append((name, caller.rsplit("/", 1)[-1], sys._getframe(1).f_lineno))
            return original(self, *args, **kwargs)
        return read

    for name in ("item", "cpu", "numpy", "tolist", "__bool__", "__float__"):
        monkeypatch.setattr(torch.Tensor, name, counting(name))
    metrics, priorities = learner.step(context, targets, ref.weights)
    monkeypatch.undo()
    assert [r[0] for r in reads] == ["cpu", "numpy"], reads  # one transfer, then its numpy view
    assert np.isfinite(list(metrics.values())).all() and priorities.shape == (len(ref.weights),)
