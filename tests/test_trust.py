"""Loading a run or a bundle never runs code the user did not name.

A run's saved config, or a bundle's manifest, may name a factory task (``module:factory``,
``file.py:factory``): making its env imports that module and calls the factory with the
stored ``env.kwargs``.  The payload here is the one a security review used:
``subprocess:getoutput`` with ``env.kwargs: {cmd: "touch PWNED"}``.  eval, export, run and
train --resume (and the Python API) refuse it with a one-line message unless the user
allows it (``--trust-task``, ``trust_task=True``, or the same ``--task``); registered tasks
load as they always did.  A module that exits on import is a message too."""
import dataclasses
import json

import pytest
import torch
from click.testing import CliRunner

import ez_robot
from ez_robot.builders import EnvSpec, make_learner
from ez_robot.checkpoint import load_run, write_checkpoint
from ez_robot.cli import main
from ez_robot.config import load_config, make_env
from ez_robot.envs.custom import load_factory
from ez_robot.errors import ConfigError, UntrustedTaskError
from ez_robot.export.onnx_export import export_model
from ez_robot.networks import make_network
from ez_robot.schedules import Counters

TINY = ["model.latent_dim=8", "model.mlp_hidden=16", "model.head_hidden=8", "model.lstm_hidden=8",
        "model.projection_hidden=8", "model.projection_out=8", "model.support_size=5", "search.num_simulations=2",
        "replay.min_replay_size=10", "train.batch_size=4", "train.eval_episodes=1"]
TASK = "subprocess:getoutput"


def payload(config, marker):
    """``config`` with the reviewer's payload as its task: running ``touch MARKER``."""
    return dataclasses.replace(config, env=dataclasses.replace(config.env, task=TASK,
                                                               kwargs={"cmd": f"touch '{marker}'"}))


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A CartPole run (a checkpoint of an untrained tiny network, 100 agent steps into a
    1k budget), the same checkpoint with the payload as its task, and a bundle of the
    network whose manifest names the payload."""
    root = tmp_path_factory.mktemp("trust")
    marker = root / "PWNED"
    config = load_config("gym:CartPole-v1", budget="1k", overrides=TINY)
    env = make_env("gym:CartPole-v1")
    spec = EnvSpec.of(env, config.env)
    env.close()
    torch.manual_seed(0)
    net = make_network(spec.obs_shape, spec.action, config.model, value_prefix=config.train.value_prefix).eval()
    learner = make_learner(config, spec, "cpu", weights=net.state_dict()).state_dict()
    for name, run_config in (("cartpole", config), ("shared", payload(config, marker))):
        write_checkpoint(root / name, trainer="single", config=run_config, spec=spec, counters=Counters(100, 100),
                         learner=learner, replay=None)
    bundle = root / "bundle"
    export_model(net, config, bundle, observations=2)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["task"] = TASK
    manifest["config"] = dataclasses.asdict(payload(config, marker))
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    return {"cartpole": root / "cartpole", "shared": root / "shared", "bundle": bundle, "marker": marker}


def invoke(*args):
    result = CliRunner().invoke(main, [str(arg) for arg in args])
    assert result.exit_code != 0 and isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    return result


def commands(made, tmp_path):
    return {"eval": ["eval", made["shared"], "--quiet", "--episodes", "1", "-o", tmp_path / "eval.json"],
            "export": ["export", made["shared"], "-o", tmp_path / "bundle"],
            "run": ["run", made["bundle"]],
            "resume": ["train", "--resume", made["shared"], "--workers", "0", "--quiet"]}


@pytest.mark.parametrize("command", ["eval", "export", "run", "resume"])
def test_a_factory_task_read_from_a_run_or_bundle_runs_nothing_unless_allowed(made, tmp_path, command):
    made["marker"].unlink(missing_ok=True)
    args = commands(made, tmp_path)[command]
    refused = invoke(*args)
    assert not made["marker"].exists()  # the command in the run's files did not run
    message = [line for line in refused.output.splitlines() if line.startswith("Error:")]
    assert len(message) == 1 and f"names the task {TASK}: using it would import subprocess and call " \
        "getoutput(cmd=" in message[0] and "add --trust-task" in message[0], refused.output

    allowed = invoke(*args, "--trust-task")  # the factory runs, then its answer (a str) is refused
    assert made["marker"].exists(), allowed.output
    assert "returned a str, not a gymnasium.Env" in allowed.output


@pytest.mark.parametrize("command", ["run", "resume"])
def test_the_same_task_on_the_command_line_allows_it(made, tmp_path, command):
    made["marker"].unlink(missing_ok=True)
    result = invoke(*commands(made, tmp_path)[command], "--task", TASK)
    assert made["marker"].exists(), result.output


def test_the_python_api_refuses_a_factory_task_unless_trusted(made, tmp_path):
    made["marker"].unlink(missing_ok=True)
    run = made["shared"]
    calls = [lambda **trust: ez_robot.load(run, **trust),
             lambda **trust: ez_robot.evaluate(run, episodes=1, out=tmp_path / "eval.json", **trust),
             lambda **trust: ez_robot.export_bundle(run, tmp_path / "bundle", observations=2, **trust),
             lambda **trust: ez_robot.train(resume=run, workers=0, progress=False, log=None, **trust)]
    for call in calls:
        with pytest.raises(UntrustedTaskError, match="trust_task=True"):
            call()
        assert not made["marker"].exists()
    for call in calls:
        with pytest.raises(ConfigError, match="returned a str"):
            call(trust_task=True)
        assert made["marker"].exists()
        made["marker"].unlink()


def test_registered_tasks_load_as_before(made):
    assert load_run(made["cartpole"]).config.env.task == "gym:CartPole-v1"  # no trust_task needed
    agent = ez_robot.load(made["cartpole"])
    assert agent.act(agent.observation_space.sample()) in (0, 1)


# --- a module that exits on import ------------------------------------------------------

def test_a_factory_module_that_exits_on_import_is_a_message(tmp_path, monkeypatch):
    (tmp_path / "exits_on_import.py").write_text("import sys\nsys.exit(3)\n\ndef make():\n    pass\n")
    with pytest.raises(ConfigError, match=r"loading .*exits_on_import.py called sys.exit\(3\).*exits_on_import.py:2"):
        load_factory(f"{tmp_path / 'exits_on_import.py'}:make")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=r"importing exits_on_import called sys.exit\(3\)"):
        load_factory("exits_on_import:make")
    result = invoke("train", "--task", "exits_on_import:make", "--budget", "100", "--workers", "0")
    assert result.exit_code == 2 and "importing exits_on_import called sys.exit(3)" in result.output


# --- reports read factory defaults without importing ------------------------------------

def test_a_report_reads_a_factory_defaults_without_running_its_module(tmp_path, monkeypatch):
    """``ez-robot report`` counts an unset factory argument as its default (``_value``);
    it reads that default from the source, so a run someone shares runs none of its code."""
    from ez_robot.report import _factory_default

    marker = tmp_path / "IMPORTED"
    source = (f"open({str(marker)!r}, 'w').close()\nSPEED = 2.5\n\n\n"
              "def make(joints=3, speed=SPEED, *, mode='fast', seed=object()):\n    pass\n\n\n"
              "class Arm:\n    def __init__(self, reach=0.4):\n        pass\n")
    (tmp_path / "side_effects.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    for task in (f"{tmp_path / 'side_effects.py'}:make", "side_effects:make"):
        assert [_factory_default(task, name) for name in ("joints", "speed", "mode", "seed")] == [3, 2.5, "fast", None]
    assert _factory_default("side_effects:Arm", "reach") == 0.4
    assert _factory_default("no_such_module:make", "joints") is None
    assert not marker.exists()
