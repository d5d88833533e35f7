"""Reports over run directories: learning curves (PNG) and Markdown tables.

A run's final score is its ``eval.json`` (``ez-robot eval``) when there is one, else its
last periodic evaluation from ``metrics.jsonl``.  Across seeds of one task a table gives
the mean with a 95% bootstrap confidence interval; across Atari games, the mean, median
and interquartile mean (IQM) of human-normalized scores with stratified bootstrap
intervals (runs resampled within each game), the conventions of Agarwal et al. 2021
("Deep RL at the edge of the statistical precipice", the rliable library).
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from ez_robot.errors import RunError
from ez_robot.evaluation import human_normalized

__all__ = ["RunRecord", "read_run", "bootstrap_ci", "iqm", "aggregate_atari", "write_report"]

LOSSES = ("loss", "value_loss", "policy_loss", "value_prefix_loss", "consistency_loss")
CONFIDENCE = 0.95


@dataclass
class RunRecord:
    run_dir: Path
    task: str
    seed: int
    evals: list[dict] = field(default_factory=list)    # periodic evaluations, in order
    train: list[dict] = field(default_factory=list)    # training metrics, in order
    final: float | None = None
    final_source: str = ""

    @property
    def label(self) -> str:
        return f"{self.task} seed {self.seed}"


def read_run(run_dir: str | Path) -> RunRecord:
    """The task, seed, evaluations and training metrics of one run directory."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunError(f"{run_dir} is not a directory")
    config_path, metrics_path = run_dir / "config.yaml", run_dir / "metrics.jsonl"
    if not config_path.is_file() or not metrics_path.is_file():
        raise RunError(f"{run_dir} is not an ez-robot run directory (it needs config.yaml and metrics.jsonl)")
    try:
        config = yaml.safe_load(config_path.read_text())
        task, seed = config["env"]["task"], int(config["seed"])
    except (yaml.YAMLError, KeyError, TypeError, ValueError) as error:
        raise RunError(f"{config_path} is not a readable run config ({error})") from None
    record = RunRecord(run_dir, task, seed)
    lines = metrics_path.read_text().splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):
                continue  # a run killed mid-write leaves at most its last line cut short
            raise RunError(f"{metrics_path}:{number} is not JSON") from None
        if entry.get("kind") == "eval":
            record.evals.append(entry)
        elif entry.get("kind") == "train":
            record.train.append(entry)
    eval_json = run_dir / "eval.json"
    if eval_json.is_file():
        try:
            record.final, record.final_source = float(json.loads(eval_json.read_text())["mean"]), "eval.json"
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            raise RunError(f"{eval_json} is not a readable evaluation result") from None
    elif record.evals:
        record.final, record.final_source = float(record.evals[-1]["mean"]), "last training eval"
    return record


# --- statistics -------------------------------------------------------------------------

def iqm(values) -> float:
    """Interquartile mean: the mean of the middle 50% (25% trimmed from each end)."""
    from scipy.stats import trim_mean

    return float(trim_mean(np.asarray(values, np.float64).ravel(), 0.25))


def bootstrap_ci(strata: list, statistic, *, reps: int = 2000, seed: int = 0,
                 confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(point, low, high): ``statistic`` of the runs and its percentile bootstrap interval.

    ``strata`` is a list of 1-d arrays (one per task, its runs); each replicate resamples
    the runs of every stratum with replacement and applies ``statistic`` to the list of
    resampled arrays.  With one run per stratum there is nothing to resample: the
    interval collapses to the point.
    """
    strata = [np.asarray(s, np.float64) for s in strata]
    point = float(statistic(strata))
    if all(len(s) < 2 for s in strata):
        return point, point, point
    rng = np.random.default_rng(seed)
    draws = np.array([statistic([s[rng.integers(0, len(s), len(s))] for s in strata]) for _ in range(reps)])
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return point, float(low), float(high)


def aggregate_atari(scores: dict[str, list[float]], **kwargs) -> dict[str, tuple[float, float, float]]:
    """Mean, median and IQM of human-normalized scores across games ({game: [score per run]}).

    Mean and median are over the per-game means; the IQM pools every run of every game.
    """
    games = list(scores)
    strata = [scores[g] for g in games]
    return {
        "mean": bootstrap_ci(strata, lambda s: np.mean([x.mean() for x in s]), **kwargs),
        "median": bootstrap_ci(strata, lambda s: np.median([x.mean() for x in s]), **kwargs),
        "iqm": bootstrap_ci(strata, lambda s: iqm(np.concatenate(s)), **kwargs),
    }


# --- the report ---------------------------------------------------------------------------

def _slug(task: str) -> str:
    from ez_robot.envs import task_slug

    return task_slug(task)


def _plot_returns(task: str, runs: list[RunRecord], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    by_frames = defaultdict(list)
    for run in runs:
        frames = [e["env_frames"] for e in run.evals]
        means = [e["mean"] for e in run.evals]
        ax.plot(frames, means, alpha=0.35 if len(runs) > 1 else 1.0, marker=".", label=f"seed {run.seed}")
        for f, m in zip(frames, means):
            by_frames[f].append(m)
    if len(runs) > 1:
        xs = sorted(f for f, v in by_frames.items() if len(v) == len(runs))  # points every seed evaluated
        if xs:
            stats = [bootstrap_ci([by_frames[x]], lambda s: s[0].mean()) for x in xs]
            ax.plot(xs, [s[0] for s in stats], color="black", label="mean")
            ax.fill_between(xs, [s[1] for s in stats], [s[2] for s in stats], color="black", alpha=0.15,
                            label=f"{CONFIDENCE:.0%} CI")
    ax.set_xlabel("env frames")
    ax.set_ylabel("evaluation return")
    ax.set_title(task)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_losses(task: str, runs: list[RunRecord], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(LOSSES), figsize=(3.2 * len(LOSSES), 3))
    for ax, name in zip(axes, LOSSES):
        for run in runs:
            points = [(e["env_frames"], e[name]) for e in run.train if name in e]
            if points:
                ax.plot(*zip(*points), linewidth=1, label=f"seed {run.seed}")
        ax.set_title(name, fontsize="small")
        ax.set_xlabel("env frames", fontsize="small")
        ax.tick_params(labelsize="x-small")
    axes[0].legend(fontsize="x-small")
    fig.suptitle(task)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _fmt(point: float, low: float, high: float) -> str:
    return f"{point:.3g}" if low == high else f"{point:.3g} [{low:.3g}, {high:.3g}]"


def write_report(run_dirs, out_dir: str | Path) -> Path:
    """Curves and tables for ``run_dirs`` into ``out_dir``; returns the Markdown file."""
    runs = [read_run(d) for d in run_dirs]
    if not runs:
        raise RunError("no run directories given")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    by_task: dict[str, list[RunRecord]] = defaultdict(list)
    for run in runs:
        by_task[run.task].append(run)

    lines = ["# ez-robot report", "",
             f"Final score: `eval.json` when the run has one, else its last training evaluation. "
             f"Intervals: {CONFIDENCE:.0%} percentile bootstrap over seeds.", ""]
    atari_scores: dict[str, list[float]] = {}
    for task, task_runs in sorted(by_task.items()):
        task_runs.sort(key=lambda r: r.seed)
        _plot_returns(task, task_runs, out / f"{_slug(task)}-return.png")
        _plot_losses(task, task_runs, out / f"{_slug(task)}-losses.png")
        lines += [f"## {task}", "", f"![return]({_slug(task)}-return.png)", "",
                  "| seed | env frames | final score | source | best training eval |", "|---|---|---|---|---|"]
        finals = []
        for run in task_runs:
            frames = run.evals[-1]["env_frames"] if run.evals else "-"
            best = f"{max(e['mean'] for e in run.evals):.1f}" if run.evals else "-"
            final = "-" if run.final is None else f"{run.final:.1f}"
            lines.append(f"| {run.seed} | {frames} | {final} | {run.final_source or 'no evaluation'} | {best} |")
            if run.final is not None:
                finals.append(run.final)
        if finals:
            lines += ["", f"Mean final score over {len(finals)} seed(s): "
                          f"{_fmt(*bootstrap_ci([finals], lambda s: s[0].mean()))}"]
            normalized = [human_normalized(task, f) for f in finals]
            if normalized[0] is not None:
                atari_scores[task] = normalized
                lines.append(f"Human-normalized: {_fmt(*bootstrap_ci([normalized], lambda s: s[0].mean()))}")
        lines += ["", f"![losses]({_slug(task)}-losses.png)", ""]
    if atari_scores:
        agg = aggregate_atari(atari_scores)
        lines += ["## Atari: human-normalized scores across games", "",
                  f"{len(atari_scores)} game(s); mean and median of per-game means, IQM over all runs; "
                  "intervals from a stratified bootstrap (runs resampled within each game).", "",
                  "| statistic | value |", "|---|---|"]
        lines += [f"| {name} | {_fmt(*agg[name])} |" for name in ("mean", "median", "iqm")]
        lines.append("")
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
