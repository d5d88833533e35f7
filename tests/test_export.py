"""Export and the onboard runtime: ONNX bundles of tiny models, searched on onnxruntime.

The networks are tiny and their weights perturbed away from the zero-initialized heads
(which would make every value and every policy the same), so that a wrong graph would
change the numbers and the actions."""
import hashlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import ez_robot
from ez_robot import search
from ez_robot.builders import EnvSpec
from ez_robot.config import load_config, search_config
from ez_robot.errors import ConfigError
from ez_robot.envs import make_from_config
from ez_robot.envs.wrappers import discrete_action_table
from ez_robot.export import onnx_export, onnx_graphs
from ez_robot.export.bundle import FORMAT_NAME, FORMAT_VERSION, INITIAL, RECURRENT, Manifest
from ez_robot.export.onnx_export import ExportError, export_model, export_run
from ez_robot.export.runtime import BundleError, ObservationError, Policy
from ez_robot.torch_inference import TorchInference
from ez_robot.networks import make_network, support_to_scalar

ROOT = Path(__file__).resolve().parents[1]
TINY_MODEL = ["model.latent_dim=16", "model.mlp_hidden=32", "model.head_hidden=16", "model.lstm_hidden=16",
              "model.projection_hidden=16", "model.projection_out=16", "model.support_size=10",
              "model.num_channels=8", "model.reduced_channels=4", "search.num_simulations=12"]


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # torch's threads spin against a busy second core
    yield
    torch.set_num_threads(threads)


def tiny_model(task, obs="state", overrides=()):
    config = load_config(task, obs=obs, overrides=[*TINY_MODEL, *overrides])
    env = make_from_config(config.env)
    spec = EnvSpec.of(env, config.env)
    env.close()
    torch.manual_seed(0)
    net = make_network(spec.obs_shape, spec.action, config.model, value_prefix=config.train.value_prefix)
    with torch.no_grad():
        for parameter in net.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.2)
        for module in net.modules():  # BatchNorm statistics away from (0, 1) too
            if isinstance(module, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
                module.running_mean.normal_(0, 0.2)
                module.running_var.uniform_(0.5, 2.0)
    return net.eval(), config


def save_checkpoint(run_dir, net, config):
    from ez_robot.builders import EnvSpec, make_learner
    from ez_robot.checkpoint import write_checkpoint
    from ez_robot.schedules import Counters

    spec = EnvSpec(tuple(net.obs_shape), net.action_spec)
    write_checkpoint(run_dir, trainer="single", config=config, spec=spec, counters=Counters(123, 984),
                     learner=make_learner(config, spec, "cpu", weights=net.state_dict()).state_dict(), replay=None)
    return run_dir


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    """cartpole_swingup from states: a run directory with a checkpoint, exported in process."""
    net, config = tiny_model("cartpole_swingup")
    run_dir = save_checkpoint(tmp_path_factory.mktemp("runs") / "cartpole", net, config)
    manifest = export_run(run_dir, observations=16)
    return {"net": net, "config": config, "run_dir": run_dir, "bundle": run_dir / "bundle", "manifest": manifest}


@pytest.fixture(scope="module")
def pixels(tmp_path_factory):
    """atari:Pong from small frames (32x32 RGB, 4 stacked: uint8 [12, 32, 32])."""
    net, config = tiny_model("atari:Pong", "pixels", ["env.frame_size=32"])
    bundle = tmp_path_factory.mktemp("pong") / "bundle"
    return {"net": net, "config": config, "bundle": bundle, "manifest": export_model(net, config, bundle,
                                                                                     observations=8)}


@pytest.fixture(scope="module")
def no_prefix(tmp_path_factory):
    """gym:CartPole-v1 with the value-prefix ablation (per-step rewards, no LSTM)."""
    net, config = tiny_model("gym:CartPole-v1", overrides=["train.value_prefix=false"])
    bundle = tmp_path_factory.mktemp("cartpole-gym") / "bundle"
    return {"net": net, "config": config, "bundle": bundle, "manifest": export_model(net, config, bundle,
                                                                                     observations=8)}


@pytest.fixture(scope="module")
def fine_prefix(tmp_path_factory):
    """cartpole_swingup with a value-prefix support of its own (10 bins per unit of h) and a
    value support of 2 bins per unit."""
    net, config = tiny_model("cartpole_swingup", overrides=["model.reward_support_size=4",
                                                            "model.reward_support_scale=10",
                                                            "model.value_support_scale=2"])
    assert net.reward_support == (4, 10) and net.value_support == (10, 2)
    bundle = tmp_path_factory.mktemp("cartpole-fine") / "bundle"
    return {"net": net, "config": config, "bundle": bundle, "manifest": export_model(net, config, bundle,
                                                                                     observations=8)}


@pytest.fixture(scope="module")
def residual(tmp_path_factory):
    """cartpole_swingup with EfficientZero V2's residual state body."""
    net, config = tiny_model("cartpole_swingup", overrides=["model.state_body=residual"])
    assert net.residual_body
    bundle = tmp_path_factory.mktemp("cartpole-residual") / "bundle"
    return {"net": net, "config": config, "bundle": bundle, "manifest": export_model(net, config, bundle,
                                                                                     observations=8)}


def observations_for(net, batch, seed=0):
    rng = np.random.default_rng(seed)
    if net.pixels:
        return rng.integers(0, 256, (batch, *net.obs_shape), dtype=np.uint8)
    return rng.standard_normal((batch, *net.obs_shape)).astype(np.float32)


def torch_greedy_search(net, config, observations):
    inference = TorchInference(net, "cpu")
    greedy = search_config(config).replace(add_noise=False, temperature=0.0)
    return search(inference.root(observations), inference.recurrent_fn, greedy, np.random.default_rng(0))


# --- the bundle --------------------------------------------------------------------------

def test_export_writes_a_validated_bundle_with_its_manifest(state):
    bundle, manifest = state["bundle"], state["manifest"]
    assert sorted(p.name for p in bundle.iterdir()) == ["initial.onnx", "manifest.json", "recurrent.onnx"]
    assert json.loads((bundle / "manifest.json").read_text()) == manifest
    assert (manifest["format"], manifest["format_version"]) == (FORMAT_NAME, FORMAT_VERSION) == ("ez-robot-bundle", 2)
    assert manifest["ez_robot_version"] == ez_robot.__version__ and manifest["opset"] == onnx_graphs.OPSET
    assert manifest["task"] == "cartpole_swingup" and manifest["counters"]["agent_steps"] == 123
    assert manifest["observation"] == {"shape": [5], "dtype": "float32", "kind": "state", "layout": None,
                                       "normalized_in_graph": True}  # the dmc_state preset normalizes states
    action = manifest["action"]
    assert action["kind"] == "continuous" and action["num_actions"] == 5 and action["bins_per_dim"] == 5
    assert action["low"] == [-1.0] and action["high"] == [1.0]
    assert action["values_per_dim"] == [[-1.0, -0.5, 0.0, 0.5, 1.0]]
    np.testing.assert_array_equal(action["table"], discrete_action_table([-1.0], [1.0], 5))
    assert manifest["action_repeat"] == 8 and manifest["control_period_s"] == pytest.approx(0.08)
    assert manifest["support_size"] == 10 and manifest["value_prefix"] is True
    assert manifest["search"]["num_simulations"] == 12 and manifest["search"]["discount"] == 0.99
    for name in ("initial.onnx", "recurrent.onnx"):
        assert manifest["files"][name] == hashlib.sha256((bundle / name).read_bytes()).hexdigest()
    check = manifest["validation"]
    assert check["observations"] == 16 and check["within_tolerance"]
    assert max(check["max_abs_diff"].values()) < 1e-4
    assert check["actions_equal"] == 16 and check["mismatched"] == []
    assert not list(bundle.parent.glob(".bundle.partial-*"))  # no staging directory left behind


@pytest.mark.parametrize("case", ["state", "pixels", "no_prefix", "fine_prefix", "residual"])
@pytest.mark.parametrize("batch", [1, 7])
def test_onnx_outputs_match_torch_within_tolerance(case, batch, request):
    """Both graphs, at a batch size the export never saw, from a used LSTM state."""
    fixture = request.getfixturevalue(case)
    net, policy = fixture["net"], Policy.load(fixture["bundle"])
    rng = np.random.default_rng(batch)
    obs = observations_for(net, batch, seed=batch)
    h, c = (rng.standard_normal((batch, net.lstm_hidden)).astype(np.float32) for _ in range(2))
    actions = rng.integers(0, net.num_actions, batch)
    reset = (np.arange(batch) % 2).astype(np.float32)
    with torch.no_grad():
        init = net.initial_inference(torch.as_tensor(obs))
        keep = torch.as_tensor(1 - reset)[:, None]
        lstm = (torch.as_tensor(h) * keep, torch.as_tensor(c) * keep)
        rec = net.recurrent_inference(init.hidden, lstm, torch.as_tensor(actions))
    expected = [init.hidden, support_to_scalar(init.value_logits, *net.value_support), init.policy_logits,
                rec.hidden, *rec.lstm_state,
                support_to_scalar(rec.value_prefix_logits, *net.reward_support),
                support_to_scalar(rec.value_logits, *net.value_support), rec.policy_logits]
    hidden, value, logits = policy.networks.initial(obs)
    got = [hidden, value, logits, *policy.networks.recurrent(hidden, h, c, actions, reset)]
    for ours, theirs in zip(got, expected):
        theirs = theirs.numpy()
        assert ours.shape == theirs.shape and ours.dtype == np.float32
        assert np.abs(ours - theirs).max() <= onnx_export.ATOL + onnx_export.RTOL * np.abs(theirs).max()
    assert np.abs(value).max() > 0.01 and np.abs(logits).std() > 0.01  # the check was not on zeros


@pytest.mark.parametrize("case", ["state", "pixels", "no_prefix", "fine_prefix", "residual"])
def test_runtime_picks_the_torch_search_actions(case, request):
    fixture = request.getfixturevalue(case)
    net, config = fixture["net"], fixture["config"]
    policy = Policy.load(fixture["bundle"])
    obs = observations_for(net, 12, seed=1)
    reference = torch_greedy_search(net, config, obs)
    expected = reference.actions
    decision = policy.decide(obs)
    np.testing.assert_array_equal(decision.indices, expected)
    np.testing.assert_array_equal(decision.search.visit_counts, reference.visit_counts)
    np.testing.assert_allclose(decision.root_values, reference.root_values, rtol=1e-4, atol=1e-4)
    assert (decision.simulations == 12).all()
    assert len(np.unique(decision.root_values)) == len(obs)  # not a comparison of constants
    if policy.continuous:  # DMC: the vectors of the chosen bins
        table = np.asarray(fixture["manifest"]["action"]["table"])
        np.testing.assert_array_equal(policy.act_batch(obs), table[expected])
        single = policy.act(obs[3])
        assert single.shape == (1,) and single.dtype == np.float64 and single[0] == table[expected[3]][0]
    else:
        np.testing.assert_array_equal(policy.act_batch(obs), expected)
        assert policy.act(obs[3]) == expected[3] and isinstance(policy.act(obs[3]), int)


def test_a_batch_decides_as_each_observation_alone(state):
    policy = Policy.load(state["bundle"], preset="throughput")
    obs = observations_for(state["net"], 6, seed=2)
    alone = [policy.decide(o[None]).indices[0] for o in obs]
    np.testing.assert_array_equal(policy.decide(obs).indices, alone)


def test_the_runtime_never_imports_torch(state):
    code = (f"import sys, numpy as np\n"
            f"from ez_robot.export.runtime import Policy\n"
            f"from ez_robot.export.controller import run_loop\n"
            f"policy = Policy.load({str(state['bundle'])!r})\n"
            f"action = policy.act(np.zeros(5, np.float32), deadline_ms=50)\n"
            f"assert action.shape == (1,), action\n"
            f"loaded = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))\n"
            f"assert not loaded, loaded\n"
            f"print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


# --- anytime search ----------------------------------------------------------------------

def test_a_deadline_returns_the_best_action_so_far_and_says_how_far_it_got(state, monkeypatch):
    policy = Policy.load(state["bundle"])
    obs = observations_for(state["net"], 3, seed=3)
    full = policy.decide(obs, deadline_ms=10_000)
    assert (full.simulations == 12).all()

    none = policy.decide(obs, deadline_ms=0)
    assert (none.simulations == 0).all() and (none.search.visit_counts == 0).all()
    _, _, logits = policy.networks.initial(obs)
    np.testing.assert_array_equal(none.indices, logits.argmax(axis=1))  # the prior's choice

    # a clock that moves only while the model runs, 7 ms per simulation: the test reads the
    # search's logic, not this machine's speed (the controller benchmark times the real thing)
    now, step = [1000.0], policy.networks.recurrent_fn

    def slow_recurrent_fn(*args):
        now[0] += 0.007
        return step(*args)

    monkeypatch.setattr(time, "perf_counter", lambda: now[0])
    policy.networks.recurrent_fn = slow_recurrent_fn
    partial = policy.decide(obs, num_simulations=50, deadline_ms=30)
    # four simulations end at 28 ms, the fifth starts before the deadline and ends at 35 ms,
    # and none starts after it
    assert (partial.simulations == 5).all() and policy.last is partial
    np.testing.assert_array_equal(partial.search.visit_counts.sum(axis=1), [5] * 3)
    assert partial.indices.tolist() == partial.search.visit_counts.argmax(axis=1).tolist()
    assert partial.elapsed_ms == pytest.approx(35.0)


def test_a_nan_or_negative_deadline_is_refused_not_ignored(state):
    """Compared with the clock, a NaN deadline never stops the search (every simulation
    ran) and a negative one stops it before it starts: both are mistakes, named."""
    policy = Policy.load(state["bundle"])
    obs = observations_for(state["net"], 1, seed=4)[0]
    for bad in (float("nan"), -1.0, "5"):
        with pytest.raises(ConfigError, match=r"deadline_ms must be a time in milliseconds >= 0 .*, got "):
            policy.act(obs, deadline_ms=bad)
    with pytest.raises(ConfigError, match=r"deadline_ms must be .* got nan"):
        policy.decide(obs[None], deadline_ms=float("nan"))
    with pytest.raises(ConfigError, match=r"deadline_ms must be .* got -5"):
        Policy.load(state["bundle"], deadline_ms=-5)
    assert policy.decide(obs[None], deadline_ms=float("inf")).simulations.tolist() == [12]  # no limit


# --- errors ------------------------------------------------------------------------------

def test_bad_observations_are_named(state, pixels):
    policy = Policy.load(state["bundle"])
    with pytest.raises(ObservationError, match=r"shape \(4,\), this policy takes \(5,\)"):
        policy.act(np.zeros(4, np.float32))
    with pytest.raises(ObservationError, match=r"shape \(5,\), expected \[B, 5\]"):
        policy.act_batch(np.zeros(5, np.float32))
    with pytest.raises(ObservationError, match="empty batch"):
        policy.act_batch(np.zeros((0, 5), np.float32))
    with pytest.raises(ObservationError, match="must be floating point"):
        policy.act(np.zeros(5, np.int64))
    with pytest.raises(ObservationError, match=r"NaN or infinite values \(batch rows \[1\]\)"):
        policy.act_batch(np.array([[0, 0, 0, 0, 0], [0, np.nan, 0, 0, 0]], np.float32))
    with pytest.raises(ObservationError, match="NaN or infinite"):
        policy.act(np.array([0, 0, np.inf, 0, 0]))
    assert policy.act(np.zeros(5, np.float64)).shape == (1,)  # float64 sensors are fine

    pixel_policy = Policy.load(pixels["bundle"])
    with pytest.raises(ObservationError, match="pixel observations must be uint8"):
        pixel_policy.act(np.zeros(pixels["net"].obs_shape, np.float32))


def corrupt(bundle, tmp_path, change):
    broken = tmp_path / "broken"
    shutil.copytree(bundle, broken)
    change(broken)
    return broken


def edit_manifest(**fields):
    def change(bundle):
        manifest = json.loads((bundle / "manifest.json").read_text())
        manifest.update(fields)
        (bundle / "manifest.json").write_text(json.dumps(manifest))
    return change


def flip_a_byte(bundle):
    data = bytearray((bundle / "recurrent.onnx").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (bundle / "recurrent.onnx").write_bytes(bytes(data))


def garbage_with_its_hash(bundle):
    (bundle / "initial.onnx").write_bytes(b"not an onnx graph")
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["files"]["initial.onnx"] = hashlib.sha256(b"not an onnx graph").hexdigest()
    (bundle / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("change,message", [
    (lambda b: shutil.rmtree(b), "no bundle at"),
    (lambda b: (b / "manifest.json").unlink(), "has no manifest.json"),
    (lambda b: (b / "manifest.json").write_text("{\"format\": "), "corrupt: not valid JSON"),
    (lambda b: (b / "manifest.json").write_text("[]"), "not an ez-robot bundle manifest"),
    (lambda b: (b / "recurrent.onnx").unlink(), "is missing recurrent.onnx"),
    (flip_a_byte, "does not match the manifest's sha256"),
    (edit_manifest(format_version=3), "bundle format version 3 .* this runtime reads versions 1, 2"),
    (edit_manifest(format="something-else"), "has format 'something-else'"),
    (garbage_with_its_hash, "onnxruntime cannot load .*initial.onnx"),
    (edit_manifest(search={"num_simulations": 5, "c3": 1.0}), "the search settings are not valid: .*c3"),
    (edit_manifest(files=None), "'files' must be an object, got None"),
    (edit_manifest(search={"num_simulations": -3}), r"search settings are not valid: .*num_simulations must be in"),
    (edit_manifest(observation={"shape": [6], "dtype": "float32", "kind": "state"}),
     r"says observations have shape \[6\], but initial.onnx takes \[5\]"),
    (edit_manifest(observation={"shape": [5], "dtype": "uint8", "kind": "state"}),
     "says observations are uint8, but initial.onnx takes float32"),
    (edit_manifest(observation={"shape": "5", "dtype": "float32"}), "observation.shape must be a list"),
    (edit_manifest(action={"kind": "discrete", "num_actions": 7}),
     r"says the actions are joint discrete \(7 actions\) \(7 policy outputs\), but initial.onnx gives 5"),
    (edit_manifest(action={"kind": "continuous", "num_actions": 2, "spec": {"mode": "gaussian", "dims": 1},
                           "low": [-1.0], "high": [1.0]}),
     r"says the actions are gaussian \(1 dims\) \(2 policy outputs\), but initial.onnx gives 5"),
    (edit_manifest(action={"kind": "continuous", "num_actions": 2, "spec": {"mode": "gaussian", "dims": 2},
                           "low": [-1.0], "high": [1.0]}),
     "a gaussian bundle needs kind 'continuous' and action.low and action.high with 2 values each"),
    (edit_manifest(action={"kind": "continuous", "num_actions": 2, "spec": {"mode": "sideways", "dims": 2}}),
     "action.spec is not a valid action mode"),
])
def test_unusable_bundles_are_named(state, tmp_path, change, message):
    with pytest.raises(BundleError, match=message):
        Policy.load(corrupt(state["bundle"], tmp_path, change))


@pytest.mark.parametrize("case", ["state", "pixels", "no_prefix"])
def test_the_manifest_round_trips_through_its_dataclass(case, request):
    """The exporter writes and the runtime reads one format: every key of a written
    manifest survives Manifest.from_json -> to_json, and the runtime's graphs have the
    names bundle.py gives."""
    fixture = request.getfixturevalue(case)
    data = json.loads((fixture["bundle"] / "manifest.json").read_text())
    manifest = Manifest.from_json(data, fixture["bundle"] / "manifest.json")
    assert manifest.to_json() == data == fixture["manifest"]
    assert manifest.observation.shape == tuple(fixture["net"].obs_shape)
    assert manifest.action_spec == fixture["net"].action_spec and manifest.search.num_simulations == 12
    assert Manifest.from_json({**data, "note": {"robot": "arm-2"}}).to_json()["note"] == {"robot": "arm-2"}
    policy = Policy.load(fixture["bundle"])
    assert policy.manifest == data
    for graph, session in [(INITIAL, policy.networks._initial), (RECURRENT, policy.networks._recurrent)]:
        assert tuple(i.name for i in session.get_inputs()) == graph.inputs
        assert tuple(o.name for o in session.get_outputs()) == graph.outputs


def test_unknown_preset(state):
    with pytest.raises(ValueError, match="preset must be one of latency, throughput"):
        Policy.load(state["bundle"], preset="fast")


def test_a_bundle_directory_that_cannot_be_made_is_named(state, tmp_path):
    (tmp_path / "a-file").write_text("")
    with pytest.raises(ExportError, match="cannot write the bundle at .*a-file/bundle: Not a directory"):
        export_run(state["run_dir"], tmp_path / "a-file" / "bundle", observations=4)


def test_a_failed_check_writes_no_bundle(state, tmp_path, monkeypatch):
    monkeypatch.setattr(onnx_export, "ATOL", -1.0)  # every output now "differs"
    with pytest.raises(ExportError, match="ONNX outputs differ from torch .* the bundle was not written"):
        export_model(state["net"], state["config"], tmp_path / "bundle", observations=2)
    assert list(tmp_path.iterdir()) == []


# --- command line and example --------------------------------------------------------------

def ez(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "ez_robot.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_cli_export_then_run(state, tmp_path):
    bundle = tmp_path / "exported"
    out = ez("export", str(state["run_dir"]), "-o", str(bundle), "--observations", "4")
    assert out.returncode == 0, out.stderr
    assert "greedy 12-simulation actions equal to torch's: 4/4" in out.stdout and f"wrote {bundle}" in out.stdout
    assert json.loads((bundle / "manifest.json").read_text())["files"] == state["manifest"]["files"]

    out = ez("run", str(bundle), "--rate", "500", "--simulations", "4")
    assert out.returncode == 0, out.stderr
    assert "1 episode(s), mean return" in out.stdout and "125 decisions at" in out.stdout
    assert "missed deadline(s)" in out.stdout


def test_cli_run_writes_a_video_of_the_episode(state, tmp_path):
    video = tmp_path / "videos" / "run.mp4"
    out = ez("run", str(state["bundle"]), "--rate", "500", "--simulations", "2", "--video", str(video))
    assert out.returncode == 0, out.stderr
    assert f"video: {video}" in out.stdout and "125 decisions at" in out.stdout
    import imageio.v2 as imageio

    reader = imageio.get_reader(video, format="FFMPEG")
    try:
        frames = [frame.shape for frame in reader]
    finally:
        reader.close()
    assert len(frames) == 126 and frames[0][2] == 3  # the reset and each of the 125 decisions


@pytest.mark.parametrize("args,message", [
    (["export", "no-such-run"], "no-such-run is not a directory"),
    (["run", "no-such-bundle"], "no bundle at no-such-bundle"),
    (["run", "{bundle}", "--task", "cartpol_swingup"], "did you mean: cartpole_swingup"),
    (["run", "{bundle}", "--task", "reacher_easy"],
     "reacher_easy does not fit this bundle: it gives observations of shape (6,) and actions Discrete(25), the "
     "bundle takes (5,) and joint discrete (5 actions) actions"),
])
def test_cli_user_errors_are_messages_not_tracebacks(state, args, message):
    out = ez(*[a.format(bundle=state["bundle"]) for a in args])
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert message in out.stderr


def test_controller_loop_example(state):
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "controller_loop.py"), str(state["bundle"]),
                          "--rate", "500"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "episode 0: return" in out.stdout and "missed deadlines:" in out.stdout and "achieved" in out.stdout


def test_onnx_inference_follows_the_weights_it_is_refreshed_with():
    """Training searches on onnxruntime: the graphs match torch, and after the weights
    change they match again once refreshed (not before)."""
    from ez_robot.inference import OnnxInference

    net, _ = tiny_model("cartpole_swingup")
    torch_inference, onnx_inference = TorchInference(net), OnnxInference(net)
    obs = observations_for(net, 6)

    def values(inference):
        root = inference.root(obs)
        step = inference.recurrent_fn(root.hidden, np.arange(6) % net.num_actions, np.zeros(6, bool))
        return np.concatenate([root.value, step[1], step[2], step[3].ravel()])

    np.testing.assert_allclose(values(onnx_inference), values(torch_inference), rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        for parameter in net.parameters():
            parameter.add_(0.3)
    assert np.abs(values(onnx_inference) - values(torch_inference)).max() > 1e-2  # still the old weights
    onnx_inference.refresh()
    np.testing.assert_allclose(values(onnx_inference), values(torch_inference), rtol=1e-4, atol=1e-4)


# --- the sampled action modes (many joints) --------------------------------------------------

@pytest.fixture(scope="module", params=["gaussian", "factorized"])
def sampled(request, tmp_path_factory):
    """walker_walk (6 action dimensions) in a sampled action mode, exported from a run."""
    net, config = tiny_model("walker_walk", overrides=[f"env.action_mode={request.param}", "env.factorized_bins=5",
                                                       "search.num_candidates=6"])
    run_dir = save_checkpoint(tmp_path_factory.mktemp("runs") / f"walker-{request.param}", net, config)
    manifest = export_run(run_dir, observations=8)
    return {"net": net, "config": config, "run_dir": run_dir, "bundle": run_dir / "bundle", "manifest": manifest,
            "mode": request.param}


def test_a_sampled_bundle_acts_within_the_bounds_as_the_torch_search_does(sampled):
    net, config, manifest = sampled["net"], sampled["config"], sampled["manifest"]
    action = manifest["action"]
    assert action["kind"] == "continuous" and action["mode"] == sampled["mode"] and action["dims"] == 6
    assert action["low"] == [-1.0] * 6 and action["high"] == [1.0] * 6 and "table" not in action
    check = manifest["validation"]
    assert check["within_tolerance"] and check["actions_equal"] == 8 and check["mismatched"] == []

    policy = Policy.load(sampled["bundle"], seed=3)
    assert policy.action_spec == net.action_spec
    obs = observations_for(net, 5, seed=4)
    greedy = search_config(config).replace(add_noise=False, temperature=0.0)
    inference = TorchInference(net, "cpu")
    reference = search(inference.root(obs), inference.recurrent_fn, greedy, np.random.default_rng(3),
                       action_spec=net.action_spec)
    decision = policy.decide(obs)
    np.testing.assert_allclose(decision.agent_actions, reference.actions, atol=1e-3)
    assert decision.actions.shape == (5, 6) and decision.actions.dtype == np.float64
    assert np.all(np.abs(decision.actions) <= 1.0)
    # the chosen candidate's index points at the action taken
    np.testing.assert_array_equal(decision.search.candidates[np.arange(5), decision.indices], decision.agent_actions)
    assert len(np.unique(decision.actions.round(4), axis=0)) > 1  # not one constant action
    # the candidates come from the policy's own seeded generator: a second load decides the same
    np.testing.assert_array_equal(Policy.load(sampled["bundle"], seed=3).decide(obs).actions, decision.actions)
    single = policy.act(obs[0])
    assert single.shape == (6,) and single.dtype == np.float64


def test_a_sampled_decision_maps_onto_the_robots_bounds(sampled, tmp_path):
    bundle = tmp_path / "bundle"
    shutil.copytree(sampled["bundle"], bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["action"]["low"], manifest["action"]["high"] = [0.0] * 6, [10.0] * 6
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    obs = observations_for(sampled["net"], 4, seed=5)
    normalized = Policy.load(sampled["bundle"]).decide(obs).actions
    scaled = Policy.load(bundle).decide(obs).actions
    np.testing.assert_allclose(scaled, (normalized + 1.0) * 5.0, atol=1e-9)


def test_a_version_1_bundle_still_loads_as_joint_mode(state, tmp_path):
    bundle = tmp_path / "bundle"
    shutil.copytree(state["bundle"], bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["format_version"] = 1
    for key in ("mode", "spec"):
        del manifest["action"][key]
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    old = Policy.load(bundle)
    assert old.action_spec.mode == "joint" and old.action_spec.num_actions == 5
    obs = observations_for(state["net"], 6, seed=6)
    np.testing.assert_array_equal(old.act_batch(obs), Policy.load(state["bundle"]).act_batch(obs))


def test_cli_runs_a_sampled_bundle(sampled):
    out = ez("run", str(sampled["bundle"]), "--rate", "1000", "--simulations", "4", timeout=180)
    assert out.returncode == 0, out.stderr
    assert "1 episode(s), mean return" in out.stdout and "500 decisions at" in out.stdout
