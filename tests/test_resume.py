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

from ez_robot import checkpoint
from ez_robot.builders import EnvSpec
from ez_robot.checkpoint import CHECKPOINT_FORMAT, ReplayFiles, read_checkpoint, resume_config, saved_config, \
    write_checkpoint
from ez_robot.cli import main
from ez_robot.config import ReplayConfig, load_config
from ez_robot.checkpoint import load_run
from ez_robot.replay import ReplayBuffer, Segment
from ez_robot.schedules import Counters
from ez_robot.trainer import train

TINY = ["replay.min_replay_size=60", "train.batch_size=8", "search.num_simulations=4",
        "train.train_steps_per_agent_step=0.25", "train.eval_episodes=2", "train.selfplay_update_interval=10"]
TINY_ARGS = [arg for key in TINY for arg in ("--set", key)]


def records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def checkpoint_info(run_dir):
    return json.loads((run_dir / "checkpoints" / "latest.json").read_text())


def trainer_args(workers: int, reanalyze_workers: int = 0) -> list[str]:
    """The CLI's trainer options.  A Ray run here reanalyzes in its learner's process unless
    given ``reanalyze_workers`` (each worker is one more process to start on a 2-core
    machine; the Ctrl-C test keeps one, test_cli's smoke run the default)."""
    return ["--workers", str(workers), *(["--reanalyze-workers", str(reanalyze_workers)] if workers else [])]


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

def start_and_kill(run, train_steps: int) -> dict:
    """Starts a long single-process run in its own process group and SIGKILLs all of it
    once a checkpoint with ``train_steps`` exists; returns that checkpoint's metadata."""
    process = subprocess.Popen(
        [sys.executable, "-m", "ez_robot.cli", "train", "--task", "gym:CartPole-v1", "--budget", "4000",
         "--run-dir", str(run), "--quiet", "--checkpoint-interval", "10", *trainer_args(0), *TINY_ARGS],
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


def assert_resumed_where_the_checkpoint_stopped(run, saved: dict, budget: int) -> list[dict]:
    """The log of a run killed after the checkpoint ``saved`` and resumed to ``budget``:
    the resume starts at the checkpoint's counters, the killed process's records after it
    were cut, and the run went on from there to its budget.  Returns the log."""
    logged = records(run)
    resumed_at = next(i for i, r in enumerate(logged) if r["kind"] == "resume")
    assert (logged[resumed_at]["agent_steps"], logged[resumed_at]["train_steps"]) == \
        (saved["agent_steps"], saved["train_steps"])
    assert all(r["agent_steps"] <= saved["agent_steps"] for r in logged[:resumed_at])
    train_steps = [r["train_steps"] for r in logged[resumed_at:] if r["kind"] == "train"]
    assert train_steps == sorted(train_steps) and all(t > saved["train_steps"] for t in train_steps)
    episodes = [r for r in logged[resumed_at:] if r["kind"] == "episode"]
    assert all(r["agent_steps"] > saved["agent_steps"] for r in episodes)
    assert episodes or saved["agent_steps"] == budget  # self-play went on where it had any left
    final = checkpoint_info(run)
    assert final["counters"]["agent_steps"] == budget and final["counters"]["train_steps"] == budget // 4
    assert final["counters"]["episodes"] >= saved["episodes"] + len(episodes)
    return logged


def test_a_killed_run_resumes_where_its_checkpoint_stopped(tmp_path):
    """SIGKILL to the whole process group, then ``--resume`` (the Ray trainer's kill and
    resume: the lost-evaluation test below)."""
    run = tmp_path / "run"
    saved = start_and_kill(run, train_steps=10)["counters"]
    assert 10 <= saved["train_steps"] < 50 and saved["agent_steps"] < 200
    assert load_run(run).counters["train_steps"] == saved["train_steps"]  # the checkpoint loads

    out = subprocess.run([sys.executable, "-m", "ez_robot.cli", "train", "--resume", str(run), "--budget", "200",
                          *trainer_args(0), "--quiet"], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    assert_resumed_where_the_checkpoint_stopped(run, saved, budget=200)
    assert checkpoint_info(run)["trainer"] == "single"


# Ray with SIGTERM is not run here: SIGTERM becomes the KeyboardInterrupt Ctrl-C raises
# (``interrupt_on_sigterm``, set by both trainers; the Ray trainer's is tested while its
# actors start, below), and Ctrl-C to the process group is the harder case for Ray
@pytest.mark.parametrize("workers,how", [(0, "ctrl-c"), (0, "sigterm"), (1, "ctrl-c")],
                         ids=["single-process-ctrl-c", "single-process-sigterm", "ray-ctrl-c"])
def test_ctrl_c_and_sigterm_checkpoint_first_and_exit_cleanly(tmp_path, workers, how):
    """SIGINT to the whole process group, as a terminal's Ctrl-C sends it (Ray's worker
    processes get it too), or SIGTERM to the process, as ``kill`` and a scheduler's time
    limit send it: the run writes a checkpoint at exit, past the last periodic one, says
    how to resume, and exits with 130 without a traceback."""
    run = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-m", "ez_robot.cli", "train", "--task", "gym:CartPole-v1", "--budget", "4000",
         "--run-dir", str(run), "--quiet", "--checkpoint-interval", "10",
         *trainer_args(workers, reanalyze_workers=int(how == "ctrl-c")), *TINY_ARGS],
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
        if how == "ctrl-c":
            os.killpg(process.pid, signal.SIGINT)
        else:
            process.send_signal(signal.SIGTERM)
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


def test_the_resume_hint_quotes_a_run_directory_with_spaces(finished_run, tmp_path, monkeypatch):
    """The command printed after Ctrl-C or SIGTERM (both a KeyboardInterrupt here) can be
    pasted into a shell as it is."""
    import shlex

    import ez_robot.trainer

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ez_robot.trainer, "train", interrupted)
    run = shutil.copytree(finished_run, tmp_path / "my runs" / "cart pole")
    result = CliRunner().invoke(main, ["train", "--resume", str(run), "--budget", "240", "--workers", "0", "--quiet"])
    assert result.exit_code == 130, result.output
    command = result.output.split("resumes it: ")[1].strip()
    assert shlex.split(command) == ["ez-robot", "train", "--resume", str(run)]


def test_sigterm_while_the_ray_actors_start_stops_cleanly_with_nothing_to_resume(tmp_path, monkeypatch):
    """Starting the actors takes tens of seconds on 2 cores; a SIGTERM then (a scheduler's
    limit, ``kill``) is an interrupt like any other, and the message does not offer a
    checkpoint that was never written."""
    import ez_robot.ray_trainer as ray_trainer

    class Starting:
        def __init__(self, *args, **kwargs):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler interrupts this
            raise AssertionError("SIGTERM did not interrupt the start-up")

    monkeypatch.setattr(ray_trainer, "_Pipeline", Starting)
    run = tmp_path / "run"
    result = CliRunner().invoke(main, ["train", "--task", "gym:CartPole-v1", "--budget", "400", "--run-dir", str(run),
                                       "--quiet", "--workers", "1", *TINY_ARGS])
    assert result.exit_code == 130, result.output
    assert "interrupted before the first checkpoint; nothing to resume" in result.output
    assert "--resume" not in result.output and not (run / "checkpoints" / "latest.json").exists()
    assert not ray_trainer.ray.is_initialized()  # the embedded Ray was shut down


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
    assert not [e for e in evals if 120 < e < 132]  # the final evaluation at 120 is not taken again
    # every 12 agent steps as before (a tenth of the budget the run started with), not every
    # 24 (a tenth of the new one)
    assert [e for e in evals if e > 120] == list(range(132, 241, 12))
    assert read_checkpoint(run)["counters"]["eval_interval"] == 12


def test_a_finished_run_trains_on_with_offline_steps(finished_run, tmp_path):
    run = copy_of(finished_run, tmp_path)
    state = read_checkpoint(run)
    config = resume_config(state, overrides=["train.offline_train_steps=20"])
    summary = train(config, run, device="cpu", progress=False, checkpoint_interval=10, resume=state)
    assert (summary["agent_steps"], summary["train_steps"]) == (120, 50)  # no new decisions, 20 more steps
    logged = records(run)
    assert [r["kind"] for r in logged].count("episode") == [r["kind"] for r in records(finished_run)].count("episode")
    evals = [(r["agent_steps"], r["train_steps"]) for r in logged if r["kind"] == "eval"]
    assert evals[-2:] == [(120, 30), (120, 50)]  # the finished run's final evaluation, then the new one


def test_checkpoints_hold_what_resuming_needs(finished_run):
    state = read_checkpoint(finished_run)
    for key in ("learner", "counters", "rng", "actor", "config", "spec", "replay", "metrics_bytes"):
        assert key in state, key
    for key in ("model", "target_model", "acting_model", "optimizer", "generator", "versions"):
        assert key in state["learner"], key
    assert state["format"] == CHECKPOINT_FORMAT and state["torch_version"] == torch.__version__
    assert state["ez_robot_version"] and state["learner"]["train_steps"] == state["counters"]["train_steps"] == 30
    assert state["metrics_bytes"] == (finished_run / "metrics.jsonl").stat().st_size
    info = checkpoint_info(finished_run)
    assert info["counters"]["agent_steps"] == 120 and info["replay_segments"] == len(state["replay"]["priorities"])


@pytest.mark.parametrize("when", ["serializing", "renaming"])
def test_a_kill_during_a_checkpoint_write_leaves_the_previous_one(finished_run, tmp_path, monkeypatch, when):
    run = copy_of(finished_run, tmp_path)
    state = read_checkpoint(run)

    def dies_half_way(obj, f, *args):
        if when == "serializing":
            f.write(b"half a checkpoint")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", dies_half_way) if when == "serializing" else \
        monkeypatch.setattr(checkpoint.os, "replace", dies_half_way)  # the new file written whole, not yet renamed
    with pytest.raises(KeyboardInterrupt):
        write_checkpoint(run, trainer="single", config=saved_config(state), spec=EnvSpec.from_state_dict(state["spec"]),
                         counters=Counters.from_state_dict({**state["counters"], "train_steps": 999}),
                         learner=state["learner"], replay=state["replay"])
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


def truncate_a_segment(run):
    path = sorted((run / "checkpoints" / "replay").glob("*.npz"))[1]
    path.write_bytes(path.read_bytes()[:-40])


def flip_a_bit_in_a_segment(run):
    path = sorted((run / "checkpoints" / "replay").glob("*.npz"))[0]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [truncate_a_segment, flip_a_bit_in_a_segment], ids=["truncated", "bit-flip"])
@pytest.mark.parametrize("workers", ["0", "1"], ids=["single-process", "ray"])
def test_a_damaged_replay_segment_is_named_before_training_starts(finished_run, tmp_path, damage, workers):
    run = copy_of(finished_run, tmp_path)
    damage(run)
    result = CliRunner().invoke(main, ["train", "--resume", str(run), "--quiet", "--budget", "240",
                                       "--workers", workers])
    assert result.exit_code == 1, result.output
    assert "is corrupt (its content differs from the hash recorded" in result.output
    assert "restore a copy of it, or resume with --no-replay-checkpoint" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("workers", ["0", "1"], ids=["single-process", "ray"])
def test_resuming_without_the_replay_and_too_little_budget_to_refill_it_stops_with_what_to_do(
        finished_run, tmp_path, workers):
    """The recovery the replay errors suggest, with a budget only 30 steps larger: the empty
    replay could never reach min_replay_size (60), so training would wait forever."""
    run = copy_of(finished_run, tmp_path)
    result = CliRunner().invoke(main, ["train", "--resume", str(run), "--quiet", "--budget", "150",
                                       "--no-replay-checkpoint", "--workers", workers])
    assert result.exit_code != 0, result.output
    assert "the replay buffer holds 0 moves" in result.output and "give --budget 180 or more" in result.output
    summary = train(resume_config(read_checkpoint(run), budget="180"), run, device="cpu", progress=False,
                    resume=read_checkpoint(run), replay_checkpoint=False)  # the budget it names is enough
    assert (summary["agent_steps"], summary["train_steps"]) == (180, 45)


def test_a_run_whose_replay_can_no_longer_fill_stops_instead_of_waiting(tmp_path, monkeypatch):
    """Self-play spends its budget but failed envs lost moves: the replay stays below
    min_replay_size, so no training step can ever run.  The run stops with the reason
    (and its checkpoint) rather than spin."""
    from ez_robot import builders
    from ez_robot.errors import TrainingAborted
    from tests.test_guard import FlakyCartPole

    FlakyCartPole.steps = 0
    monkeypatch.setattr(builders, "_make_train_env",
                        lambda env_config, seed: FlakyCartPole(set(range(8, 10_000, 8))))  # episodes never end
    # failures in every episode stop a run after 6 in a row: allow them all, to reach the starved replay
    config = load_config("gym:CartPole-v1", budget="100", overrides=[*TINY, "env.max_failures_in_a_row=100"])
    with pytest.raises(TrainingAborted, match=r"training cannot reach its 25 steps: the replay buffer holds \d+ moves"):
        train(config, tmp_path, device="cpu", progress=False)
    assert checkpoint_info(tmp_path)["counters"]["agent_steps"] == 100


def test_a_resumed_run_keeps_its_trainer(finished_run, tmp_path):
    run = copy_of(finished_run, tmp_path)
    result = CliRunner().invoke(main, ["train", "--resume", str(run), "--quiet", "--budget", "160"])
    assert result.exit_code == 0, result.output
    assert "single-process trainer" in result.output and checkpoint_info(run)["trainer"] == "single"


KILLED_AFTER_SECOND_EVALUATION = """
import os, sys
from ez_robot import ray_trainer, trainer
from ez_robot.config import load_config
from ez_robot.run_files import RunFiles

log, evals = RunFiles.log, []

def log_then_die(self, kind, counters, **values):
    log(self, kind, counters, **values)
    if kind == "eval":
        evals.append(counters.agent_steps)
        if len(evals) == 2:
            os._exit(9)  # killed: nothing after this record, no checkpoint at exit

RunFiles.log = log_then_die
config = load_config("gym:CartPole-v1", budget=sys.argv[3], overrides=sys.argv[4:])
options = dict(device="cpu", progress=False, checkpoint_interval=10, eval_interval=40)
if sys.argv[2] == "0":
    trainer.train(config, sys.argv[1], **options)
else:
    ray_trainer.train(config, sys.argv[1], workers=1, reanalyze_workers=0, **options)
"""


# Ray's evaluations lag its self-play by seconds: its longer run puts the kill mid-run on an
# idle machine (at 240 steps, self-play had spent the budget by the second evaluation)
@pytest.mark.parametrize("workers,budget", [(0, 240), (1, 480)], ids=["single-process", "ray"])
def test_an_evaluation_lost_with_a_killed_run_is_redone_after_resume(tmp_path, workers, budget):
    """A checkpoint taken before an evaluation was logged: the resumed run evaluates at
    that point again, so the curve has no gap (evaluations every 40 agent steps).  The
    killed process dies at once (``os._exit``, no checkpoint at exit); the Ray run resumes
    through the command line, as a user resumes it."""
    run = tmp_path / "run"
    out = subprocess.run([sys.executable, "-c", KILLED_AFTER_SECOND_EVALUATION, str(run), str(workers), str(budget),
                          *TINY], capture_output=True, text=True, timeout=240)
    assert out.returncode == 9, out.stderr
    state = read_checkpoint(run)
    pending = state["counters"]["next_eval"]  # the first evaluation the checkpoint has no record of
    if workers:  # through the command line, as a user resumes (evaluations then every 48 steps)
        out = subprocess.run([sys.executable, "-m", "ez_robot.cli", "train", "--resume", str(run), *trainer_args(1),
                              "--checkpoint-interval", "10", "--quiet"], capture_output=True, text=True, timeout=240)
        assert out.returncode == 0, out.stderr
        assert checkpoint_info(run)["trainer"] == "ray"
    else:
        train(resume_config(state), run, device="cpu", progress=False, checkpoint_interval=10, eval_interval=40,
              resume=state)
    logged = assert_resumed_where_the_checkpoint_stopped(run, state["counters"], budget)
    resumed = next(i for i, r in enumerate(logged) if r["kind"] == "resume")
    before = [r["agent_steps"] for r in logged[:resumed] if r["kind"] == "eval"]
    after = [r["agent_steps"] for r in logged[resumed:] if r["kind"] == "eval"]
    # the evaluations logged after the last checkpoint were lost with the kill: the checkpoint
    # has the first of them pending (one process: the second, at 80; Ray evaluates
    # asynchronously, and on a loaded machine its last checkpoint can predate even the
    # first evaluation's record, at 40)
    assert (40 if workers else 41) <= pending <= state["counters"]["agent_steps"], (pending, state["counters"])
    # Ray's evaluations can finish out of order but are logged in the order they started, so
    # none logged before the checkpoint comes from after its pending one
    assert all(step < pending for step in before), before
    # Ray: the lost one is started before self-play resumes, at the checkpoint's steps (on a
    # loaded machine the run can reach its budget before the second evaluation is logged: the
    # resume then takes the final evaluation, at the budget)
    if workers:
        assert after[0] == state["counters"]["agent_steps"], (state["counters"], after)
    else:  # one process: the schedule is exact
        assert pending == 80 and before == [40] and [step // 40 for step in after] == [2, 3, 4, 5, 6], after


KILLED_IN_FINAL_EVALUATION = """
import os, sys
from ez_robot import trainer
from ez_robot.config import load_config
from ez_robot.run_files import RunFiles

log = RunFiles.log
config = load_config("gym:CartPole-v1", budget=sys.argv[2], overrides=sys.argv[3:])

def log_then_die(self, kind, counters, **values):
    log(self, kind, counters, **values)
    if kind == "eval" and counters.agent_steps >= config.agent_steps_budget:
        os._exit(9)  # killed as the final evaluation is logged: the last checkpoint predates it

RunFiles.log = log_then_die
trainer.train(config, sys.argv[1], device="cpu", progress=False, checkpoint_interval=10, eval_interval=1000)
"""


def test_a_run_killed_in_its_final_evaluation_takes_it_when_resumed(tmp_path):
    """The last checkpoint has the whole budget and every training step but no final
    evaluation: a resume takes that evaluation (it used to refuse, the run looking finished),
    and a second resume finds nothing left.  (Ray's trainer: its smoke test checks that the
    final checkpoint records the final evaluation, and the lost-evaluation test above can
    land here on a loaded machine.)"""
    run = tmp_path / "run"
    out = subprocess.run([sys.executable, "-c", KILLED_IN_FINAL_EVALUATION, str(run), "240", *TINY],
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 9, out.stderr
    state = read_checkpoint(run)
    assert state["counters"]["agent_steps"] == 240 and state["counters"]["train_steps"] == 60, state["counters"]
    assert state["counters"]["final_eval"] == -1
    result = CliRunner().invoke(main, ["train", "--resume", str(run), "--quiet", "--workers", "0"])
    assert result.exit_code == 0, result.output
    logged = records(run)
    resumed = next(i for i, r in enumerate(logged) if r["kind"] == "resume")
    assert [r["agent_steps"] for r in logged[resumed:] if r["kind"] == "eval"] == [240]
    assert read_checkpoint(run)["counters"]["final_eval"] == 240
    again = CliRunner().invoke(main, ["train", "--resume", str(run), "--quiet", "--workers", "0"])
    assert again.exit_code != 0 and "already finished its budget" in again.output


def test_a_run_that_diverges_before_its_first_checkpoint_says_there_is_none(tmp_path):
    run = tmp_path / "run"
    result = CliRunner().invoke(main, ["train", "--task", "gym:CartPole-v1", "--budget", "120", "--workers", "0",
                                       "--run-dir", str(run), "--quiet", *TINY_ARGS, "--set", "train.lr=1e30",
                                       "--set", "train.lr_final=1e30"])
    assert result.exit_code == 1, result.output
    assert "training diverged" in result.output and "no checkpoint was written before it" in result.output
    assert not (run / "checkpoints" / "latest.pt").exists()


def test_a_new_run_does_not_overwrite_an_existing_one(finished_run):
    result = CliRunner().invoke(main, ["train", "--task", "gym:CartPole-v1", "--run-dir", str(finished_run)])
    assert result.exit_code != 0 and f"--resume {finished_run}" in result.output
