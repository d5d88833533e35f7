"""Reports over run directories: learning curves (PNG) and Markdown tables.

A run's final score is its ``eval.json`` (``ez-robot eval``) when there is one, else its
last periodic evaluation from ``metrics.jsonl`` (also when ``eval.json`` searched with
other settings, or is older than that evaluation).  Runs are grouped by task and, within a
task, by their settings: runs whose configs differ in anything but the seed (an ablation
switch, an action mode, a budget, a ``--set``) form separate groups, named by the keys
that differ.  A summary table gives each group's mean over seeds with a 95% bootstrap
confidence interval, beside the published DMControl 100k scores where the task has them
(``configs/scores/dmc.yaml``); across Atari games, the mean, median and interquartile mean
(IQM) of human-normalized scores with stratified bootstrap intervals (runs resampled within
each game), the conventions of Agarwal et al. 2021 ("Deep RL at the edge of the
statistical precipice", the rliable library).
"""
from __future__ import annotations

import functools
import json
import textwrap
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np
import yaml

from ez_robot.errors import ConfigError, RunError
from ez_robot.evaluation import human_normalized
from ez_robot.loss_terms import LOSSES

__all__ = ["RunRecord", "read_run", "group_runs", "bootstrap_ci", "iqm", "aggregate_atari",
           "dmc_reference_scores", "write_report"]

CONFIDENCE = 0.95
NOT_SETTINGS = ("seed", "env.task")  # runs that differ only in these are seeds of one setting (the task: grouped by it)


@dataclass
class RunRecord:
    run_dir: Path
    task: str
    seed: int
    evals: list[dict] = field(default_factory=list)    # periodic evaluations, in order
    train: list[dict] = field(default_factory=list)    # training metrics, in order
    final: float | None = None
    final_source: str = ""
    final_success: float | None = None                # success rate, for envs reporting is_success
    final_episodes: int | None = None                 # evaluation episodes behind the final score
    config: dict = field(default_factory=dict)         # config.yaml with dotted keys

    @property
    def label(self) -> str:
        return f"{self.task} seed {self.seed}"


def _flatten(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):  # an empty one (no env.kwargs) adds no key: its absence says it
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _complete(config: dict) -> dict:
    """The saved config with the keys it lacks at their defaults, as ``--resume`` reads it;
    unchanged where it does not load (a key from a newer ez-robot)."""
    from ez_robot.config import config_from_dict, config_to_dict

    try:
        return config_to_dict(config_from_dict(config))
    except (ConfigError, TypeError, ValueError):
        return config


def _report_task(task: str) -> str:
    """The task a report groups by: a factory file by its name, not the absolute path the
    run stored (the same file trained in two checkouts, or archived from another machine, is
    one task)."""
    from ez_robot.envs import is_custom_task

    if not is_custom_task(task):
        return task
    source, _, name = task.rpartition(":")
    if not source.endswith(".py"):
        return task
    return f"{source.replace(chr(92), '/').rsplit('/', 1)[-1]}:{name}"


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
    record = RunRecord(run_dir, _report_task(task), seed, config=_flatten(_complete(config)))
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
    eval_json, skipped = run_dir / "eval.json", ""
    if eval_json.is_file():
        try:
            result = json.loads(eval_json.read_text())
            mean = float(result["mean"])
            success = None if result.get("success_rate") is None else float(result["success_rate"])
            overrides, steps = result.get("search_overrides") or [], result.get("train_steps")
            episodes = result.get("episodes")
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            raise RunError(f"{eval_json} is not a readable evaluation result") from None
        last_eval_steps = record.evals[-1].get("train_steps") if record.evals else None
        if overrides:  # written before `ez-robot eval --set` wrote eval-<label>.json
            skipped = f"eval.json skipped: searched with {' '.join(overrides)}"
        elif steps is not None and last_eval_steps is not None and steps < last_eval_steps:
            skipped = f"eval.json skipped: of {steps} training steps, the run trained on"
        else:
            record.final, record.final_source, record.final_success = mean, "eval.json", success
            record.final_episodes = int(episodes) if isinstance(episodes, int) else None
            return record
    if record.evals:
        record.final = float(record.evals[-1]["mean"])
        record.final_source = "last training eval" + (f" ({skipped})" if skipped else "")
        success = record.evals[-1].get("success_rate")
        record.final_success = None if success is None else float(success)
        record.final_episodes = len(record.evals[-1].get("returns") or []) or None
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

@functools.cache
def dmc_reference_scores() -> dict:
    """``{"columns": {key: heading}, "scores": {task: {key: [mean, std]}}}``: the paper's table."""
    text = resources.files("ez_robot.configs").joinpath("scores", "dmc.yaml").read_text()
    return yaml.safe_load(text)


def _slug(task: str) -> str:
    from ez_robot.envs import task_slug

    return task_slug(task)


def _setting(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return "(unset)" if value is None else str(value)


@functools.cache
def _factory_default(task: str, argument: str):
    """The default of a custom task's factory ``argument``, read from its source without
    importing it (a report reads runs from anywhere); None where the task is not a custom
    one, its source is not here, or the argument has no literal default."""
    from ez_robot.envs import is_custom_task
    from ez_robot.envs.custom import factory_defaults

    return factory_defaults(task).get(argument) if is_custom_task(task) else None


def _value(run: RunRecord, key: str):
    """A run's setting ``key``; a factory argument the run did not set counts as the
    factory's default (``to_target`` unset and ``to_target=true`` are one setting when
    true is the default)."""
    if key in run.config or not key.startswith("env.kwargs."):
        return run.config.get(key)
    return _factory_default(run.config.get("env.task", ""), key.removeprefix("env.kwargs."))


def _differing_keys(runs: list[RunRecord]) -> list[str]:
    """The config keys, sorted, in which ``runs`` differ (the seed and task aside)."""
    keys = sorted({key for run in runs for key in run.config} - set(NOT_SETTINGS))
    return [k for k in keys if len({repr(_value(run, k)) for run in runs}) > 1]


def group_runs(runs: list[RunRecord]) -> list[tuple[str, str, list[RunRecord]]]:
    """``(task, settings, runs)`` groups, sorted; each group's runs sorted by seed.

    ``settings`` names, as ``key=value``, the config keys in which the task's runs differ
    (the seed aside), with this group's values; it is "" when every run of the task has the
    same settings.  A key that a run's config lacks (written by an older ez-robot) counts
    as its default value (see :func:`read_run`).
    """
    by_task: dict[str, list[RunRecord]] = defaultdict(list)
    for run in runs:
        by_task[run.task].append(run)
    groups = []
    for task, task_runs in sorted(by_task.items()):
        differing = _differing_keys(task_runs)
        by_setting: dict[str, list[RunRecord]] = defaultdict(list)
        for run in task_runs:
            by_setting[", ".join(f"{k}={_setting(_value(run, k))}" for k in differing)].append(run)
        for setting, members in sorted(by_setting.items()):
            groups.append((task, setting, sorted(members, key=lambda r: r.seed)))
    return groups


def _plot_returns(task: str, runs: list[RunRecord], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for run in runs:
        ax.plot([e["env_frames"] for e in run.evals], [e["mean"] for e in run.evals],
                alpha=0.35 if len(runs) > 1 else 1.0, marker=".", label=f"seed {run.seed}")
    if len(runs) > 1:
        points = _aligned_evals(runs)
        if points:
            xs = [f for f, _ in points]
            stats = [bootstrap_ci([means], lambda s: s[0].mean()) for _, means in points]
            ax.plot(xs, [s[0] for s in stats], color="black", label="mean")
            ax.fill_between(xs, [s[1] for s in stats], [s[2] for s in stats], color="black", alpha=0.15,
                            label=f"{CONFIDENCE:.0%} CI")
    ax.set_xlabel("env frames")
    ax.set_ylabel("evaluation return")
    ax.set_title(textwrap.fill(task, 70), fontsize="small" if len(task) > 70 else None)  # long settings wrap
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _aligned_evals(runs) -> list[tuple[float, list[float]]]:
    """The seeds' evaluations point by point: ``(env frames, [each seed's mean])``, where
    every seed has one.  Evaluations of one schedule land a few frames apart in different
    seeds (an evaluation waits for the decision that crosses its frame count), so points
    within 1% of the longest run's frames count as one, at their mean frame count."""
    scale = 0.01 * max((e["env_frames"] for run in runs for e in run.evals), default=1) or 1
    buckets = defaultdict(dict)
    for index, run in enumerate(runs):
        for e in run.evals:
            buckets[round(e["env_frames"] / scale)].setdefault(index, (e["env_frames"], e["mean"]))
    return [(float(np.mean([f for f, _ in points.values()])), [m for _, m in points.values()])
            for _, points in sorted(buckets.items()) if len(points) == len(runs)]


def _setting_labels(settings: list[dict]) -> tuple[list[str], str]:
    """Short legend labels for settings (``{key: value}``, the same keys in each): each
    names only the values that differ from the most common one of its key; the second
    item lists those common values (what the labels leave out)."""
    common = {k: Counter(setting[k] for setting in settings).most_common(1)[0][0] for k in settings[0]}
    labels = [", ".join(f"{k}={v}" for k, v in setting.items() if v != common[k]) or "the common values"
              for setting in settings]
    return labels, ", ".join(f"{k}={v}" for k, v in common.items())


def _plot_settings(task: str, groups: list[tuple[str, list[RunRecord]]], path: Path) -> None:
    """One curve per setting of a task (the mean over its seeds at the evaluations every
    seed has, :func:`_aligned_evals`), side by side; the legend below the axes names what each changes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = _differing_keys([run for _, members in groups for run in members])
    labels, common = _setting_labels([{k: _setting(members[0].config.get(k)) for k in keys} for _, members in groups])
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for (_, members), label in zip(groups, labels):
        points = _aligned_evals(members)
        xs, ys = [f for f, _ in points], [float(np.mean(means)) for _, means in points]
        seeds = f"{len(members)} seed{'s' if len(members) > 1 else ''}"
        ax.plot(xs, ys, marker=".", label=textwrap.fill(f"{label} ({seeds})", 110))
    ax.set_xlabel("env frames")
    ax.set_ylabel("evaluation return (mean over seeds)")
    ax.set_title(f"{task}: settings side by side")
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(0.0, -0.13),
              title=textwrap.fill(f"unless named: {common}", 130), title_fontsize="x-small")
    fig.savefig(path, dpi=100, bbox_inches="tight")
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
    fig.suptitle(textwrap.fill(task, 170), fontsize="small" if len(task) > 170 else None)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _fmt(point: float, low: float, high: float) -> str:
    return f"{point:.3g}" if low == high else f"{point:.3g} [{low:.3g}, {high:.3g}]"


def _frames(runs: list[RunRecord]) -> str:
    frames = sorted({run.evals[-1]["env_frames"] for run in runs if run.evals})
    if not frames:
        return "-"
    return str(frames[0]) if len(frames) == 1 else f"{frames[0]}-{frames[-1]}"


def write_report(run_dirs, out_dir: str | Path) -> Path:
    """Curves and tables for ``run_dirs`` into ``out_dir``; returns the Markdown file."""
    runs = [read_run(d) for d in run_dirs]
    if not runs:
        raise RunError("no run directories given")
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:  # a parent that is a file, a place the user may not write to
        raise RunError(f"cannot write the report to {out}: {error.strerror}") from None
    groups = group_runs(runs)
    settings_per_task = defaultdict(int)
    for task, _, _ in groups:
        settings_per_task[task] += 1
    references = dmc_reference_scores()
    reference_keys = [key for key in references["columns"]
                      if any(key in references["scores"].get(task, {}) for task, _, _ in groups)]
    with_success = any(run.final_success is not None for run in runs)  # envs that report is_success

    summary = ["## Summary", "",
               "Final score: mean over seeds [95% bootstrap interval]; env frames at the last training "
               "evaluation. Published columns: mean +- std over their seeds, 100k env frames.", "",
               "| task | settings | obs | seeds | env frames | final score |"
               + (" success rate |" if with_success else "")
               + "".join(f" {references['columns'][k]} |" for k in reference_keys),
               "|---|---|---|---|---|---|" + "---|" * (len(reference_keys) + with_success)]
    sections = []
    atari_scores: dict[str, list[float]] = {}
    excluded_games = []
    index = defaultdict(int)
    for task, setting, members in groups:
        slug = _slug(task)
        if settings_per_task[task] > 1:
            index[task] += 1
            slug = f"{slug}-{index[task]}"
        title = f"{task} ({setting})" if setting else task
        _plot_returns(title, members, out / f"{slug}-return.png")
        _plot_losses(title, members, out / f"{slug}-losses.png")
        lines = [f"## {title}", "", f"![return]({slug}-return.png)", "",
                 "| seed | env frames | final score | episodes | source | best training eval |",
                 "|---|---|---|---|---|---|"]
        finals = []
        for run in members:
            frames = run.evals[-1]["env_frames"] if run.evals else "-"
            best = f"{max(e['mean'] for e in run.evals):.1f}" if run.evals else "-"
            final = "-" if run.final is None else f"{run.final:.1f}"
            if run.final_success is not None:
                final += f" ({run.final_success:.0%} success)"
            lines.append(f"| {run.seed} | {frames} | {final} | {run.final_episodes or '-'} "
                         f"| {run.final_source or 'no evaluation'} | {best} |")
            if run.final is not None:
                finals.append(run.final)
        score = "-"
        if finals:
            score = _fmt(*bootstrap_ci([finals], lambda s: s[0].mean()))
            lines += ["", f"Mean final score over {len(finals)} seed(s): {score}"]
            normalized = [human_normalized(task, f) for f in finals]
            if normalized[0] is not None:
                lines.append(f"Human-normalized: {_fmt(*bootstrap_ci([normalized], lambda s: s[0].mean()))}")
                if settings_per_task[task] == 1:
                    atari_scores[task] = normalized
                elif task not in excluded_games:
                    excluded_games.append(task)
        lines += ["", f"![losses]({slug}-losses.png)", ""]
        sections += lines

        task_references = references["scores"].get(task, {})
        published = "".join(
            f" {task_references[k][0]} +- {task_references[k][1]} |" if k in task_references else " - |"
            for k in reference_keys)
        seeds = ", ".join(str(run.seed) for run in members)
        obs = _setting(members[0].config.get("env.obs"))
        if with_success:
            rates = [run.final_success for run in members if run.final_success is not None]
            rate = "-" if not rates else _fmt(*(100 * x for x in bootstrap_ci([rates], lambda s: s[0].mean())))
            score += f" | {rate}{'%' if rates else ''}"
        summary.append(f"| {task} | {setting or '-'} | {obs} | {len(members)} ({seeds}) | {_frames(members)} "
                       f"| {score} |{published}")

    comparisons = []
    for task in sorted(t for t, n in settings_per_task.items() if n > 1):
        name = f"{_slug(task)}-settings.png"
        _plot_settings(task, [(setting, members) for t, setting, members in groups if t == task], out / name)
        comparisons += [f"![{task}: settings side by side]({name})", ""]
    lines = ["# ez-robot report", "",
             f"Final score: `eval.json` when the run has one (searched as the run trained, and no older than its "
             f"last training evaluation), else its last training evaluation. "
             f"Intervals: {CONFIDENCE:.0%} percentile bootstrap over seeds. Runs of a task whose "
             f"settings differ (the seed aside) are reported apart, named by those settings.", "",
             *summary, "", *comparisons, *sections]
    if atari_scores:
        agg = aggregate_atari(atari_scores)
        lines += ["## Atari: human-normalized scores across games", "",
                  f"{len(atari_scores)} game(s); mean and median of per-game means, IQM over all runs; "
                  "intervals from a stratified bootstrap (runs resampled within each game).", "",
                  "| statistic | value |", "|---|---|"]
        lines += [f"| {name} | {_fmt(*agg[name])} |" for name in ("mean", "median", "iqm")]
        if excluded_games:
            lines += ["", "Left out (runs with different settings): " + ", ".join(excluded_games)]
        lines.append("")
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
