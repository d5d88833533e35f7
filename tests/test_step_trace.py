"""EZ_ROBOT_STEP_TRACE: one line per training step of what it trained on, and a traced
run trains as an untraced one."""
import json

import pytest

from ez_robot import step_trace
from ez_robot.config import load_config
from ez_robot.trainer import train


def tiny_config():
    return load_config("gym:CartPole-v1", budget="120", seed=3, overrides=["train.inference=torch",
        "replay.min_replay_size=40", "train.batch_size=8", "search.num_simulations=4",
        "train.eval_episodes=1", "train.target_update_interval=20", "train.selfplay_update_interval=10"])


def train_records(run_dir):
    return [r for r in map(json.loads, open(run_dir / "metrics.jsonl")) if r["kind"] == "train"]


def test_a_traced_run_writes_each_steps_batch_and_trains_as_an_untraced_one(tmp_path, monkeypatch):
    config = tiny_config()
    train(config, tmp_path / "plain", device="cpu", progress=False)
    (tmp_path / "trace").mkdir()
    monkeypatch.setenv(step_trace.ENV, str(tmp_path / "trace"))
    summary = train(config, tmp_path / "traced", device="cpu", progress=False)

    (path,) = (tmp_path / "trace").iterdir()
    lines = [json.loads(line) for line in open(path)]
    assert [line["step"] for line in lines] == list(range(summary["train_steps"]))
    for line in lines:
        t = line["step"]
        assert line["target_version"] == t // 20 * 20 and line["acting_version"] == t // 10 * 10
        assert line["moves"] >= 40 and line["played"] >= line["moves"] and line["played"] >= 2 * (t + 1)
        assert line["newest_collected"] <= t and 0.0 <= line["policy_entropy"] <= 0.7
        if line["sample_with_search"] > 0:  # stored searches of a target network the step may use
            assert line["search_from"] <= line["search_version_min"] <= line["search_version_max"] <= t
    logged = {r["train_steps"]: r for r in train_records(tmp_path / "traced")}
    for line in lines:
        if line["step"] + 1 in logged:
            assert line["lr"] == logged[line["step"] + 1]["lr"]
            assert abs(line["value_target_mean"] - logged[line["step"] + 1]["target_value_mean"]) < 1e-6
    untimed = [{k: v for k, v in r.items() if k != "time"} for r in train_records(tmp_path / "plain")]
    assert untimed == [{k: v for k, v in r.items() if k != "time"} for r in train_records(tmp_path / "traced")]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_traced_ray_steps_run_trains_each_step_on_the_current_sweep_at_its_lead(tmp_path, monkeypatch):
    """``train.pacing=steps`` as the trace sees it: every batch reads only stored searches
    of the current target network (no cell searched by the learner), and is sampled when
    self-play has played exactly its lead past the step's ratio.  A Ray run of its own
    (the workers inherit the variable from the Ray started after it is set): 1-3 minutes."""
    import ray

    from ez_robot import ray_trainer
    from ez_robot.ray_storage import StepsPacing

    (tmp_path / "trace").mkdir()
    monkeypatch.setenv(step_trace.ENV, str(tmp_path / "trace"))
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:9")  # never a cluster this machine may point at
    config = load_config("gym:CartPole-v1", budget="240", seed=1, overrides=[
        "replay.min_replay_size=60", "train.batch_size=8", "search.num_simulations=4", "train.eval_episodes=2",
        "train.train_steps_per_agent_step=0.25", "train.pacing=steps", "train.selfplay_update_interval=10",
        "train.target_update_interval=20"])
    try:
        summary = ray_trainer.train(config, tmp_path / "run", workers=1, reanalyze_workers=1, device="cpu",
                                    progress=False, max_seconds=300)
    finally:
        ray.shutdown()
    assert summary["train_steps"] == 60
    (path,) = (tmp_path / "trace").iterdir()
    lines = [json.loads(line) for line in open(path)]
    assert [line["step"] for line in lines] == list(range(60))
    pacing, first, timed = StepsPacing(config, lead=16), lines[0]["played"], 0
    for line in lines:
        t = line["step"]
        assert line["target_version"] == t // 20 * 20 == line["search_version_min"] == line["search_version_max"]
        assert line["value_fresh"] == line["policy_fresh"] == 1.0 and line["searches"] == 0
        if first < pacing.ceiling(t) < 240:  # past the replay's first fill, before the budget's end
            assert line["played"] == pacing.ceiling(t)
            timed += 1
    assert timed > 20
