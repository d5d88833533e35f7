"""Env faults wherever an env is stepped (self-play, evaluation during training, ``ez-robot
eval`` and :func:`ez_robot.evaluate`): a failing episode is played again or dropped and
recorded; an env that fails in every episode stops the run resumably with its error; a NaN
or infinity from an env is named; ``metrics.jsonl`` is standard JSON."""
import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

import ez_robot
from ez_robot.checkpoint import checkpoint_path
from ez_robot.cli import main
from ez_robot.config import load_config
from ez_robot.envs.guard import ENV_ERROR, RemakeOnError
from ez_robot.errors import EnvironmentFailed, EnvValueError
from ez_robot.evaluation import play
from ez_robot.builders import env_spec, make_model
from ez_robot.run_files import RunFiles
from ez_robot.schedules import Counters, eval_seed
from tests.custom_envs import make_faulty_point
from tests.test_custom_env import TINY

TINY = TINY[:-1]  # the test envs set their own horizon
FAULTY = "tests.custom_envs:make_faulty_point"
BAD_VALUE = "tests.custom_envs:make_bad_value_point"


def strict_records(path):
    """metrics.jsonl read by a parser that refuses NaN and Infinity, as every JSON reader but
    Python's does."""
    def refuse(token):
        raise ValueError(f"not JSON: {token}")

    return [json.loads(line, parse_constant=refuse) for line in path.read_text().splitlines()]


def train(task, run_dir, *overrides, budget=60, **options):
    return ez_robot.train(task, budget=budget, overrides=[*TINY, *overrides], run_dir=run_dir, workers=0,
                          device="cpu", progress=False, log=None, **options)


def test_a_failure_streak_ends_only_when_an_episode_ends():
    """Failures late in every episode are a streak: good steps between them do not end it."""
    env = RemakeOnError(lambda seed: make_faulty_point(fail_at=3), seed=0, max_failures_in_a_row=2)
    env.reset(seed=0)
    for failure in (1, 2):
        assert ENV_ERROR not in env.step(env.action_space.sample())[4]
        assert ENV_ERROR not in env.step(env.action_space.sample())[4]
        info = env.step(env.action_space.sample())[4]
        assert "motor driver stopped answering" in info[ENV_ERROR] and env.failures_in_a_row == failure
        env.reset()
    env.step(env.action_space.sample()), env.step(env.action_space.sample())
    with pytest.raises(EnvironmentFailed, match="failed 3 times in a row .* the last with RuntimeError: the motor"):
        env.step(env.action_space.sample())

    healthy = RemakeOnError(lambda seed: make_faulty_point(fail_at=3, fail_seeds=[0], horizon=4), seed=0,
                            max_failures_in_a_row=1)
    healthy.reset(seed=0)
    for _ in range(3):
        healthy.step(healthy.action_space.sample())
    assert healthy.failures_in_a_row == 1
    healthy.reset()  # another seed: this episode runs to its end
    while not healthy.step(healthy.action_space.sample())[3]:
        pass
    assert healthy.failures_in_a_row == 0


def test_an_env_that_fails_in_evaluation_is_played_again_and_recorded(tmp_path):
    """The env of the first evaluation episode raises at its 3rd step (in training's periodic
    evaluations, and in ``ez_robot.evaluate`` from seed 0): the episode is played again on a
    new env, and the evaluation has all its returns and says how many episodes failed."""
    seeds = f"env.kwargs.fail_seeds=[0, {eval_seed(load_config(FAULTY))}]"
    run = train(FAULTY, tmp_path / "run", seeds)
    records = strict_records(run / "metrics.jsonl")
    evals = [r for r in records if r["kind"] == "eval"]
    assert evals and records[-1]["kind"] == "eval"  # the run went on to its final evaluation
    for record in evals:
        assert len(record["returns"]) == 2 and record["failed_episodes"] == 1
        assert record["env_errors"] == ["RuntimeError: the motor driver stopped answering"]
    # self-play's first episode (seed 0) failed too: dropped, recorded, and the run went on
    assert [(r["agent_steps"], r["error"]) for r in records if r["kind"] == "env_failure"] == \
        [(3, "RuntimeError: the motor driver stopped answering")]

    report = ez_robot.evaluate(run, episodes=3, seed=0, trust_task=True)
    assert len(report["returns"]) == 3 and report["failed_episodes"] == 1
    assert report["env_errors"] == ["RuntimeError: the motor driver stopped answering"]
    assert json.loads((run / "eval.json").read_text())["failed_episodes"] == 1
    result = CliRunner().invoke(main, ["eval", str(run), "--episodes", "2", "--quiet", "--trust-task",
                                         "--out", str(tmp_path / "e.json")])
    assert result.exit_code == 0 and "failed episodes played again: 1" in result.output, result.output


def test_an_env_that_fails_in_every_episode_stops_the_run_with_a_checkpoint_that_resumes(tmp_path):
    """Self-play's env fails at the 3rd step of every episode: the first failure is recorded,
    the second (agent step 6, before the first evaluation) stops the run."""
    run = tmp_path / "run"
    with pytest.raises(EnvironmentFailed, match=r"make_faulty_point failed 2 times in a row .*the last with "
                                                r"RuntimeError: the motor driver stopped answering; .*"
                                                r"env.max_failures_in_a_row.*ez-robot train --resume "):
        train(FAULTY, run, "env.max_failures_in_a_row=1")
    records = strict_records(run / "metrics.jsonl")
    assert [r["kind"] for r in records] == ["env_failure", "env_failed"]
    assert "failed 2 times in a row" in records[-1]["error"] and checkpoint_path(run).is_file()

    # the env mended: the run goes on to its end
    train(None, None, "env.kwargs={fail_at: 1000}", resume=run, trust_task=True)
    records = strict_records(run / "metrics.jsonl")
    assert records[-1]["kind"] == "eval" and records[-1]["agent_steps"] == 60


@pytest.mark.parametrize("field,value,message", [
    ("observation", "nan", r"make_bad_value_point returned a non-finite observation at agent step 4 of episode 1: "
                           r"observation\[1\] = nan \(goal\[1\] of the env's own observation\)"),
    ("reward", "-inf", r"make_bad_value_point returned a non-finite reward \(-inf\) at agent step 4 of episode 1"),
])
def test_a_non_finite_value_from_the_env_stops_training_naming_the_env_the_step_and_the_field(
        tmp_path, field, value, message):
    run = tmp_path / "run"
    result = CliRunner().invoke(main, ["train", "--task", BAD_VALUE, "--run-dir", str(run), "--workers", "0",
                                       "--budget", "60", "--quiet", "--set", f"env.kwargs.field={field}",
                                       "--set", f"env.kwargs.value={value}", *[f"--set={o}" for o in TINY]])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert re.search(message, result.output), result.output
    assert "root value" not in result.output and "diverged" not in result.output
    assert strict_records(run / "metrics.jsonl")[-1]["kind"] == "env_failed"


def test_evaluation_stops_on_an_env_that_fails_in_every_episode_or_returns_a_nan():
    config = load_config(FAULTY, overrides=[*TINY, "env.max_failures_in_a_row=1"])
    net = make_model(config, env_spec(config))
    with pytest.raises(EnvironmentFailed, match="make_faulty_point failed 2 times in a row .*motor driver"):
        play(net, config, "cpu", 2, seed=0)
    config = load_config(BAD_VALUE, overrides=[*TINY, "env.kwargs.at_step=2"])
    with pytest.raises(EnvValueError, match=r"non-finite observation at agent step 2 of episode 1: observation\[1\]"):
        play(net, config, "cpu", 2, seed=0)


def test_metrics_jsonl_is_standard_json_with_non_finite_values_as_null(tmp_path):
    config = load_config("gym:CartPole-v1")
    files = RunFiles(tmp_path, config)
    files.log("train", Counters(), loss=float("nan"), grad_norm=np.float64("inf"), fine=1.5,
              returns=[1.0, float("-inf")], nested={"value": float("nan")})
    files.close()
    (record,) = strict_records(tmp_path / "metrics.jsonl")
    assert (record["loss"], record["grad_norm"], record["fine"]) == (None, None, 1.5)
    assert record["returns"] == [1.0, None] and record["nested"] == {"value": None}


@pytest.mark.parametrize("where", ["evaluation", "selfplay worker 0"])
def test_the_ray_trainer_stops_on_an_env_that_keeps_failing_with_one_line_and_a_checkpoint(tmp_path, where):
    """The evaluation's env (self-play's does not), or self-play's, fails in every episode: the
    Ray run stops with the env's error, where it ran and the command that resumes it, not Ray's
    traceback of a remote task, and logs ``env_failed``."""
    import subprocess
    import sys

    run = tmp_path / "run"
    if where == "evaluation":
        first = eval_seed(load_config(FAULTY))  # then each failure makes the env again with seed + 7919 k
        seeds = [first + episode + 7919 * k for episode in range(2) for k in range(3)]
        faults = f"env.kwargs={{fail_seeds: {seeds}}}"
    else:
        faults = "env.kwargs={fail_at: 3}"  # the 3rd step of every episode
    out = subprocess.run([sys.executable, "-m", "ez_robot.cli", "train", "--task", FAULTY, "--run-dir", str(run),
                          "--budget", "60", "--workers", "1", "--reanalyze-workers", "0", "--device", "cpu", "--quiet",
                          "--set", faults, "--set", "env.max_failures_in_a_row=1", *[f"--set={o}" for o in TINY]],
                         capture_output=True, text=True, timeout=300)
    output = out.stdout + out.stderr
    assert out.returncode == 1 and "Traceback" not in output and "RayTaskError" not in output, output
    assert re.search(where + r": .*make_faulty_point failed 2 times in a row .*motor driver.*"
                     r"ez-robot train --resume ", output), output
    assert strict_records(run / "metrics.jsonl")[-1]["kind"] == "env_failed" and checkpoint_path(run).is_file()
