"""`ez-robot report --results`: the results page and its curves from a results file.

The page must take each run's last training evaluation as its figure, summarize seeds by
mean and range, and never pool evaluations of different lengths or settings."""
import csv

import pytest
from click.testing import CliRunner

from ez_robot.cli import main
from ez_robot.errors import RunError
from ez_robot.results import final_figures, read_results, write_results_page

COLUMNS = ["task", "setting", "seed", "env_steps", "eval_mean", "eval_episodes", "success_rate", "evaluation",
           "date", "machine", "source"]
PNG = b"\x89PNG\r\n\x1a\n"


def write_csv(path, rows, columns=COLUMNS):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        for row in rows:
            writer.writerow(dict(zip(columns, row)))
    return path


def run_rows(task, setting, seed, curve, source, episodes=10):
    """A run's periodic evaluations, 10k env steps apart (a few steps past each, as in a run)."""
    return [(task, setting, seed, 10_000 * (i + 1) + 8 * i, mean, episodes, "", "training", "2026-12-01", "m", source)
            for i, mean in enumerate(curve)]


@pytest.fixture
def results(tmp_path):
    rows = (run_rows("cartpole_swingup", "default", 0, [100, 500, 800], "c0")
            + run_rows("cartpole_swingup", "default", 1, [90, 600, 700], "c1")
            + run_rows("cartpole_swingup", "default", 2, [80, 400, 900], "c2")
            + run_rows("cartpole_swingup", "--set train.value_prefix=false", 0, [50, 300, 600], "v0")
            + [("cartpole_swingup", "default", 0, 30_016, 810.0, 50, "", "eval", "2026-12-02", "m", "c0")]
            + run_rows("walker_walk", "--config ezv2_states", 0, [200, 400], "w0-partial"))
    return write_csv(tmp_path / "results.csv", rows)


@pytest.fixture
def peers(tmp_path):
    columns = ["system", "task", "setting", "seed", "env_steps", "score", "score_std", "seeds", "source"]
    rows = [("TD-MPC2", "cartpole_swingup", "official", "", 30_000, 700, "", 3, "files"),
            ("SB3 SAC", "cartpole_swingup", "SAC", 0, 30_000, 640, "", "", "here"),
            ("SB3 SAC", "cartpole_swingup", "SAC", 1, 30_000, 660, "", "", "here")]
    return write_csv(tmp_path / "peers.csv", rows, columns)


def test_a_runs_figure_is_its_last_training_evaluation_and_seeds_give_mean_and_range(results):
    figures = final_figures(read_results(results))
    default = [f for f in figures if f.setting == "default" and f.evaluation == "training"]
    assert len(default) == 1
    assert default[0].values.tolist() == [800, 700, 900]  # the last evaluation, not the best
    assert default[0].env_steps == 30_000 and default[0].episodes == 10
    fifty = [f for f in figures if f.evaluation == "eval"]
    assert len(fifty) == 1 and fifty[0].episodes == 50 and fifty[0].values.tolist() == [810]
    partial = [f for f in figures if f.task == "walker_walk"]
    assert partial[0].env_steps == 20_000


def test_the_page_keeps_settings_and_episode_counts_apart(tmp_path, results, peers):
    page = write_results_page(results, tmp_path / "docs", peers=peers).read_text()
    assert "| default | training | 30k | 3 (0-2) | 10 | 800.0 [700.0, 900.0] |" in page
    assert "| default | `eval` | 30k | 1 (0) | 50 | 810.0 |" in page
    assert "| `--set train.value_prefix=false` | training | 30k | 1 (0) | 10 | 600.0 |" in page
    assert "| walker_walk | - | - | no run of the default command to 100k |" in page
    assert "| TD-MPC2 | cartpole_swingup | official | 30k | 700.0 | 3 | files |" in page
    assert "| SB3 SAC | cartpole_swingup | SAC | 30k | 650.0 [640.0, 660.0] | 0, 1 | here |" in page
    for task in ("cartpole_swingup", "walker_walk"):
        assert f"![{task}: learning curves](img/results-{task}.png)" in page
        assert (tmp_path / "docs" / "img" / f"results-{task}.png").read_bytes()[:8] == PNG


def test_a_row_that_does_not_parse_names_its_line(tmp_path):
    rows = run_rows("cartpole_swingup", "default", 0, [100, 200], "c0")
    rows[1] = rows[1][:4] + ("not a number",) + rows[1][5:]
    with pytest.raises(RunError, match=r"results.csv:3 is not a results row"):
        read_results(write_csv(tmp_path / "results.csv", rows))
    with pytest.raises(RunError, match="lacks the column"):
        read_results(write_csv(tmp_path / "short.csv", [("a",)], ["task"]))


def test_the_command_line_writes_the_page_and_refuses_both_sources(tmp_path, results, peers):
    out = tmp_path / "docs"
    result = CliRunner().invoke(main, ["report", "--results", str(results), "--peers", str(peers), "--out", str(out)])
    assert result.exit_code == 0, result.output
    page = (out / "results.md").read_text()
    assert f"by `ez-robot report --results {results} --peers {peers} --out {out}`" in page
    both = CliRunner().invoke(main, ["report", str(tmp_path), "--results", str(results)])
    assert both.exit_code != 0 and "not both" in both.output
    neither = CliRunner().invoke(main, ["report"])
    assert neither.exit_code != 0 and "--results" in neither.output
