"""Groups of seeds (``ez-robot train --seeds``): the seeds train at once on Ray, each as it
would alone; a group stopped with SIGTERM resumes as a group with nothing lost; the plan
says how many run at once and why; mistakes are messages."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from ez_robot.config import load_config
from ez_robot.errors import ConfigError
from ez_robot.groups import parse_seeds
from ez_robot.seed_launcher import Seed, plan_seeds, resources
from ez_robot.trainer import train
from tests.cli_runner import user_error
from tests.test_resume import TINY, TINY_ARGS, assert_resumed_where_the_checkpoint_stopped, checkpoint_info, records


def ez(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "ez_robot.cli", *map(str, args)], capture_output=True, text=True,
                          **kwargs)


def without_time(run_dir) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in ("time", "seconds")} for r in records(run_dir)]


# --- seeds and the plan ------------------------------------------------------------------

def test_seeds_are_ranges_and_lists():
    assert parse_seeds("0-4") == [0, 1, 2, 3, 4]
    assert parse_seeds("0,2,5") == [0, 2, 5]
    assert parse_seeds(" 0-2, 7 ") == [0, 1, 2, 7]
    assert parse_seeds([3, 1]) == [3, 1]
    for bad in ("", "a", "3-1", "1-", "-1", "0,,2"):
        with pytest.raises(ConfigError, match="bad --seeds"):
            parse_seeds(bad)
    with pytest.raises(ConfigError, match="seed 2 twice"):
        parse_seeds("0-2,2")


def test_the_plan_fills_the_cluster_and_says_why():
    plan = plan_seeds(5, cpus=1, gpus=0, cluster_cpus=2, cluster_gpus=0)
    assert plan.at_once == 2 and "2 x 1 CPUs fill the cluster's 2" in plan.why
    assert plan_seeds(2, cpus=1, gpus=0, cluster_cpus=16, cluster_gpus=0).at_once == 2  # no more than the seeds
    assert plan_seeds(5, cpus=1, gpus=0, cluster_cpus=16, cluster_gpus=0, at_most=3).at_once == 3
    assert plan_seeds(5, cpus=4, gpus=1, cluster_cpus=16, cluster_gpus=2).at_once == 2  # the GPUs bound it
    assert plan_seeds(5, cpus=1.5, gpus=0, cluster_cpus=2, cluster_gpus=0).at_once == 1
    with pytest.raises(ConfigError, match="each seed needs 4 CPUs and the Ray cluster has 2"):
        plan_seeds(3, cpus=4, gpus=0, cluster_cpus=2, cluster_gpus=0)


def test_single_process_seeds_share_the_gpus_their_cpus_let_run_at_once():
    seed = Seed(0, "gym:CartPole-v1", None, 0, {"device": "auto", "threads": 1})
    held, _ = resources(seed, cluster_cpus=16, cluster_gpus=1, sharing=4)
    assert held == {"cpus": 1, "gpus": 0.25, "task_cpus": 1, "task_gpus": 0.25}
    assert plan_seeds(4, cluster_cpus=16, cluster_gpus=1, **held).at_once == 4
    assert resources(seed, cluster_cpus=2, cluster_gpus=1, sharing=4)[0]["gpus"] == 0.5  # 2 CPUs: 2 at once
    assert resources(seed, cluster_cpus=16, cluster_gpus=8, sharing=4)[0]["gpus"] == 1.0  # one process, one GPU
    on_cpu = Seed(0, "gym:CartPole-v1", None, 0, {"device": "cpu", "threads": 2})
    assert resources(on_cpu, cluster_cpus=16, cluster_gpus=1, sharing=4)[0] == \
        {"cpus": 2, "gpus": 0.0, "task_cpus": 2, "task_gpus": 0.0}


@pytest.mark.parametrize("args,message", [
    (["--seeds", "0-1", "--seed", "3"], "give --seed or --seeds, not both"),
    (["--seeds", "1-0"], "bad --seeds '1-0'"),
    (["--seeds", "0-1", "--budget", "10x"], "seed 0: bad budget '10x'"),
    (["--seeds", "0-1", "--workers", "0", "--gpus", "1"], "seed 0: --gpus is for the Ray trainer"),
])
def test_group_mistakes_are_messages_before_anything_starts(args, message, tmp_path):
    result = user_error("train", "--task", "gym:CartPole-v1", "--run-dir", tmp_path / "group", *args)
    assert message in result.output
    assert not (tmp_path / "group").exists()


def test_the_python_api_takes_seeds_as_the_command_line_does(tmp_path):
    import ez_robot

    with pytest.raises(ConfigError, match="give --seed or --seeds, not both"):
        ez_robot.train("gym:CartPole-v1", seeds=[0, 1], seed=2, run_dir=tmp_path / "group")
    with pytest.raises(ConfigError, match="seeds must be integers >= 0"):
        ez_robot.train("gym:CartPole-v1", seeds=[0, -1], run_dir=tmp_path / "group")
    assert not (tmp_path / "group").exists()


def test_a_group_resumes_with_its_own_seeds_and_task(tmp_path):
    group = tmp_path / "group"
    group.mkdir()
    (group / "group.json").write_text(json.dumps({"format": 1, "task": "gym:CartPole-v1", "seeds": [0, 1],
                                                  "options": {}}))
    assert "a resumed group keeps them" in user_error("train", "--resume", group, "--seeds", "0-2").output
    assert "differs from the group's task" in user_error("train", "--resume", group, "--task", "gym:Acrobot-v1").output
    assert "already holds a group; continue it with --resume" in \
        user_error("train", "--task", "gym:CartPole-v1", "--seeds", "0-1", "--run-dir", group).output


# --- training ------------------------------------------------------------------------------

def test_seeds_train_at_once_each_as_it_would_alone_and_end_with_the_group_report(tmp_path):
    """Two single-process seeds as Ray tasks on the embedded Ray, under a pipe (a batch
    job's log): the plan, each seed's progress and evaluation lines, and the group's
    figures; seed 1's log is the one `--seed 1` gives alone."""
    group = tmp_path / "group"
    out = ez("train", "--task", "gym:CartPole-v1", "--budget", "120", "--seeds", "0,1", "--workers", "0",
             "--run-dir", group, "--log-every", "0.05", *TINY_ARGS, timeout=240)  # a run takes about 1 s idle
    assert out.returncode == 0, out.stderr
    at_once = min(2, os.cpu_count())
    assert f"plan: 2 seeds to train (0, 1), {at_once} at a time on the embedded local Ray" in out.stdout, out.stdout
    assert "seed 1: run directory:" in out.stdout and "seed 0: done: 120 agent steps" in out.stdout
    assert any(line.startswith("seed 0: ") and " train: " in line and "agent steps/s" in line
               for line in out.stdout.splitlines())
    assert any(line.startswith("seed 1: ") and " eval at 120 agent steps (120 env frames, 30 training steps): "
               "return" in line for line in out.stdout.splitlines())
    assert "final evaluation over 2 seeds: mean" in out.stdout and "2 evaluation episodes behind each" in out.stdout
    assert (group / "report" / "report.md").is_file()
    assert json.loads((group / "group.json").read_text())["seeds"] == [0, 1]
    for seed in (0, 1):
        assert checkpoint_info(group / f"seed-{seed}")["counters"]["final_eval"] == 120

    alone = tmp_path / "alone"
    train(load_config("gym:CartPole-v1", budget="120", seed=1, overrides=TINY), alone, device="cpu", progress=False)
    assert without_time(group / "seed-1") == without_time(alone)

    from click.testing import CliRunner

    from ez_robot.cli import main

    report = CliRunner().invoke(main, ["report", str(group), "-o", str(tmp_path / "report")])
    assert report.exit_code == 0, report.output  # a group directory stands for its seeds' runs
    table = (tmp_path / "report" / "report.md").read_text()
    assert "| 0 | 120 |" in table and "| 1 | 120 |" in table

    again = ez("train", "--resume", group, timeout=120)  # finished seeds are left as they are
    assert again.returncode == 0, again.stderr
    assert "every seed has finished its budget" in again.stdout and "final evaluation over 2 seeds" in again.stdout


def test_a_group_stopped_with_sigterm_resumes_as_a_group_with_nothing_lost(tmp_path):
    """SIGTERM to the group's command (a scheduler's time limit): every seed writes its
    checkpoint past its periodic one and the command says how to resume; ``--resume G``
    goes on with every seed from its checkpoint, with its logs cut there and going on."""
    group = tmp_path / "group"
    process = subprocess.Popen(
        [sys.executable, "-m", "ez_robot.cli", "train", "--task", "gym:CartPole-v1", "--budget", "4000",
         "--seeds", "0-1", "--workers", "0", "--run-dir", str(group), "--quiet", "--checkpoint-interval", "10",
         *TINY_ARGS], start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # as a batch job started with `&` or nohup: SIGINT ignored, and inherited so by Ray's workers
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.time() + 180
        while time.time() < deadline and process.poll() is None and not all(
                (group / f"seed-{seed}" / "checkpoints" / "latest.json").exists() for seed in (0, 1)):
            time.sleep(0.2)
        periodic = {seed: checkpoint_info(group / f"seed-{seed}")["counters"] for seed in (0, 1)}
        time.sleep(3)  # past the periodic checkpoints
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 130, stderr
    assert f"`ez-robot train --resume {group}` resumes the group" in stderr and "Traceback" not in stderr
    assert "stopping seeds 0, 1: each writes its checkpoint first" in stdout
    saved = {seed: checkpoint_info(group / f"seed-{seed}") for seed in (0, 1)}
    for seed in (0, 1):
        assert saved[seed]["counters"]["agent_steps"] > periodic[seed]["agent_steps"]
        assert f"seed {seed}: checkpoint at {saved[seed]['counters']['agent_steps']} agent steps" in stdout

    # a budget past what either seed played (a busy machine may let one run far ahead of the other)
    budget = max(200, *(saved[seed]["counters"]["agent_steps"] + 60 for seed in (0, 1)))
    budget = -(-budget // 20) * 20  # a whole number of training steps at the ratio 1/4
    out = ez("train", "--resume", group, "--budget", str(budget), "--quiet", timeout=240)
    assert out.returncode == 0, out.stderr
    for seed in (0, 1):
        assert f"seed {seed}: resuming" in out.stdout
        assert_resumed_where_the_checkpoint_stopped(group / f"seed-{seed}", saved[seed]["counters"], budget=budget)
    assert "final evaluation over 2 seeds" in out.stdout and (group / "report" / "report.md").is_file()


@pytest.mark.slow
def test_seeds_with_the_ray_trainer_run_as_many_at_once_as_the_cluster_holds(tmp_path):
    """The Ray trainer's seeds: each seed's actors hold 2 CPUs on the embedded Ray (or
    the machine's one), so that on 2 cores the seeds run one after another, each a Ray run."""
    group = tmp_path / "group"
    out = ez("train", "--task", "gym:CartPole-v1", "--budget", "120", "--seeds", "0-1", "--workers", "1",
             "--reanalyze-workers", "0", "--run-dir", group, "--quiet", *TINY_ARGS, timeout=600)
    assert out.returncode == 0, out.stderr
    cpus = os.cpu_count()
    at_once = max(1, min(2, cpus // 2))  # the learner and one self-play worker: 1 CPU each, or all there are
    assert f"{at_once} at a time on the embedded local Ray ({cpus} CPUs)" in out.stdout, out.stdout
    assert f"whose actors hold {min(cpus, 2)} CPU(s)" in out.stdout
    for seed in (0, 1):
        info = checkpoint_info(group / f"seed-{seed}")
        assert info["trainer"] == "ray" and info["counters"]["final_eval"] == 120
    assert "final evaluation over 2 seeds" in out.stdout
