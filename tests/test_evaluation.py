"""ez-robot eval and report: on a tiny trained run, through the command line as a user runs it."""
import json
import os
import re
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest
import torch
import yaml

from ez_robot.config import load_config
from ez_robot.evaluation import human_normalized, play
from ez_robot.networks import make_network
from ez_robot.report import aggregate_atari, bootstrap_ci, iqm
from ez_robot.trainer import train
from tests.cli_runner import user_error

TINY_MODEL = ["model.latent_dim=16", "model.mlp_hidden=32", "model.head_hidden=16", "model.lstm_hidden=16",
              "model.projection_hidden=32", "model.projection_out=32", "model.support_size=10"]
TINY_RUN = ["replay.min_replay_size=60", "train.batch_size=8", "search.num_simulations=4",
            "train.train_steps_per_agent_step=0.25", "train.eval_episodes=2", *TINY_MODEL]


def ez(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "ez_robot.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """cartpole_swingup from states: 200 agent steps (1,600 env frames), evaluated every 100."""
    run_dir = tmp_path_factory.mktemp("runs") / "cartpole"
    config = load_config("cartpole_swingup", budget="1600", seed=0, overrides=TINY_RUN)
    train(config, run_dir, device="cpu", eval_interval=100, progress=False)
    return run_dir


def count_frames(path):
    import imageio.v2 as imageio

    reader = imageio.get_reader(path, format="FFMPEG")
    try:
        frames = [frame.shape for frame in reader]
    finally:
        reader.close()
    return len(frames), frames[0]


def test_eval_writes_eval_json(tiny_run):
    out = ez("eval", str(tiny_run), "--episodes", "3", "--quiet")
    assert out.returncode == 0, out.stderr
    result = json.loads((tiny_run / "eval.json").read_text())
    assert result["task"] == "cartpole_swingup" and result["episodes"] == 3
    returns = np.array(result["returns"])
    assert len(returns) == 3 and result["lengths"] == [125] * 3  # 1000 control steps / action repeat 8
    assert result["mean"] == pytest.approx(returns.mean()) and result["std"] == pytest.approx(returns.std())
    assert result["min"] == returns.min() and result["max"] == returns.max()
    assert result["agent_steps"] == 200 and result["env_frames"] == 1600
    assert "human_normalized" not in result  # DMC has no human reference
    assert f"return {result['mean']:.2f}" in out.stdout


def test_eval_removes_the_reports_of_killed_evaluations_on_this_host_only(tmp_path, tiny_run):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    host = socket.gethostname()
    killed = run / f".eval.json.{host}.{_pid_of_finished()}.tmp"  # a pid no process holds any more
    running = run / f".eval.json.{host}.{os.getpid()}.tmp"  # this test's process: alive
    elsewhere = run / f".eval.json.{host}-other.{_pid_of_finished()}.tmp"  # other machines'
    longer = run / f".eval.json.{host}.lab.{_pid_of_finished()}.tmp"
    for path in (killed, running, elsewhere, longer):
        path.write_text("")
    out = ez("eval", str(run), "--episodes", "1", "--quiet")
    assert out.returncode == 0, out.stderr
    assert not killed.exists()
    assert running.exists() and elsewhere.exists() and longer.exists()
    assert sorted(p.name for p in run.glob(".eval.json.*")) == sorted([running.name, elsewhere.name, longer.name])
    assert json.loads((run / "eval.json").read_text())["episodes"] == 1


def _pid_of_finished() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_eval_is_seeded(tiny_run):
    first = ez("eval", str(tiny_run), "--episodes", "2", "--seed", "5", "--quiet")
    a = json.loads((tiny_run / "eval.json").read_text())["returns"]
    second = ez("eval", str(tiny_run), "--episodes", "2", "--seed", "5", "--quiet")
    b = json.loads((tiny_run / "eval.json").read_text())["returns"]
    assert first.returncode == second.returncode == 0
    assert a == b


def test_eval_video_is_a_readable_mp4_with_one_frame_per_decision(tiny_run):
    out = ez("eval", str(tiny_run), "--episodes", "2", "--video", "1", "--quiet")
    assert out.returncode == 0, out.stderr
    result = json.loads((tiny_run / "eval.json").read_text())
    videos = sorted((tiny_run / "videos").glob("*.mp4"))
    assert [str(v) for v in videos] == result["videos"] and len(videos) == 1
    match = re.fullmatch(r"episode-000-return-(-?[\d.]+)\.mp4", videos[0].name)
    assert match and float(match.group(1)) == pytest.approx(result["returns"][0], abs=0.051)
    frames, shape = count_frames(videos[0])
    assert frames == result["lengths"][0] + 1  # the reset frame, then one per decision
    assert shape == (240, 320, 3)


def test_atari_video_shows_the_game_screen_and_eval_mode_keeps_raw_scores(tmp_path):
    config = load_config("atari:Pong", overrides=["env.max_episode_frames=240", "search.num_simulations=2",
                                                  "model.num_channels=8", "model.reduced_channels=2",
                                                  "model.head_hidden=8", "model.lstm_hidden=8",
                                                  "model.support_size=5", "model.projection_hidden=8",
                                                  "model.projection_out=8"])
    torch.manual_seed(0)
    net = make_network((12, 96, 96), 6, config.model)
    result = play(net, config, "cpu", episodes=1, seed=0, record=1, video_dir=tmp_path)
    # 240 frames cap at frame skip 4 = 60 decisions (the no-op start counts against the cap)
    assert 1 <= result.lengths[0] <= 60
    frames, shape = count_frames(result.videos[0])
    assert frames == result.lengths[0] + 1 and shape == (210, 160, 3)
    assert float(result.returns[0]).is_integer()  # raw Pong points, not clipped rewards of a life


def test_classic_control_videos_show_the_rendered_env(tmp_path):
    """The quickstart's check (gym:CartPole-v1) makes videos too: Gymnasium renders it."""
    config = load_config("gym:CartPole-v1", overrides=TINY_MODEL)
    net = make_network((4,), 2, config.model)
    episodes = play(net, config, "cpu", episodes=1, seed=0, record=1, video_dir=tmp_path)
    frames, shape = count_frames(episodes.videos[0])
    assert frames == episodes.lengths[0] + 1 and shape == (400, 600, 3)


def test_video_of_an_env_without_a_renderer_is_a_clear_error():
    from ez_robot.envs import render_frame
    from ez_robot.errors import ConfigError

    import gymnasium as gym

    with pytest.raises(ConfigError, match="has no renderer ez-robot can record"):
        render_frame(gym.make("CartPole-v1"))  # made without render_mode


def test_human_normalized_scores_against_hand_computed_values():
    assert human_normalized("atari:Pong", 0.0) == pytest.approx(20.7 / 35.3)
    assert human_normalized("atari:Breakout", 30.5) == pytest.approx(1.0)
    assert human_normalized("atari:Breakout", 1.7) == pytest.approx(0.0)
    assert human_normalized("atari:Pong", 14.6) == pytest.approx(1.0)
    assert human_normalized("atari:Tennis", 0.0) is None  # not one of the 26 games
    assert human_normalized("cartpole_swingup", 500.0) is None


class Exploit:
    def __reduce__(self):
        return (print, ("this ran while loading a checkpoint",))


@pytest.mark.parametrize("setup,message", [
    ("missing", "is not a directory"),
    ("empty", "has not saved a checkpoint"),
    ("corrupt", "cannot be read"),
    ("not_ours", "is not an ez-robot training checkpoint"),
    ("pickled_code", "holds Python objects that could run code"),
    ("old_format", "checkpoint format"),
    ("unwritable", "cannot write"),  # said before the episodes
])
def test_bad_run_directories_are_clear_errors(tmp_path, tiny_run, setup, message):
    run = tmp_path / "run"
    if setup != "missing":
        (run / "checkpoints").mkdir(parents=True)
    if setup == "corrupt":
        (run / "checkpoints" / "latest.pt").write_bytes(b"\x80\x04 not a checkpoint")
    if setup == "not_ours":
        torch.save({"weights": 1}, run / "checkpoints" / "latest.pt")
    if setup == "pickled_code":  # a shared checkpoint that would run code when unpickled
        torch.save({"format": 2, "payload": Exploit()}, run / "checkpoints" / "latest.pt")
    if setup == "unwritable":  # as root no permission stops a write: a directory in the way does
        shutil.copytree(tiny_run, run, dirs_exist_ok=True)
        (run / f".eval.json.{socket.gethostname()}.{os.getpid()}.tmp").mkdir()  # the evaluation runs in this process
    if setup == "old_format":
        state = torch.load(tiny_run / "checkpoints" / "latest.pt", weights_only=False)
        state["format"] = 0
        torch.save(state, run / "checkpoints" / "latest.pt")
    result = user_error("eval", run, "--quiet")  # in this process: ~3 s less a case
    assert message in result.stderr
    assert "this ran while loading" not in result.output  # nothing in a checkpoint runs


def test_report_writes_curves_and_a_table_across_seeds(tmp_path, tiny_run):
    other = tmp_path / "cartpole-seed1"
    shutil.copytree(tiny_run, other)
    config = yaml.safe_load((other / "config.yaml").read_text())
    config["seed"] = 1
    (other / "config.yaml").write_text(yaml.safe_dump(config))
    (other / "eval.json").unlink(missing_ok=True)
    out = ez("report", str(tiny_run), str(other), "-o", str(tmp_path / "report"))
    assert out.returncode == 0, out.stderr
    table = (tmp_path / "report" / "report.md").read_text()
    assert "## cartpole_swingup" in table and "| 0 |" in table and "| 1 |" in table
    assert "Mean final score over 2 seed(s)" in table
    for name in ("cartpole_swingup-return.png", "cartpole_swingup-losses.png"):
        data = (tmp_path / "report" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def _copy_run(source, dest, edit):
    shutil.copytree(source, dest)
    config = yaml.safe_load((dest / "config.yaml").read_text())
    edit(config)
    (dest / "config.yaml").write_text(yaml.safe_dump(config))
    for report in [dest / "eval.json", *dest.glob("eval-*.json")]:  # whatever evaluations ran before
        report.unlink(missing_ok=True)
    return dest


def test_report_combines_tasks_and_keeps_ablations_apart(tmp_path, tiny_run):
    """Seeds of one setting pool; an ablation and another task get rows of their own, with the
    paper's published columns where the task has them."""
    runs = tmp_path / "runs"
    seed0 = _copy_run(tiny_run, runs / "cartpole-s0", lambda c: None)  # no eval.json, whatever ran before
    seed1 = _copy_run(tiny_run, runs / "cartpole-s1", lambda c: c.update(seed=1))
    ablation = _copy_run(tiny_run, runs / "cartpole-noconsistency", lambda c: c["train"].update(consistency=False))
    reacher = _copy_run(tiny_run, runs / "reacher", lambda c: c["env"].update(task="reacher_easy"))
    out = ez("report", str(seed0), str(seed1), str(ablation), str(reacher), "-o", str(tmp_path / "report"))
    assert out.returncode == 0, out.stderr
    table = (tmp_path / "report" / "report.md").read_text()
    summary = table.split("## Summary")[1].split("\n## ")[0]
    rows = [line for line in summary.splitlines() if line.startswith("| ") and not line.startswith("| task")]
    assert len(rows) == 3, summary
    finals = {}
    for row in rows:
        task, setting, obs, seeds, frames, score, paper_ez, paper_sac = [c.strip() for c in row.strip("|").split("|")]
        finals[(task, setting)] = (seeds, score, paper_ez, paper_sac)
        assert obs == "state" and frames == "1600"
    assert finals[("cartpole_swingup", "train.consistency=true")][0] == "2 (0, 1)"
    assert finals[("cartpole_swingup", "train.consistency=false")][0] == "1 (0)"
    assert finals[("cartpole_swingup", "train.consistency=true")][2:] == ("813 +- 19", "835 +- 22")
    assert finals[("reacher_easy", "-")][2:] == ("952 +- 34", "746 +- 25")
    # the pooled row's score is the mean of its seeds' finals (the copies share the curve)
    pooled = float(finals[("cartpole_swingup", "train.consistency=true")][1].split()[0])
    single = float(finals[("cartpole_swingup", "train.consistency=false")][1])
    assert pooled == pytest.approx(single, rel=1e-2)
    assert "## cartpole_swingup (train.consistency=false)" in table and "## reacher_easy" in table
    for name in ("cartpole_swingup-1-return.png", "cartpole_swingup-2-return.png", "reacher_easy-return.png",
                 "cartpole_swingup-settings.png"):
        assert (tmp_path / "report" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the settings of a task side by side in one figure; a task with one setting has none
    assert "![cartpole_swingup: settings side by side](cartpole_swingup-settings.png)" in table
    assert not (tmp_path / "report" / "reacher_easy-settings.png").exists()


def test_settings_legend_names_only_what_differs_from_the_common_values():
    from ez_robot.report import _setting_labels

    labels, common = _setting_labels([dict(a="1", b="2", c="3"), dict(a="1", b="5", c="3"),
                                      dict(a="1", b="2", c="4"), dict(a="1", b="2", c="3")])
    assert labels == ["the common values", "b=5", "c=4", "the common values"]
    assert common == "a=1, b=2, c=3"


def test_report_gives_success_rates_of_envs_that_report_them(tmp_path, tiny_run):
    runs = []
    for seed, rate in ((0, 0.5), (1, 1.0)):
        run = _copy_run(tiny_run, tmp_path / f"s{seed}", lambda c, seed=seed: c.update(seed=seed))
        (run / "eval.json").write_text(json.dumps({"mean": 10.0 * seed, "success_rate": rate}))
        runs.append(str(run))
    out = ez("report", *runs, "-o", str(tmp_path / "report"))
    assert out.returncode == 0, out.stderr
    table = (tmp_path / "report" / "report.md").read_text()
    header, _, row = table.split("## Summary")[1].strip().splitlines()[2:5]
    assert "| final score | success rate |" in header
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[5].startswith("5 [") and cells[6].startswith("75 [") and cells[6].endswith("%")
    assert "| 0.0 (50% success) | - | eval.json |" in table and "| 10.0 (100% success) | - | eval.json |" in table


def test_report_reads_a_missing_config_key_as_its_default(tmp_path, tiny_run):
    """A run saved before a key existed groups with runs that hold the key at its default."""
    from ez_robot.config import config_from_dict
    from ez_robot.report import group_runs, read_run

    old = _copy_run(tiny_run, tmp_path / "old", lambda c: c["reanalyze"].pop("sweeps_per_target"))
    other = _copy_run(tiny_run, tmp_path / "other", lambda c: c["reanalyze"].update(sweeps_per_target=4))
    default = config_from_dict(yaml.safe_load((tiny_run / "config.yaml").read_text())).reanalyze.sweeps_per_target
    assert default != 4
    groups = group_runs([read_run(tiny_run), read_run(old), read_run(other)])
    assert [(setting, len(runs)) for _, setting, runs in groups] == [
        (f"reanalyze.sweeps_per_target={default}", 2), ("reanalyze.sweeps_per_target=4", 1)]


def test_report_names_a_factory_argument_by_its_key(tmp_path, tiny_run):
    """Runs with and without ``env.kwargs`` differ in that one argument, not in the whole dict."""
    from ez_robot.report import group_runs, read_run

    plain = _copy_run(tiny_run, tmp_path / "plain", lambda c: c["env"].update(kwargs={}))
    costly = _copy_run(tiny_run, tmp_path / "costly", lambda c: c["env"].update(kwargs={"action_cost": 0.1}))
    groups = group_runs([read_run(plain), read_run(costly)])
    assert sorted(setting for _, setting, _ in groups) == ["env.kwargs.action_cost=(unset)",
                                                           "env.kwargs.action_cost=0.1"]


def test_report_counts_an_unset_factory_argument_as_the_factorys_default(tmp_path, tiny_run):
    """A run that left a factory argument out and one that set it to the factory's default
    used the same env: one setting, not "(unset)" beside "true"."""
    from ez_robot.report import group_runs, read_run

    factory = tmp_path / "my_robot.py"
    factory.write_text("def make(flag=True, scale: float = 1.0):\n    raise AssertionError('not called')\n")
    task = f"{factory}:make"
    runs = [_copy_run(tiny_run, tmp_path / name, lambda c, kwargs=kwargs, seed=seed: (
                c["env"].update(task=task, kwargs=kwargs), c.update(seed=seed)))
            for name, kwargs, seed in [("unset", {}, 0), ("explicit", {"flag": True}, 1), ("off", {"flag": False}, 2)]]
    groups = group_runs([read_run(run) for run in runs])
    assert [(setting, [r.seed for r in members]) for _, setting, members in groups] == [
        ("env.kwargs.flag=false", [2]), ("env.kwargs.flag=true", [0, 1])]


def test_report_pools_a_factory_file_trained_from_two_places(tmp_path, tiny_run):
    """A run stores its factory file's absolute path; the same file from another checkout or
    machine is the same task, and the path is not a setting."""
    from ez_robot.report import group_runs, read_run

    here = _copy_run(tiny_run, tmp_path / "here", lambda c: c["env"].update(task="/work/a/reach_arm.py:make_arm"))
    there = _copy_run(tiny_run, tmp_path / "there", lambda c: (
        c["env"].update(task="/home/b/examples/reach_arm.py:make_arm"), c.update(seed=1)))
    other = _copy_run(tiny_run, tmp_path / "other", lambda c: c["env"].update(task="/work/a/reach_arm.py:make_other"))
    groups = group_runs([read_run(here), read_run(there), read_run(other)])
    assert [(task, setting, [r.seed for r in runs]) for task, setting, runs in groups] == [
        ("reach_arm.py:make_arm", "", [0, 1]), ("reach_arm.py:make_other", "", [0])]


def test_report_on_a_directory_that_is_not_a_run(tmp_path):
    out = ez("report", str(tmp_path))
    assert out.returncode != 0
    assert "not an ez-robot run directory" in out.stderr and "Traceback" not in out.stderr


def test_a_report_directory_that_cannot_be_made_is_a_message(tmp_path, tiny_run):
    (tmp_path / "a-file").write_text("")
    out = tmp_path / "a-file" / "report"
    assert f"cannot write the report to {out}: Not a directory" in user_error("report", tiny_run, "-o", out).stderr


def test_statistics_against_hand_computed_values():
    assert iqm([1, 2, 3, 4, 5, 6, 7, 8]) == pytest.approx(4.5)  # mean of 3, 4, 5, 6
    assert bootstrap_ci([[3.0]], lambda s: s[0].mean()) == (3.0, 3.0, 3.0)
    point, low, high = bootstrap_ci([[0.0, 10.0, 20.0, 30.0]], lambda s: s[0].mean())
    assert point == 15.0 and 0.0 <= low < 15.0 < high <= 30.0
    agg = aggregate_atari({"atari:Pong": [1.0, 3.0], "atari:Boxing": [0.0, 0.0], "atari:Alien": [10.0, 10.0]})
    assert agg["mean"][0] == pytest.approx((2.0 + 0.0 + 10.0) / 3)
    assert agg["median"][0] == pytest.approx(2.0)
    assert agg["iqm"][0] == pytest.approx(np.mean([0.0, 1.0, 3.0, 10.0]))  # pooled [0,0,1,3,10,10]


def test_seeds_whose_evaluations_land_a_few_frames_apart_average_point_by_point():
    """Seed 0 evaluates at 50,004 frames, seed 1 at 50,002: one point of the mean curve."""
    from types import SimpleNamespace

    from ez_robot.report import _aligned_evals

    runs = [SimpleNamespace(evals=[dict(env_frames=f, mean=m) for f, m in points]) for points in
            ([(10_002, 10.0), (50_004, 30.0), (100_000, 50.0)],
             [(10_000, 20.0), (50_002, 40.0), (100_000, 70.0)],
             [(9_998, 30.0), (50_000, 50.0), (100_002, 90.0)])]
    points = _aligned_evals(runs)
    assert [f for f, _ in points] == [10_000.0, 50_002.0, 100_000 + 2 / 3]
    assert [float(np.mean(means)) for _, means in points] == [20.0, 40.0, 70.0]
    assert [sorted(means) for _, means in points] == [[10.0, 20.0, 30.0], [30.0, 40.0, 50.0], [50.0, 70.0, 90.0]]
    points = _aligned_evals(runs + [SimpleNamespace(evals=[dict(env_frames=10_001, mean=0.0)])])
    assert [f for f, _ in points] == [10_000.25]  # only where every seed has a point
    assert float(np.mean(points[0][1])) == 15.0


def test_eval_set_changes_the_search_only_and_keeps_the_runs_own_score(tiny_run):
    plain = ez("eval", str(tiny_run), "--episodes", "2", "--seed", "3", "--quiet")
    a = json.loads((tiny_run / "eval.json").read_text())
    same = ez("eval", str(tiny_run), "--episodes", "2", "--seed", "3", "--quiet",
              "--set", "search.num_simulations=4")  # the run's own setting: nothing changes
    custom = tiny_run / "eval-num_simulations=4.json"  # an evaluation with --set is not the run's score
    b = json.loads(custom.read_text())
    assert plain.returncode == same.returncode == 0, same.stderr
    assert f"wrote {tiny_run / 'eval.json'}" in plain.stdout and f"wrote {custom}" in same.stdout
    assert a["returns"] == b["returns"]
    assert a["search_overrides"] == [] and b["search_overrides"] == ["search.num_simulations=4"]
    assert json.loads((tiny_run / "eval.json").read_text()) == a
    bad = ez("eval", str(tiny_run), "--episodes", "1", "--quiet", "--set", "train.lr=0.1")
    assert bad.returncode != 0 and "search settings only" in bad.stderr and "Traceback" not in bad.stderr


def test_eval_of_an_earlier_checkpoint_or_to_a_chosen_file_leaves_eval_json_alone(tmp_path, tiny_run):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    (run / "eval.json").write_text('{"mean": 1.0}')  # the run's own score, from an earlier evaluation
    earlier = tmp_path / "earlier.pt"  # as a user keeps a mid-run checkpoint
    shutil.copy(run / "checkpoints" / "latest.pt", earlier)
    out = ez("eval", str(run), "--episodes", "1", "--quiet", "--checkpoint", str(earlier))
    assert out.returncode == 0, out.stderr
    [report] = run.glob("eval-step*.json")
    assert report.name == f"eval-step{json.loads(report.read_text())['train_steps']}.json"
    chosen = tmp_path / "mine.json"
    out = ez("eval", str(run), "--episodes", "1", "--quiet", "--set", "search.num_simulations=2", "-o", str(chosen))
    assert out.returncode == 0, out.stderr
    assert f"wrote {chosen}" in out.stdout and json.loads(chosen.read_text())["search_overrides"] == [
        "search.num_simulations=2"]
    assert (run / "eval.json").read_text() == '{"mean": 1.0}' and not list(run.glob("eval-num_simulations=2*"))
    assert not list(run.glob(".*.tmp")) and not list(tmp_path.glob(".*.tmp"))
    out = ez("eval", str(run), "--episodes", "1", "--quiet", "--checkpoint", str(run / "checkpoints" / "latest.pt"))
    assert out.returncode == 0, out.stderr  # the latest checkpoint named: the run's own score again
    assert json.loads((run / "eval.json").read_text())["episodes"] == 1
    assert "no directory" in user_error("eval", run, "--quiet", "-o", tmp_path / "missing" / "x.json").stderr
    assert "is a directory" in user_error("eval", run, "--quiet", "-o", tmp_path).stderr


def test_report_reads_eval_json_only_as_the_run_trained_and_no_older_than_its_last_evaluation(tmp_path, tiny_run):
    from ez_robot.report import read_run

    run = _copy_run(tiny_run, tmp_path / "run", lambda c: None)  # without eval.json
    plain = read_run(run)
    steps = plain.evals[-1]["train_steps"]
    assert plain.final_source == "last training eval" and plain.final != 123.0

    def final_with(**report):
        (run / "eval.json").write_text(json.dumps({"mean": 123.0, "train_steps": steps, "search_overrides": [],
                                                   **report}))
        record = read_run(run)
        return record.final, record.final_source

    assert final_with() == (123.0, "eval.json")
    assert final_with(train_steps=steps + 5) == (123.0, "eval.json")  # a checkpoint after the last evaluation
    assert final_with(search_overrides=["search.num_simulations=1"]) == (
        plain.final, "last training eval (eval.json skipped: searched with search.num_simulations=1)")
    assert final_with(train_steps=steps - 1) == (
        plain.final, f"last training eval (eval.json skipped: of {steps - 1} training steps, the run trained on)")
