"""The Ray trainer: same algorithm and metrics as the single-process trainer, workers that
die are restarted.  Ray runs for real (``local_mode`` is gone): one local instance for
the module."""
import json
import os
import threading
import time

import pytest
import ray
import torch

from ez_robot.checkpoint import CHECKPOINT_FORMAT
from ez_robot.config import load_config
from ez_robot.checkpoint import load_run
from ez_robot.ray_cluster import init_ray

TINY = ["replay.min_replay_size=60", "train.batch_size=8", "search.num_simulations=4",
        "train.train_steps_per_agent_step=0.25", "train.eval_episodes=2"]


@pytest.fixture(scope="module")
def local_ray():
    """The trainer's embedded instance.  Without --address it starts its own even where
    RAY_ADDRESS points at a cluster (here at nothing, so joining would fail)."""
    saved = os.environ.get("RAY_ADDRESS")
    os.environ["RAY_ADDRESS"] = "127.0.0.1:9"
    try:
        assert init_ray(num_cpus=2)
    finally:
        if saved is None:
            del os.environ["RAY_ADDRESS"]
        else:
            os.environ["RAY_ADDRESS"] = saved
    yield
    ray.shutdown()


def records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


# --- runs -------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", [pytest.param("batch", marks=pytest.mark.slow), "buffer"])
def test_both_trainers_write_the_same_metrics_and_train_on_offline(local_ray, tmp_path, mode):
    """Both trainers, both reanalyze modes: the same kinds of records and keys, the same
    checkpoint format (batch reanalyze, not the default, in the slow suite: the default
    suite's time limit; one process covers it in tests/test_reanalyze_modes.py).  With ``train.offline_train_steps`` the learner trains on after the
    last decision, with an evaluation at the budget before those steps and the final one
    after them (the Ray trainer's is labelled with the learner's count when it was asked for)."""
    from ez_robot import ray_trainer, trainer

    config = load_config("gym:CartPole-v1", budget="240", seed=3,
                         overrides=TINY + [f"reanalyze.mode={mode}", "train.target_update_interval=20",
                                           "train.offline_train_steps=40"])
    single = trainer.train(config, tmp_path / "single", device="cpu", progress=False, checkpoint_interval=20)
    distributed = ray_trainer.train(config, tmp_path / "ray", workers=1, reanalyze_workers=1, device="cpu",
                                    progress=False, checkpoint_interval=20)
    for summary in (single, distributed):
        assert (summary["agent_steps"], summary["train_steps"]) == (240, 100)  # 60 paced to self-play, then 40
        assert {"selfplay", "reanalyze", "learner", "sample"} <= set(summary["seconds"])
    assert distributed["restarts"] == 0
    by_trainer = {name: records(tmp_path / name) for name in ("single", "ray")}
    kinds = {name: {r["kind"] for r in rs} for name, rs in by_trainer.items()}
    assert kinds["single"] == kinds["ray"] == {"episode", "train", "eval"}
    keys = {name: {k for r in rs if r["kind"] == "train" for k in r} for name, rs in by_trainer.items()}
    assert keys["single"] == keys["ray"]
    for name, logged in by_trainer.items():
        at_budget = [r["train_steps"] for r in logged if r["kind"] == "eval" and r["agent_steps"] == 240]
        assert len(at_budget) == 2 and at_budget[0] < 100 and at_budget[1] == 100, (name, at_budget)
        offline = [r["train_steps"] for r in logged if r["kind"] == "train" and r["train_steps"] > 60]
        assert offline == [100], name  # logged every 50 steps: the one after self-play ended
        assert load_run(tmp_path / name).counters["train_steps"] == 100  # the same checkpoint format
    assert by_trainer["single"][-1]["kind"] == "eval"
    first = next(r for r in by_trainer["single"] if r["kind"] == "eval" and r["agent_steps"] == 240)
    assert first["train_steps"] == 60  # the single-process trainer evaluates exactly at self-play's share
    meta = json.loads((tmp_path / "ray" / "checkpoints" / "latest.json").read_text())
    assert meta["trainer"] == "ray" and meta["format"] == CHECKPOINT_FORMAT and meta["torch_version"] == torch.__version__


def test_killed_workers_are_restarted_and_the_run_finishes(local_ray, tmp_path):
    """Kills the self-play worker and the reanalyze worker mid-run (as the OOM killer
    would), self-play while it plays decisions granted to it; Ray restarts them, they pull
    the latest weights, the run finishes its budget and records the restarts.  Before the
    storage granted a dead worker's decisions again, this run stopped one training step
    short and waited forever (here: until ``max_seconds``, then the step count fails)."""
    from ez_robot import ray_trainer

    config = load_config("gym:CartPole-v1", budget="240", overrides=TINY + ["train.selfplay_update_interval=5"])
    killed = []

    def kill_mid_run():
        deadline = time.time() + 240  # the run's max_seconds: its actors start slowly on busy cores
        while time.time() < deadline and len(killed) < 2:
            names = ray.util.list_named_actors()
            storage = [n for n in names if n.endswith("-storage")]
            if storage:
                progress = ray.get(ray.get_actor(storage[0]).progress.remote())
                counters = progress["counters"]
                # while self-play plays decisions granted to it and not yet reported
                if counters.train_steps >= 10 and counters.agent_steps > progress["played"]:
                    for suffix in ("-selfplay-0", "-reanalyze-0"):
                        ray.kill(ray.get_actor(next(n for n in names if n.endswith(suffix))), no_restart=False)
                        killed.append((suffix, counters.agent_steps))
                    return
            time.sleep(0.01)

    killer = threading.Thread(target=kill_mid_run)
    killer.start()
    summary = ray_trainer.train(config, tmp_path / "run", workers=1, reanalyze_workers=1, device="cpu",
                                progress=False, checkpoint_interval=50, max_seconds=240)  # a stall ends, and fails
    killer.join()
    assert len(killed) == 2 and killed[0][1] < 240, killed  # killed before self-play was over
    assert summary["agent_steps"] == 240 and summary["train_steps"] == 60
    assert summary["restarts"] == 2
    logged = records(tmp_path / "run")
    restarts = {r["worker"]: r for r in logged if r["kind"] == "restart"}
    assert sorted(restarts) == ["reanalyze-0", "selfplay-0"]
    assert "lost_steps" in restarts["selfplay-0"]  # the grant it died with (4 or 8 decisions in 4 runs)
    assert json.loads((tmp_path / "run" / "checkpoints" / "latest.json").read_text())["restarts"] == 2


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("mode", ["buffer", "batch"])
@pytest.mark.parametrize("trainer", ["single", "ray"])
def test_both_trainers_learn_cartpole(local_ray, tmp_path, trainer, mode):
    """5k env steps of gym:CartPole-v1 (6-8 minutes per trainer on 2 cores): random play
    scores ~22; both trainers must get well past it.  At 2k steps the final return of
    either trainer spread over 85-359 across seeds (benchmarks/README.md, trainer
    parity), so a bar of 100 there failed for either now and then; at 5k the lowest of
    six runs (seeds 0-2, both trainers) was 141."""
    from ez_robot import ray_trainer
    from ez_robot import trainer as single_process

    config = load_config("gym:CartPole-v1", budget="5k",
                         overrides=["replay.min_replay_size=500", f"reanalyze.mode={mode}"])
    if trainer == "single":
        summary = single_process.train(config, tmp_path, device="cpu", progress=False)
    else:
        summary = ray_trainer.train(config, tmp_path, workers=1, reanalyze_workers=0, device="cpu", progress=False)
    assert summary["last_eval"]["mean"] > 100, summary["last_eval"]


def test_the_embedded_ray_serves_no_dashboard(local_ray):
    """Ray always starts its API-server process (``dashboard.py``); the embedded instance
    starts it without the web UI and without usage statistics, as the README says."""
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen("http://127.0.0.1:8265/", timeout=2)
    assert os.environ["RAY_USAGE_STATS_ENABLED"] == "0"


@ray.remote
def _evaluation_result(mean: float, wait_for: str | None = None) -> dict:
    """An evaluation's result; with wait_for, only once that file exists (no timing involved)."""
    while wait_for is not None and not os.path.exists(wait_for):
        time.sleep(0.02)
    return {"seconds": 0.5, "mean": mean}


def test_evaluations_are_logged_in_the_order_they_were_started(local_ray, tmp_path):
    """Evaluations run as remote tasks and can finish out of order; the log keeps the order
    they were started in (a later one waits for the earlier one), so an evaluation logged
    before a checkpoint never comes from after the one that checkpoint still has pending."""
    from types import SimpleNamespace

    from ez_robot.ray_trainer import _Pipeline

    logged = []
    pipeline = object.__new__(_Pipeline)
    pipeline.counters = SimpleNamespace(agent_steps=100, next_eval=120)  # no new evaluation is due
    pipeline.files = SimpleNamespace(log=lambda kind, counters, **values: logged.append((counters, values["mean"])))
    pipeline.seconds = {"evaluation": 0.0}
    release = tmp_path / "release"
    earlier, later = _evaluation_result.remote(1.0, str(release)), _evaluation_result.remote(2.0)
    pipeline.evals = {earlier: (40, "started at 45"), later: (80, "started at 96")}
    assert ray.wait([later], timeout=60)[0]
    pipeline._evaluations()
    assert logged == [] and len(pipeline.evals) == 2  # the later one is done, the earlier one is not
    release.touch()
    assert ray.wait([earlier], timeout=60)[0]
    pipeline._evaluations()
    assert logged == [("started at 45", 1.0), ("started at 96", 2.0)] and not pipeline.evals
    assert pipeline.seconds["evaluation"] == 1.0


def test_the_learner_trains_only_on_what_self_play_has_played():
    """Self-play is granted its decisions before it plays them (8 per request, two
    requests ahead).  The learner's ratio counts the decisions played and reported, never
    the ones granted: counted at grant time, the learner trained up to 16 decisions' worth
    of steps on data that did not exist yet, which the single-process trainer never does."""
    from ez_robot.ray_storage import SharedStorage
    from ez_robot.ray_workers import STEPS_PER_REQUEST
    from ez_robot.schedules import Counters, train_steps_due

    config = load_config("gym:CartPole-v1", budget="2k", overrides=["replay.min_replay_size=500"])
    storage = SharedStorage(config, Counters(agent_steps=600, train_steps=300), {"acting": (0, {})}, lead=16)
    storage.set_replay_moves(600)
    for _ in range(2):
        assert storage.request_steps(STEPS_PER_REQUEST, 1, worker=0)["granted"] == STEPS_PER_REQUEST
    assert storage.progress()["counters"].agent_steps == 616 and storage.progress()["played"] == 600
    assert train_steps_due(config, storage.progress()["played"]) == 300  # nothing new to train on yet
    storage.report(STEPS_PER_REQUEST, [], [], {}, worker=0)
    assert train_steps_due(config, storage.progress()["played"]) == 304


def test_a_checkpoint_keeps_only_the_decisions_played():
    """Decisions granted and still playing are not in a checkpoint's counters: a run resumed
    from it plays them again rather than counting data it never stored."""
    from ez_robot.ray_storage import SharedStorage
    from ez_robot.ray_workers import STEPS_PER_REQUEST
    from ez_robot.schedules import Counters

    config = load_config("gym:CartPole-v1", budget="2k", overrides=["replay.min_replay_size=500"])
    storage = SharedStorage(config, Counters(agent_steps=600, env_frames=600, train_steps=300),
                            {"acting": (0, {})}, lead=16)
    storage.set_replay_moves(600)
    for worker in (0, 1):
        storage.request_steps(STEPS_PER_REQUEST, 1, worker=worker)
    storage.report(STEPS_PER_REQUEST, [], [], {}, worker=1)
    saved = storage.saved_counters()
    assert (saved.agent_steps, saved.env_frames) == (608, 608)
    assert storage.progress()["counters"].agent_steps == 616  # the live counters still hold the grant


def test_a_grant_lost_with_its_worker_is_granted_again():
    """A self-play worker killed between a grant and its report never plays those
    decisions.  Before, the storage kept them as spent: self-play ended short of the
    budget, the learner's ratio never reached the last training steps and the run waited
    forever (the killed-worker test hung about one run in eight).  The restarted worker
    gets them back."""
    from ez_robot.ray_storage import SharedStorage
    from ez_robot.ray_workers import STEPS_PER_REQUEST
    from ez_robot.schedules import Counters

    config = load_config("gym:CartPole-v1", budget="40", overrides=["replay.min_replay_size=8"])
    storage = SharedStorage(config, Counters(), {"acting": (0, {})}, lead=1000)
    assert storage.worker_started("selfplay", 0) == 0
    played = 0
    for _ in range(2):
        played += storage.request_steps(STEPS_PER_REQUEST, 1, worker=0)["granted"]
        storage.report(STEPS_PER_REQUEST, [], [], {}, worker=0)
    assert storage.request_steps(STEPS_PER_REQUEST, 1, worker=0)["granted"] == STEPS_PER_REQUEST  # then killed
    assert storage.worker_started("selfplay", 0) == 1
    assert storage.progress()["counters"].agent_steps == played == storage.progress()["played"]
    while (granted := storage.request_steps(STEPS_PER_REQUEST, 1, worker=0)["granted"]) > 0:
        storage.report(granted, [], [], {}, worker=0)
        played += granted
    assert played == storage.progress()["played"] == 40
    assert storage.drain()["events"][-1][2] == {"worker": "selfplay-0", "restarts": 1, "lost_steps": STEPS_PER_REQUEST}


def test_the_storage_and_replay_actors_run_without_torch(tmp_path):
    """The storage and replay actors hold no network, so their processes never import torch
    (~3 CPU-s and ~200 MB each otherwise): their module imports none, and what a run sends
    the storage (config, counters, the networks' weights as numpy arrays, plain episode
    records) unpickles without it.  A process that unpickled a tensor or one of the actor
    module's objects would import torch."""
    import pickle
    import subprocess
    import sys

    from ez_robot.builders import env_spec, make_model
    from ez_robot.ray_workers import shippable
    from ez_robot.schedules import Counters

    config = load_config("gym:CartPole-v1", budget="2k")
    weights = shippable(make_model(config, env_spec(config)).state_dict())
    sent = tmp_path / "sent.pkl"
    sent.write_bytes(pickle.dumps((config, Counters(), {"acting": (0, weights), "target": (0, weights)})))
    code = f"""if True:
        import pickle, sys
        from ez_robot.ray_storage import ReplayWorker, SharedStorage
        config, counters, weights = pickle.loads(open({str(sent)!r}, "rb").read())
        storage = SharedStorage(config, counters, weights, lead=16)
        storage.report(0, [{{"episode_return": 9.0, "length": 9}}], [], {{}}, worker=0)
        version, acting = storage.get_weights("acting")
        print(len(acting), storage.drain()["events"][0][2], sorted(m for m in sys.modules if m.startswith("torch")))
    """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split(" ", 1)
    assert out[0] == str(len(weights)) and out[1].strip() == "{'episode_return': 9.0, 'length': 9} []", out


# --- pacing -------------------------------------------------------------------------------

def _interleave(pacing: str, learner_first: bool) -> tuple[list, list]:
    """Self-play and the learner against the storage, one racing ahead of the other as far
    as the storage lets it.  Returns what each decision was played with (training step,
    acting weights) and how many decisions the replay held at each training step."""
    from ez_robot.ray_storage import SharedStorage
    from ez_robot.schedules import Counters

    config = load_config("gym:CartPole-v1", budget="400", overrides=[
        "replay.min_replay_size=100", "train.selfplay_update_interval=10", f"train.pacing={pacing}"])
    storage = SharedStorage(config, Counters(), {"acting": (0, {}), "target": (0, {})}, lead=16)
    storage.set_replay_moves(0)
    decisions, samples = [], []

    def selfplay_request() -> bool:
        grant = storage.request_steps(8, 1, worker=0)
        decisions.extend([(grant["train_steps"], grant["acting_version"])] * grant["granted"])
        done = grant["selfplay_done"] and grant["granted"] > 0 and pacing == "steps"
        storage.report(grant["granted"], [], [], {}, worker=0, moves=grant["granted"], flushed=done)
        if pacing == "free":  # the replay actor reports its size itself
            storage.set_replay_moves(len(decisions))
        return grant["granted"] > 0

    def learner_step() -> bool:
        progress = storage.progress()
        steps = progress["counters"].train_steps
        if steps >= progress["due"] or len(decisions) < 100:  # nothing due, or the replay is not ready
            return False
        samples.append(progress["played"])
        if (steps + 1) % 10 == 0:  # the acting network refreshed: published before the step count
            storage.set_weights("acting", steps + 1, {})
        storage.set_train_steps(steps + 1)
        return True

    first, second = (learner_step, selfplay_request) if learner_first else (selfplay_request, learner_step)
    while len(decisions) < 400 or storage.progress()["counters"].train_steps < 200:
        while first():
            pass
        second()
    return decisions, samples


def test_steps_pacing_plays_and_trains_on_the_same_timetable_whoever_runs_ahead():
    """``train.pacing=steps``: whether self-play or the learner is the faster side, every
    decision is played at the same training step with the same acting weights, and every
    training step samples a replay holding the same decisions.  With ``free`` (today's
    default) both depend on who ran ahead: the Ray trainer's learning depended on load."""
    fast_selfplay, fast_learner = _interleave("steps", False), _interleave("steps", True)
    assert fast_selfplay == fast_learner
    decisions, samples = fast_selfplay
    assert len(decisions) == 400 and len(samples) == 200
    # decision i is played at the step the lockstep allows it, with that step's acting weights
    assert decisions[150] == (int((150 - 16) * 0.5), int((150 - 16) * 0.5) // 10 * 10)
    # after the replay filled (100 decisions, played before any step) each step waits for
    # self-play to have played 16 decisions ahead of its ratio, and self-play waits for it
    assert samples[100] == 16 + 2 * 101 and samples == sorted(samples)
    free = _interleave("free", False), _interleave("free", True)
    assert free[0] != free[1]


def test_steps_pacing_lets_the_learner_finish_only_with_the_last_moves_in_replay():
    """At the budget the learner may take its remaining steps only once self-play has sent
    its unfinished episodes to the replay (reported as flushed)."""
    from ez_robot.ray_storage import StepsPacing

    config = load_config("gym:CartPole-v1", budget="400", overrides=["train.pacing=steps", "replay.min_replay_size=100"])
    pacing = StepsPacing(config, lead=16)
    assert pacing.due(400, all_flushed=False) == int((399 - 16) * 0.5)
    assert pacing.due(400) == 200
    for steps in (0, 57, 183):
        ceiling = pacing.ceiling(steps)
        assert pacing.due(ceiling) == steps + 1 and pacing.due(ceiling - 1) == steps


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_steps_pacing_makes_a_ray_run_the_same_beside_a_busy_neighbour(local_ray, tmp_path):
    """``train.pacing=steps``, one self-play worker and one reanalyze worker sweeping the
    buffer: the same Ray run twice, the second beside a process that keeps a core busy,
    plays the same episodes and trains to the same losses (with ``free`` the two differ:
    the learner, self-play and the sweep race, and who got how far depends on the load).
    Two Ray runs: 2-9 minutes on 2 cores; the timetable itself is checked in the default
    suite above."""
    import subprocess
    import sys

    from ez_robot import ray_trainer

    config = load_config("gym:CartPole-v1", budget="240", seed=1, overrides=TINY + [
        "train.pacing=steps", "train.selfplay_update_interval=10", "train.target_update_interval=20"])
    logged = []
    for busy in (False, True):
        neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
        try:
            summary = ray_trainer.train(config, tmp_path / f"busy-{busy}", workers=1, reanalyze_workers=1,
                                        device="cpu", progress=False, checkpoint_interval=20, max_seconds=300)
        finally:
            if neighbour is not None:
                neighbour.kill()
                neighbour.wait()
        assert (summary["agent_steps"], summary["train_steps"]) == (240, 60)
        run = records(tmp_path / f"busy-{busy}")
        # a train record's agent steps are the driver's view when it logged it, not the learner's
        logged.append(([{k: v for k, v in r.items() if k != "time"} for r in run if r["kind"] == "episode"],
                       [{k: v for k, v in r.items() if k not in ("time", "agent_steps", "env_frames")}
                        for r in run if r["kind"] == "train"]))
    assert len(logged[0][0]) > 10 and logged[0] == logged[1]
