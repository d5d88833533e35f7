"""A user's own env (``package.module:factory``): its errors, its keyword arguments, a
short run through both trainers, the Python API, export and the onboard runtime on it,
and the running observation normalizer."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import ez_robot
from ez_robot import envs
from ez_robot.cli import main
from ez_robot.config import load_config
from ez_robot.errors import ConfigError, ObservationError
from ez_robot.networks import ObservationNormalizer
from tests.custom_envs import make_point

ROOT = Path(__file__).resolve().parents[1]
POINT = "tests.custom_envs:make_point"
TINY = ["replay.min_replay_size=40", "train.batch_size=8", "search.num_simulations=4", "search.num_candidates=4",
        "train.train_steps_per_agent_step=0.25", "train.eval_episodes=2", "model.latent_dim=16",
        "model.mlp_hidden=32", "model.head_hidden=16", "model.lstm_hidden=16", "model.projection_hidden=16",
        "model.projection_out=16", "model.support_size=10", "env.kwargs.horizon=10"]


@pytest.mark.parametrize("task,message", [
    ("no_such_package.robots:make", "no module named 'no_such_package.robots'"),
    ("tests.custom_envs:make_pointt", "has no 'make_pointt'; did you mean: make_point"),
    ("tests.custom_envs:make_raises", r"make_raises\(\) raised RuntimeError: the robot is not connected \(at "),
    ("tests.custom_envs:make_not_an_env", r"make_not_an_env\(\) returned a dict, not a gymnasium.Env"),
    ("tests/no_such_file.py:make", "no file tests/no_such_file.py"),
    ("tests.custom_envs:make_multidiscrete", "MultiDiscrete"),
    ("tests.custom_envs:make_unbounded", "unbounded actions"),
])
def test_bad_factories_are_messages_not_tracebacks(task, message, tmp_path):
    result = CliRunner().invoke(main, ["train", "--task", task, "--run-dir", str(tmp_path / "run"), "--quiet"])
    assert result.exit_code == 2, result.output
    assert re.search(message, result.output), result.output
    assert "Traceback" not in result.output and not (tmp_path / "run").exists()


def test_keyword_arguments_reach_the_factory():
    config = load_config(POINT, overrides=["env.kwargs.horizon=7", "env.kwargs.scale=2.5"])
    assert config.env.kwargs == {"horizon": 7, "scale": 2.5} and config.preset == "custom.yaml"
    env = envs.make_from_config(config.env, seed=0)
    env.reset(seed=0)
    steps = 1
    while not env.step(env.action_space.sample())[3]:
        steps += 1
    assert steps == 7 and env.unwrapped.scale == 2.5
    with pytest.raises(ConfigError, match=r"make_point\(bogus=1\) raised TypeError: .*bogus"):
        load_config(POINT, overrides=["env.kwargs.bogus=1"])


def test_a_factory_function_names_its_task():
    assert ez_robot.api.task_name(make_point) == POINT
    with pytest.raises(ConfigError, match="cannot be made again in another process"):
        ez_robot.api.task_name(lambda: make_point())


def test_the_normalizer_keeps_the_running_mean_and_std():
    rng = np.random.default_rng(0)
    data = rng.normal([1000.0, -3.0], [50.0, 0.01], size=(300, 2))
    norm = ObservationNormalizer(2)
    x = torch.tensor(data[:5], dtype=torch.float32)
    assert torch.equal(norm(x), x)  # the identity before any data
    for chunk in np.array_split(data, 7):
        norm.update(torch.tensor(chunk))
    np.testing.assert_allclose(norm.running_mean.numpy(), data.mean(0), rtol=1e-9)
    np.testing.assert_allclose((norm.running_m2 / norm.count).numpy(), data.var(0), rtol=1e-9)
    out = norm(torch.tensor(data, dtype=torch.float32)).numpy()
    np.testing.assert_allclose(out.mean(0), 0, atol=1e-3)
    np.testing.assert_allclose(out.std(0), 1, atol=1e-3)
    assert norm(torch.tensor([[1e9, 0.0]])).max() == 10.0  # clipped


@pytest.mark.parametrize("workers", [0, 1], ids=["single", "ray"])
def test_a_custom_env_trains_exports_and_runs(tmp_path, workers):
    """The point env (Dict observations in millimetres, actions in [-2, 2]) end to end through
    the Python API: train, load and act on the env's own observations, export, run the
    bundle on onnxruntime."""
    run = tmp_path / "run"
    kwargs = dict(reanalyze_workers=1) if workers else {}
    if workers:
        from ez_robot.ray_cluster import init_ray

        init_ray(num_cpus=2)
    try:
        path = ez_robot.train(POINT, budget=120, seed=1, overrides=TINY + ["env.action_mode=gaussian"], run_dir=run,
                              workers=workers, device="cpu", progress=False, log=None, checkpoint_interval=20,
                              **kwargs)
    finally:
        if workers:
            import ray

            ray.shutdown()
    assert path == run
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if r["kind"] == "eval"]
    assert evals and 0.0 <= evals[-1]["success_rate"] <= 1.0  # the env's is_success, reported

    agent = ez_robot.load(run, trust_task=True)  # the test named the factory
    normalizer = agent.net.normalizer
    assert normalizer.count > 0 and normalizer.shift.abs().max() > 10  # it saw millimetres
    env = make_point(horizon=10)
    obs, _ = env.reset(seed=4)
    action = agent.act(obs)  # the raw Dict observation in, a vector in the env's bounds out
    assert action.shape == (2,) and np.all(np.abs(action) <= 2.0)
    assert env.action_space.contains(action.astype(np.float32))
    fewer = ez_robot.load(run, search_overrides=["search.num_simulations=2"],  # as `ez-robot eval --set`
                          trust_task=True)
    assert fewer._search.num_simulations == 2 and agent._search.num_simulations != 2
    assert env.action_space.contains(fewer.act(obs).astype(np.float32))

    bundle = ez_robot.export_bundle(run, tmp_path / "bundle", observations=8, trust_task=True)
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["observation"]["layout"] == [
        {"key": "goal", "shape": [2], "start": 0, "size": 2}, {"key": "position", "shape": [2], "start": 2, "size": 2}]
    assert manifest["observation"]["normalized_in_graph"] and manifest["validation"]["within_tolerance"]
    assert manifest["action"]["low"] == [-2.0, -2.0] and manifest["control_period_s"] == pytest.approx(0.1)
    result = CliRunner().invoke(main, ["run", str(bundle), "--rate", "200", "--simulations", "4", "--trust-task"])
    assert result.exit_code == 0, result.output
    assert "return" in result.output

    from ez_robot.export.runtime import Policy

    policy = Policy.load(bundle)  # the robot side reads its sensors as a dict; the vector is the same
    flat = np.concatenate([obs["goal"], obs["position"]])
    np.testing.assert_array_equal(policy.flatten(obs), flat)
    np.testing.assert_allclose(policy.act(obs), Policy.load(bundle).act(flat))
    if workers == 0:  # evaluation with a video: the factory takes render_mode, so it renders
        report = ez_robot.evaluate(run, episodes=2, video=1, trust_task=True)
        assert report["episodes"] == 2 and 0.0 <= report["success_rate"] <= 1.0
        assert len(report["videos"]) == 1 and Path(report["videos"][0]).stat().st_size > 0
    if workers == 0:  # the controller example on this robot (once: it needs no trained weights of its own)
        out = subprocess.run([sys.executable, str(ROOT / "examples" / "controller_loop.py"), str(bundle),
                              "--rate", "200", "--trust-task"], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})  # where tests.custom_envs is
        assert out.returncode == 0, out.stderr
        assert "success rate" in out.stdout and "missed deadlines:" in out.stdout


def test_an_observation_that_changes_shape_stops_training_with_its_message(tmp_path):
    with pytest.raises(ObservationError, match="observations must keep one shape"):
        ez_robot.train("tests.custom_envs:make_shape_changer", budget=120, overrides=TINY[:-1], run_dir=tmp_path,
                       workers=0, device="cpu", progress=False, log=None)
