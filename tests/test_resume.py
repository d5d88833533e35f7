"""Checkpoints and resume: a run killed with SIGKILL resumes where its checkpoint stopped,
with its counters and logs going on; a finished run extends with a larger budget; a
checkpoint that cannot be used is a clear message, not a traceback."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from ez_robot.checkpoint import ReplayFiles, read_checkpoint, resume_config, write_checkpoint
from ez_robot.cli import main
from ez_robot.config import ReplayConfig, load_config
from ez_robot.evaluation import load_run
from ez_robot.replay import ReplayBuffer, Segment
from ez_robot.trainer import train

TINY = ["replay.min_replay_size=60", "train.batch_size=8", "search.num_simulations=4",
        "train.train_steps_per_agent_step=0.25", "train.eval_episodes=2", "train.selfplay_update_interval=10"]
TINY_ARGS = [arg for key in TINY for arg in ("--set", key)]


def records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def checkpoint_info(run_dir):
    return json.loads((run_dir / "checkpoints" / "latest.json").read_text())


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished 120-step single-process run (30 training steps, a checkpoint every 10)."""
    run = tmp_path_factory.mktemp("runs") / "finished"
    config = load_config("gym:CartPole-v1", budget="120", overrides=TINY)
    train(config, run, device="cpu", progress=False, checkpoint_interval=10)
    return run


def copy_of(run, tmp_path):
    return shutil.copytree(run, tmp_path / "run")


# --- kill, resume ------------------------------------------------------------------------

def start_and_kill(run, workers: int, train_steps: int) -> dict:
    """Starts a long run in its own process group and SIGKILLs all of it once a checkpoint
    with ``train_steps`` exists; returns that checkpoint's metadata."""
    process = subprocess.Popen(
        [sys.executable, "-m", "ez_robot.cli", "train", "--task", "gym:CartPole-v1", "--budget", "4000",
         "--run-dir", str(run), "--quiet", "--checkpoint-interval", "10", "--workers", str(workers), *TINY_ARGS],
        start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 150
    try:
        while time.time() < deadline and process.poll() is None:
            if (run / "checkpoints" / "latest.json").exists() and \
                    checkpoint_info(run)["counters"]["train_steps"] >= train_steps:
                break
            time.sleep(0.2)
        assert process.poll() is None, process.stderr.read()
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return checkpoint_info(run)


@pytest.mark.parametrize("workers", [0, 1], ids=["single-process", "ray"])
def test_a_killed_run_resumes_where_its_checkpoint_stopped(tmp_path, workers):
    run = tmp_path / "run"
    saved = start_and_kill(run, workers, train_steps=10)["counters"]
    assert 10 <= saved["train_steps"] < 50 and saved["agent_steps"] < 200
    assert load_run(run).counters["train_steps"] == saved["train_steps"]  # the checkpoint loads

    out = subprocess.run([sys.executable, "-m", "ez_robot.cli", "train", "--resume", str(run), "--budget", "200",
                          "--workers", str(workers), "--quiet"], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    logged = records(run)
    resumed_at = next(i for i, r in enumerate(logged) if r["kind"] == "resume")
    assert (logged[resumed_at]["agent_steps"], logged[resumed_at]["train_steps"]) == \
        (saved["agent_steps"], saved["train_steps"])
    # the killed process's records after its checkpoint were cut from the log
    assert all(r["agent_steps"] <= saved["agent_steps"] for r in logged[:resumed_at])
    train_steps = [r["train_steps"] for r in logged[resumed_at:] if r["kind"] == "train"]
    assert train_steps == sorted(train_steps) and all(t > saved["train_steps"] for t in train_steps)
    episodes = [r for r in logged[resumed_at:] if r["kind"] == "episode"]
    assert episodes and all(r["agent_steps"] > saved["agent_steps"] for r in episodes)
    final = checkpoint_info(run)
    assert final["counters"]["agent_steps"] == 200 and final["counters"]["train_steps"] == 50
    assert final["counters"]["episodes"] >= saved["episodes"] + len(episodes)
    assert final["trainer"] == ("ray" if workers else "single")


@pytest.mark.parametrize("workers", [0, 1], ids=["single-process", "ray"])
def test_ctrl_c_checkpoints_first_and_exits_cleanly(tmp_path, workers):
    """SIGINT to the whole process group, as a terminal's Ctrl-C sends it (Ray's worker
    processes get it too): the run writes a checkpoint at exit, past the last periodic one,
    says how to resume, and exits with 130 without a traceback."""
    run = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-m", "ez_robot.cli", "train", "--task", "gym:CartPole-v1", "--budget", "4000",
         "--run-dir", str(run), "--quiet", "--checkpoint-interval", "10", "--workers", str(workers), *TINY_ARGS],
        start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        # a shell's background job (CI started with &) ignores SIGINT and its children inherit that;
        # a terminal's foreground run does not
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.time() + 150
        while time.time() < deadline and process.poll() is None and not (
                (run / "checkpoints" / "latest.json").exists() and checkpoint_info(run)["counters"]["train_steps"]):
            time.sleep(0.2)
        periodic = checkpoint_info(run)["counters"]
        time.sleep(3)  # past the periodic checkpoint
        os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 130, stderr
    assert f"ez-robot train --resume {run}" in stderr and "Traceback" not in stderr
    at_exit = checkpoint_info(run)["counters"]
    assert at_exit["agent_steps"] > periodic["agent_steps"] and at_exit["train_steps"] >= periodic["train_steps"]
    assert load_run(run).counters == read_checkpoint(run)["counters"]


def test_a_finished_run_extends_with_a_larger_budget(finished_run, tmp_path):
    run = copy_of(finished_run, tmp_path)
    state = read_checkpoint(run)
    assert state["replay"] and len(state["replay"]["priorities"]) > 0
    config = resume_config(state, budget="240")
    summary = train(config, run, device="cpu", progress=False, checkpoint_interval=10, resume=state)
    assert (summary["agent_steps"], summary["train_steps"]) == (240, 60)
    logged = records(run)
    resume = next(r for r in logged if r["kind"] == "resume")
    assert (resume["agent_steps"], resume["train_steps"]) == (120, 30)
    assert resume["replay_moves"] == 120  # the replay came back with the checkpoint
    evals = [r["agent_steps"] for r in logged if r["kind"] == "eval"]
    assert evals == sorted(evals) and evals[-1] == 240  # the evaluation schedule went on
    assert len(evals) == len(set(evals))


def test_checkpoints_hold_what_resuming_needs(finished_run):
    state = read_checkpoint(finished_run)
    for key in ("model", "target_model", "acting_model", "optimizer", "learner", "counters", "numpy_rng",
                "actor_rng", "torch_rng", "config", "replay", "metrics_bytes"):
        assert key in state, key
    assert state["format"] == 1 and state["torch_version"] == torch.__version__
    assert state["ez_robot_version"] and state["learner"]["train_steps"] == state["counters"]["train_steps"] == 30
    assert state["metrics_bytes"] == (finished_run / "metrics.jsonl").stat().st_size
    info = checkpoint_info(finished_run)
    assert info["counters"]["agent_steps"] == 120 and info["replay_segments"] == len(state["replay"]["priorities"])


def test_a_kill_during_a_checkpoint_write_leaves_the_previous_one(finished_run, tmp_path, monkeypatch):
    run = copy_of(finished_run, tmp_path)
    state = read_checkpoint(run)

    def dies_half_way(obj, path):
        with open(path, "wb") as f:
            f.write(b"half a checkpoint")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        write_checkpoint(run, {**state, "counters": {**state["counters"], "train_steps": 999}})
    monkeypatch.undo()
    assert read_checkpoint(run)["counters"]["train_steps"] == 30


def test_replay_files_round_trip_and_forget_evicted_segments(tmp_path):
    rng = np.random.default_rng(0)

    def segment(moves):
        return Segment(frames=rng.normal(size=(moves + 1, 3)).astype(np.float32),
                       actions=rng.integers(2, size=moves), rewards=rng.normal(size=moves).astype(np.float32),
                       root_values=rng.normal(size=moves + 1).astype(np.float32),
                       policies=np.full((moves, 2), 0.5, np.float32), collected_at=np.arange(moves - 2),
                       num_own=moves - 2, episode_end=bool(moves % 2), terminated=bool(moves % 2))

    replay, files = ReplayBuffer(ReplayConfig(capacity=35, min_replay_size=1)), ReplayFiles(tmp_path)
    for moves in (10, 11, 12):
        replay.add(segment(moves))
    files.prune(files.save(replay))
    for moves in (13, 14):  # evicts the first two segments
        replay.add(segment(moves))
    replay.update_priorities(np.array([2, 3]), np.array([1, 2]), np.array([5.0, 0.25]))
    state = files.save(replay)
    files.prune(state)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"segment-{i:09d}.npz" for i in (2, 3, 4)]
    loaded = ReplayFiles(tmp_path).load(replay.config, state)
    assert len(loaded) == len(replay) and loaded._first_id == 2
    np.testing.assert_array_equal(loaded.probabilities(), replay.probabilities())
    for a, b in zip(loaded.segments, replay.segments):
        for name in ReplayFiles.FIELDS:
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
        assert (a.num_own, a.episode_end, a.terminated) == (b.num_own, b.episode_end, b.terminated)
    loaded.update_priorities(np.array([2]), np.array([0]), np.array([3.0]))  # writable after loading


# --- errors ------------------------------------------------------------------------------

def break_format(run):
    state = torch.load(run / "checkpoints" / "latest.pt", weights_only=False)
    torch.save({**state, "format": 99}, run / "checkpoints" / "latest.pt")


def truncate(run):
    path = run / "checkpoints" / "latest.pt"
    path.write_bytes(path.read_bytes()[:1000])


def drop_a_segment(run):
    sorted((run / "checkpoints" / "replay").glob("*.npz"))[0].unlink()


@pytest.mark.parametrize("damage,args,message", [
    (truncate, [], "is corrupt and cannot be read"),
    (break_format, [], "has checkpoint format 99"),
    (lambda run: torch.save({"weights": 1}, run / "checkpoints" / "latest.pt"), [],
     "is not an ez-robot training checkpoint"),
    (lambda run: (run / "checkpoints" / "latest.pt").unlink(), [], "no checkpoint at"),
    (drop_a_segment, ["--budget", "240"], "--no-replay-checkpoint"),
    (lambda run: None, [], "already finished its budget"),
    (lambda run: None, ["--budget", "240", "--seed", "5"], "--seed 5 differs from the run's seed 0"),
    (lambda run: None, ["--budget", "240", "--set", "train.lrr=1"], "unknown config key 'train.lrr'"),
], ids=["truncated", "format", "not-a-checkpoint", "missing", "replay-segment", "finished", "seed", "bad-set"])
def test_checkpoints_that_cannot_be_resumed_are_clear_errors(finished_run, tmp_path, damage, args, message):
    run = copy_of(finished_run, tmp_path)
    damage(run)
    result = CliRunner().invoke(main, ["train", "--resume", str(run), "--quiet", *args])
    assert result.exit_code != 0
    assert message in result.output and "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_a_new_run_does_not_overwrite_an_existing_one(finished_run):
    result = CliRunner().invoke(main, ["train", "--task", "gym:CartPole-v1", "--run-dir", str(finished_run)])
    assert result.exit_code != 0 and f"--resume {finished_run}" in result.output
