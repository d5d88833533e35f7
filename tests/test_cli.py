"""The command line, run as a user runs it (a subprocess), with tiny budgets."""
import json
import os
import subprocess
import sys

import pytest

from tests.cli_runner import user_error


def ez(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "ez_robot.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_version_and_help():
    import ez_robot

    out = ez("--version")
    assert out.returncode == 0 and ez_robot.__version__ in out.stdout
    out = ez("--help")
    assert out.returncode == 0 and "train" in out.stdout and "tasks" in out.stdout


def test_tasks_filter():
    out = ez("tasks", "walker_*")
    assert out.returncode == 0
    rows = [line.split(None, 1) for line in out.stdout.splitlines()]
    assert rows == [[name, "gaussian (6 dims)"] for name in ("walker_run", "walker_stand", "walker_walk")]
    out = ez("tasks", "nothing-like-this")
    assert out.returncode != 0 and "no task matches" in out.stderr


@pytest.mark.parametrize("args,message", [
    (["--task", "cartpol_swingup"], "did you mean: cartpole_swingup"),
    (["--task", "cartpole_swingup", "--budget", "10x"], "bad budget '10x'"),
    (["--task", "cartpole_swingup", "--set", "train.lrr=1"], "unknown config key 'train.lrr'"),
    (["--task", "walker_walk", "--set", "env.action_mode=joint"], "Lower env.bins"),
    (["--task", "cartpole_swingup", "--workers", "0", "--address", "auto"], "--address is for the Ray trainer"),
    (["--task", "gym:CartPole-v1", "--address", "127.0.0.1:9"], "no Ray cluster answers at 127.0.0.1:9"),
    (["--task", "gym:CartPole-v1", "--address", "headnode"], "is not auto, host:port or ray://host:port"),
    (["--task", "gym:CartPole-v1", "--set", "search.num_simulations=999999999999"],
     "search.num_simulations must be in [0, 100000], got 999999999999"),
    (["--task", "gym:CartPole-v1", "--set", "train.lr=inf"], "train.lr must be a finite number"),
    (["--task", "gym:CartPole-v1", "--set", "env.task=atari:Pong"],
     "--set env.task=atari:Pong disagrees with --task gym:CartPole-v1"),
    (["--task", "walker_walk", "--config", "ezv3"], "--config ezv3: no such file, nor a recipe of that name "
                                                    "(recipes: ezv2_states"),
])
def test_train_user_errors_are_messages_not_tracebacks(args, message, tmp_path):
    """In this process (a Python start with torch costs ~3 s a case): click's own exit with
    the message on stderr, as the subprocess runs above and below go through."""
    assert message in user_error("train", *args, "--run-dir", tmp_path / "run").stderr
    assert not (tmp_path / "run").exists()  # nothing left behind


@pytest.mark.parametrize("workers", ["0", "1"])
def test_a_run_directory_another_process_trains_in_is_refused(workers, tmp_path):
    """Two processes training in one run directory (a resume started twice, a job retried
    while the first still runs) would write one checkpoint and prune each other's replay
    files.  The second is refused with the holder's pid before it writes anything, and
    before the Ray trainer starts Ray."""
    import fcntl

    import ray

    run, ray_before = tmp_path / "run", ray.is_initialized()
    run.mkdir()
    with open(run / ".lock", "w") as held:  # another process's lock, as the kernel sees it
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("4242\n")
        held.flush()
        result = user_error("train", "--task", "gym:CartPole-v1", "--workers", workers, "--quiet", "--run-dir", run)
    assert f"{run} is in use: another process (pid 4242) is training in it" in result.stderr
    assert sorted(p.name for p in run.iterdir()) == [".lock"]
    assert ray.is_initialized() == ray_before  # refused before init_ray


def test_a_run_directory_that_cannot_be_made_is_a_message(tmp_path):
    (tmp_path / "a-file").write_text("")
    run = tmp_path / "a-file" / "run"
    result = user_error("train", "--task", "gym:CartPole-v1", "--workers", "0", "--quiet", "--run-dir", run)
    assert f"cannot write the run directory {run}: Not a directory" in result.stderr


def test_the_run_directory_lock_is_released_and_optional(tmp_path, monkeypatch):
    """The lock ends with the training call (the same process trains there again), and on a
    filesystem without locks (some network mounts) training goes on with a warning."""
    import errno
    import fcntl

    from ez_robot.run_files import holds_run_dir

    @holds_run_dir
    def train(config, run_dir):
        return (run_dir / ".lock").read_text()

    assert train(None, tmp_path / "run") == train(None, tmp_path / "run") == f"{os.getpid()}\n"

    def no_locks(*args):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with pytest.warns(UserWarning, match=r"cannot lock .* \(No locks available\)"):
        assert train(None, tmp_path / "nfs") == f"{os.getpid()}\n"


def test_a_bug_keeps_its_traceback(tmp_path, monkeypatch):
    """Only ez-robot's own error types become one-line messages: anything else (a bug, here
    a ValueError from deep inside) reaches the user with its traceback."""
    from click.testing import CliRunner

    from ez_robot import trainer
    from ez_robot.cli import main

    def broken(*args, **kwargs):
        raise ValueError("an internal mistake")

    monkeypatch.setattr(trainer, "train", broken)
    result = CliRunner().invoke(main, ["train", "--task", "gym:CartPole-v1", "--workers", "0", "--quiet",
                                       "--run-dir", str(tmp_path / "run")])
    assert isinstance(result.exception, ValueError) and str(result.exception) == "an internal mistake"


def test_train_smoke(tmp_path):
    """The default trainer (Ray: one self-play worker, reanalyze workers, an embedded local Ray)."""
    import yaml

    run = tmp_path / "run"
    small = tmp_path / "small.yaml"  # through --config, with a --set after it that wins
    small.write_text("replay: {min_replay_size: 60}\ntrain: {batch_size: 8, eval_episodes: 5}\n"
                     "search: {num_simulations: 4}\n")
    out = ez("train", "--task", "gym:CartPole-v1", "--budget", "120", "--run-dir", str(run), "--quiet",
             "--config", str(small), "--set", "train.train_steps_per_agent_step=0.25", "--set", "train.eval_episodes=2")
    assert out.returncode == 0, out.stderr
    assert (run / "config.yaml").exists() and (run / "checkpoints" / "latest.pt").exists()
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert (config["replay"]["min_replay_size"], config["train"]["batch_size"], config["search"]["num_simulations"],
            config["train"]["eval_episodes"]) == (60, 8, 4, 2)
    checkpoint = json.loads((run / "checkpoints" / "latest.json").read_text())
    assert checkpoint["trainer"] == "ray" and checkpoint["counters"]["final_eval"] == 120  # a resume has nothing left
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    kinds = {r["kind"] for r in records}
    assert {"episode", "eval"} <= kinds
    assert all("agent_steps" in r and "env_frames" in r for r in records)
    assert records[-1]["agent_steps"] == 120
    events = list((run / "tensorboard").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 100  # scalars were written, not just the file header


def test_training_options_are_written_once_and_a_misspelt_one_is_named():
    """The Python API and the command line take the same options (TrainOptions), and the
    command line's help for each is the field's help."""
    import dataclasses

    import ez_robot
    from ez_robot.api import TrainOptions
    from ez_robot.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown training option 'worker'.*did you mean workers"):
        ez_robot.train("gym:CartPole-v1", worker=0)
    text = " ".join(ez("train", "--help").stdout.split())
    for field in dataclasses.fields(TrainOptions):
        if field.name not in ("obs", "seed", "device", "env_kwargs", "progress"):
            assert " ".join(field.metadata["help"].split()) in text, field.name
