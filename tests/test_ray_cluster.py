"""The Ray trainer on a cluster of several nodes: the plan that places a run's actors on
them, joining a cluster bound to 127.0.0.1, and a real two-node cluster on this machine
(Ray's own ``ray.cluster_utils.Cluster``) that trains a run and loses a node under it."""
import json
import os
import threading
import time

import pytest
import ray

from ez_robot.config import load_config
from ez_robot.errors import TrainingAborted
from ez_robot.ray_cluster import NodeCapacity, Placement

TINY = ["replay.min_replay_size=60", "train.batch_size=8", "search.num_simulations=4",
        "train.train_steps_per_agent_step=0.25", "train.eval_episodes=2"]


def node_id(i: int) -> str:
    return f"{i + 1:02x}" * 28  # Ray's node ids are 28 bytes in hex


def nodes(*cpus_gpus, driver=0):
    return [NodeCapacity(node_id(i), f"10.0.0.{i}", cpus, gpus, driver=i == driver)
            for i, (cpus, gpus) in enumerate(cpus_gpus)]


def on(placement, i: int):
    return sorted(role for role, where in placement.nodes.items() if where == node_id(i) and role != "data")


# --- the plan -----------------------------------------------------------------------------

def test_a_run_larger_than_any_node_is_spread_over_the_nodes_with_shared_cpus():
    """Two nodes of one CPU, four compute actors: a CPU each fits no node (Ray then waited
    in silence for good); half a CPU each fits two per node.  The learner stays with the
    storage and the replay on the driver's node."""
    plan = Placement.plan(nodes((1, 0), (1, 0)), workers=1, reanalyze_workers=2, gpus=0)
    assert plan.cpu == 0.5 and plan.gpu == 0 and plan.device == "cpu"
    assert plan.nodes["learner"] == plan.nodes["data"] == node_id(0)
    assert len(on(plan, 0)) == len(on(plan, 1)) == 2
    assert plan.options("learner")["num_cpus"] == 0.5
    assert plan.options("learner")["scheduling_strategy"].node_id == node_id(0)
    assert plan.options("data")["num_cpus"] == 0
    # room for a CPU each: a CPU each, spread
    roomy = Placement.plan(nodes((4, 0), (4, 0)), workers=2, reanalyze_workers=2, gpus=0)
    assert roomy.cpu == 1.0 and len(on(roomy, 0)) == 3 and len(on(roomy, 1)) == 2
    # one node (an embedded Ray on 2 cores): its CPUs divided among the actors, as before
    assert Placement.plan(nodes((2, 0)), workers=1, reanalyze_workers=1, gpus=0).cpu == pytest.approx(0.6666)


def test_the_learner_and_reanalyze_go_where_the_gpu_is_and_self_play_where_cpus_are():
    plan = Placement.plan(nodes((2, 0), (4, 1), driver=0), workers=2, reanalyze_workers=2, gpus=1)
    assert plan.device == "cuda" and plan.gpu == 0.25  # learner, 2 reanalyze workers, evaluation
    assert on(plan, 1) == ["learner", "reanalyze-0", "reanalyze-1"]
    assert on(plan, 0) == ["selfplay-0", "selfplay-1"]
    assert plan.nodes["data"] == node_id(0)
    assert "num_gpus" not in plan.options("selfplay-0") and plan.options("reanalyze-1")["num_gpus"] == 0.25


def test_a_run_the_cluster_cannot_hold_is_refused_at_once_saying_what_it_lacks():
    with pytest.raises(TrainingAborted, match=r"lacks 1 free GPUs \(free: 0\) for this run .*10\.0\.0\.1 \(020202\): "
                                              r"1 CPU, 0 GPU free.*--gpus"):
        Placement.plan(nodes((1, 0), (1, 0)), workers=1, reanalyze_workers=1, gpus=1)
    with pytest.raises(TrainingAborted, match="lacks a free CPU on any node"):
        Placement.plan(nodes((0, 0), (0, 0)), workers=1, reanalyze_workers=0, gpus=0)
    # the GPU is there, but on a node with no CPU free for the learner beside it
    with pytest.raises(TrainingAborted, match="lacks a node with both a CPU share and 0.5 GPU free"):
        Placement.plan(nodes((4, 0), (0, 1)), workers=1, reanalyze_workers=0, gpus=1)


def test_a_loopback_address_is_told_from_others():
    from ez_robot.ray_cluster import _is_loopback

    assert _is_loopback("127.0.0.1:6379") and _is_loopback("localhost:6379") and _is_loopback("[::1]:6379")
    assert not _is_loopback("192.0.2.7:6379") and not _is_loopback("ray://127.0.0.1:10001")


# --- a real cluster of two nodes ----------------------------------------------------------

@pytest.fixture
def two_nodes():
    """A head and a worker node of one CPU each, both bound to 127.0.0.1, and this process
    joined to it as ``ez-robot train --address`` joins (before the fix it retried the
    machine's other address for minutes).  Ray is told to find a dead node within ~2 s."""
    from ray.cluster_utils import Cluster

    from ez_robot.ray_cluster import init_ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    fast = {"health_check_period_ms": 500, "health_check_failure_threshold": 4, "health_check_timeout_ms": 1000,
            "health_check_initial_delay_ms": 0}
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "node_ip_address": "127.0.0.1", "include_dashboard": False, "_system_config": fast})
    worker = cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    try:
        start = time.time()
        assert init_ray(cluster.address) is True
        assert time.time() - start < 60 and len([n for n in ray.nodes() if n["Alive"]]) == 2
        yield cluster, worker
    finally:
        ray.shutdown()
        cluster.shutdown()


def _kill_node_mid_run(cluster, node, killed: list) -> None:
    """Removes ``node`` once the learner has trained a little."""
    deadline = time.time() + 300
    while time.time() < deadline:
        storage = [n for n in ray.util.list_named_actors() if n.endswith("-storage")]
        if storage:
            try:
                counters = ray.get(ray.get_actor(storage[0]).progress.remote())["counters"]
            except (ray.exceptions.RayError, ValueError):
                counters = None
            if counters is not None and counters.train_steps >= 10:
                cluster.remove_node(node, allow_graceful=False)
                killed.append(counters)
                return
        time.sleep(0.1)


@pytest.mark.timeout(600)
def test_a_run_trains_on_two_nodes_of_one_cpu_each(two_nodes, tmp_path, capfd):
    """1 self-play + 1 reanalyze worker + the learner: asking a CPU each, the third actor
    fit neither node and the run waited without a word for good.  Planned, they share the
    two nodes, the learner on the head with the data, and the run trains to its budget."""
    from ez_robot import ray_trainer

    cluster, worker = two_nodes
    config = load_config("gym:CartPole-v1", budget="120", overrides=TINY)
    summary = ray_trainer.train(config, tmp_path / "run", workers=1, reanalyze_workers=1, device="cpu",
                                address=cluster.address, progress=False, max_seconds=400)
    assert summary["finished"] and (summary["agent_steps"], summary["train_steps"]) == (120, 30)
    placed = [line for line in capfd.readouterr().err.splitlines() if line.startswith("placement: 127.0.0.1")]
    head = ray.get_runtime_context().get_node_id()[:6]
    assert len(placed) == 2, placed  # one line per node
    assert any(f"({head}): learner" in line and "(and the replay)" in line for line in placed)
    assert any(f"({worker.node_id[:6]}): " in line for line in placed)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_run_on_two_nodes_goes_on_when_the_other_node_leaves(two_nodes, tmp_path):
    """The run above, with the worker node removed mid-run (90-300 s on 2 cores): the run
    checkpoints, goes on from there on the head alone and finishes its budget, nothing
    recorded lost."""
    from ez_robot import ray_trainer
    from ez_robot.checkpoint import load_run

    cluster, worker = two_nodes
    config = load_config("gym:CartPole-v1", budget="240", overrides=TINY)
    killed = []
    killer = threading.Thread(target=_kill_node_mid_run, args=(cluster, worker, killed), daemon=True)
    killer.start()
    summary = ray_trainer.train(config, tmp_path / "run", workers=1, reanalyze_workers=1, device="cpu",
                                address=cluster.address, progress=False, checkpoint_interval=20, max_seconds=400)
    killer.join(timeout=1)
    assert killed and killed[0].agent_steps < 240, killed  # it left before self-play was over
    assert summary["agent_steps"] == 240 and summary["train_steps"] == 60 and summary["finished"]
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    lost = [r for r in logged if r["kind"] == "node_lost"]
    assert len(lost) == 1 and lost[0]["nodes"] == [f"127.0.0.1 ({worker.node_id[:6]})"]
    at = logged.index(lost[0])
    resumed = next(i for i, r in enumerate(logged) if r["kind"] == "resume")
    assert at < resumed and {r["kind"] for r in logged[at + 1:resumed]} <= {"episode"}  # the last ones played
    assert logged[resumed]["train_steps"] >= lost[0]["train_steps"] >= 10
    # the counters go on: every episode played is logged once, and the steps only grow
    state = load_run(tmp_path / "run")
    assert state.counters["episodes"] == sum(r["kind"] == "episode" for r in logged)
    agent_steps = [r["agent_steps"] for r in logged if r["kind"] == "episode"]
    assert agent_steps == sorted(agent_steps)
    assert [r for r in logged if r["kind"] == "eval"][-1]["agent_steps"] == 240
