"""The Ray trainer: same algorithm and metrics as the single-process trainer, workers that
die are restarted, environments that raise are made again without writing half an
episode to replay.  Ray runs for real (``local_mode`` is gone): one local instance for
the module."""
import json
import os
import threading
import time

import gymnasium as gym
import pytest
import ray
import torch

from ez_robot.config import load_config
from ez_robot.evaluation import load_run
from ez_robot.ray_trainer import init_ray

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


# --- environments that raise (no Ray needed) --------------------------------------------

class FlakyCartPole(gym.Wrapper):
    """CartPole whose ``fail_at``-th step (counted over all instances) raises."""

    steps = 0

    def __init__(self, fail_at: set):
        super().__init__(gym.make("CartPole-v1"))
        self.fail_at = fail_at

    def step(self, action):
        FlakyCartPole.steps += 1
        if FlakyCartPole.steps in self.fail_at:
            raise RuntimeError(f"simulator blew up at step {FlakyCartPole.steps}")
        return self.env.step(action)


def flaky_actor(fail_at: set, num_envs=2, segment_length=5):
    from ez_robot.actor import Actor
    from ez_robot.inference import TorchInference
    from ez_robot.networks import make_network
    from ez_robot.ray_trainer import _GuardedEnv

    config = load_config("gym:CartPole-v1", overrides=TINY)
    FlakyCartPole.steps = 0
    envs = [_GuardedEnv(lambda seed: FlakyCartPole(fail_at), seed=i) for i in range(num_envs)]
    net = make_network((4,), 2, config.model).eval()
    actor = Actor(envs, TorchInference(net), config.search, segment_length=segment_length, tail_length=2,
                  frame_stack=1, seed=0)
    return actor, envs


def test_an_env_that_raises_is_made_again_and_its_unfinished_episode_dropped():
    from ez_robot.ray_trainer import _drop_failed

    actor, envs = flaky_actor(fail_at={23})  # env 0 at its 12th step
    kept, dropped_moves, decisions = [], 0, 15
    for _ in range(decisions):
        unsaved = [len(t.actions) for t in actor.trajectories]
        segments, episodes = actor.step(0, 1.0)
        # a failed env loses the moves not yet cut into a segment, and the failed move
        dropped_moves += sum(unsaved[i] + 1 for i, env in enumerate(envs) if env.failed)
        segments, episodes = _drop_failed(envs, segments, episodes)
        kept += segments
    assert envs[0].failures == 1 and envs[1].failures == 0 and dropped_moves > 0
    # every move is in exactly one stored segment, dropped, or in an unfinished trajectory
    pending = sum(len(t.actions) for t in actor.trajectories)
    assert sum(s.num_own for s in kept) + dropped_moves + pending == decisions * len(envs)
    for segment in kept:  # no stored segment holds the failed move (reward 0, a repeated observation)
        assert segment.rewards.min() == 1.0
    actor.step(0, 1.0)  # the remade env goes on
    assert not envs[0].failed and envs[0].failures_in_a_row == 0


def test_too_many_env_failures_in_a_row_stop_with_the_error():
    from ez_robot.ray_trainer import EnvironmentFailed

    actor, envs = flaky_actor(fail_at=set(range(1, 1000)), num_envs=1)
    with pytest.raises(EnvironmentFailed, match="failed 6 times in a row.*simulator blew up"):
        for _ in range(10):
            actor.step(0, 1.0)


def test_a_cluster_without_free_resources_for_the_run_is_named_in_words():
    from ez_robot.ray_trainer import resource_shortfall

    assert resource_shortfall({"CPU": 4.0}, {"CPU": 4.0, "memory": 1e9}) is None
    assert resource_shortfall({"CPU": 1.0, "GPU": 0.0}, {"CPU": 1.0}) is None  # a CPU-only run on a CPU cluster
    message = resource_shortfall({"CPU": 4.0, "GPU": 1.5}, {"CPU": 2.0})
    assert "needs 4 CPU (free: 2), 1.5 GPU (free: 0)" in message and "fewer --workers" in message
    assert "CPU" not in resource_shortfall({"CPU": 1.0, "GPU": 1.0}, {"CPU": 3.0, "GPU": 0.5})


# --- runs -------------------------------------------------------------------------------

def test_both_trainers_write_the_same_kinds_of_metrics(local_ray, tmp_path):
    from ez_robot import ray_trainer, trainer

    config = load_config("gym:CartPole-v1", budget="240", seed=3, overrides=TINY)
    single = trainer.train(config, tmp_path / "single", device="cpu", progress=False, checkpoint_interval=20)
    distributed = ray_trainer.train(config, tmp_path / "ray", workers=1, reanalyze_workers=1, device="cpu",
                                    progress=False, checkpoint_interval=20)
    for summary in (single, distributed):
        assert summary["agent_steps"] == 240 and summary["train_steps"] == 60
        assert {"selfplay", "reanalyze", "learner", "sample"} <= set(summary["seconds"])
    assert distributed["restarts"] == 0
    by_trainer = {name: records(tmp_path / name) for name in ("single", "ray")}
    kinds = {name: {r["kind"] for r in rs} for name, rs in by_trainer.items()}
    assert kinds["single"] == kinds["ray"] == {"episode", "train", "eval"}
    keys = {name: {k for r in rs if r["kind"] == "train" for k in r} for name, rs in by_trainer.items()}
    assert keys["single"] == keys["ray"]
    run = load_run(tmp_path / "ray")  # the Ray trainer's checkpoint is the same format
    assert run.counters["train_steps"] == 60
    meta = json.loads((tmp_path / "ray" / "checkpoints" / "latest.json").read_text())
    assert meta["trainer"] == "ray" and meta["format"] == 1 and meta["torch_version"] == torch.__version__


def test_killed_workers_are_restarted_and_the_run_finishes(local_ray, tmp_path):
    """Kills the self-play worker and the reanalyze worker mid-run (as the OOM killer
    would); Ray restarts them, they pull the latest weights, the run finishes its budget
    and records the restarts."""
    from ez_robot import ray_trainer

    config = load_config("gym:CartPole-v1", budget="240", overrides=TINY + ["train.selfplay_update_interval=5"])
    killed = []

    def kill_mid_run():
        deadline = time.time() + 120
        while time.time() < deadline and len(killed) < 2:
            names = ray.util.list_named_actors()
            storage = [n for n in names if n.endswith("-storage")]
            if storage:
                counters = ray.get(ray.get_actor(storage[0]).get_counters.remote())
                if counters["train_steps"] >= 10:
                    for suffix in ("-selfplay-0", "-reanalyze-0"):
                        ray.kill(ray.get_actor(next(n for n in names if n.endswith(suffix))), no_restart=False)
                        killed.append((suffix, counters["agent_steps"]))
                    return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_mid_run)
    killer.start()
    summary = ray_trainer.train(config, tmp_path / "run", workers=1, reanalyze_workers=1, device="cpu",
                                progress=False, checkpoint_interval=50)
    killer.join()
    assert len(killed) == 2 and killed[0][1] < 240, killed  # killed before self-play was over
    assert summary["agent_steps"] == 240 and summary["train_steps"] == 60
    assert summary["restarts"] == 2
    logged = records(tmp_path / "run")
    assert sorted(r["worker"] for r in logged if r["kind"] == "restart") == ["reanalyze-0", "selfplay-0"]
    assert json.loads((tmp_path / "run" / "checkpoints" / "latest.json").read_text())["restarts"] == 2


@pytest.mark.slow
def test_both_trainers_learn_cartpole(local_ray, tmp_path):
    """The README's check run (2k steps of gym:CartPole-v1, about 4 minutes each on 2
    cores): a random policy scores ~22; both trainers must get well past it."""
    from ez_robot import ray_trainer, trainer

    config = load_config("gym:CartPole-v1", budget="2k", overrides=["replay.min_replay_size=500"])
    single = trainer.train(config, tmp_path / "single", device="cpu", progress=False)
    distributed = ray_trainer.train(config, tmp_path / "ray", workers=1, reanalyze_workers=0, device="cpu",
                                    progress=False)
    for name, summary in (("single-process", single), ("ray", distributed)):
        assert summary["last_eval"]["mean"] > 100, (name, summary["last_eval"])
