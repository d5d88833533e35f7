"""The results page: tables and learning curves from a results file.

A results file (``benchmarks/results.csv``) has one row per evaluation of a training run:
``task, setting, seed, env_steps, eval_mean, eval_episodes, success_rate, evaluation,
date, machine, source`` (``benchmarks/build_results.py`` writes it from run directories).
``evaluation`` is ``training`` for the periodic evaluations a run logs, else the
``ez-robot eval`` command that made the row.  A peers file (``benchmarks/peers.csv``:
``system, task, setting, seed, env_steps, score, ...``) holds published or separately
measured figures of other systems.

:func:`write_results_page` writes ``results.md`` and one curve per task under ``img/``.
Every figure on the page comes from rows of one setting, one evaluation kind and one
episode count: a run's final figure is its last training evaluation (or its
``ez-robot eval``), and seeds are summarized by their mean and range, never pooling
evaluations of different lengths.
"""
from __future__ import annotations

import csv
import textwrap
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ez_robot.errors import RunError

__all__ = ["ResultRow", "read_results", "read_peers", "final_figures", "write_results_page"]

RESULT_COLUMNS = ("task", "setting", "seed", "env_steps", "eval_mean", "eval_episodes", "evaluation", "source")
PEER_COLUMNS = ("system", "task", "env_steps", "score")
MAIN_BUDGET = 100_000
CURVES_PER_TASK = 6      # the default command and the settings with the most runs
PEERS_IN_SUMMARY = ("TD-MPC2", "EfficientZero V2", "SB3 SAC")


@dataclass(frozen=True)
class ResultRow:
    task: str
    setting: str
    seed: int
    env_steps: int
    mean: float
    episodes: int
    success_rate: float | None
    evaluation: str
    date: str
    machine: str
    source: str


@dataclass(frozen=True)
class Figure:
    """One setting's final evaluations at one budget: one run per value, in seed order."""
    task: str
    setting: str
    evaluation: str
    env_steps: int          # rounded to the nearest thousand
    episodes: int
    rows: tuple[ResultRow, ...]

    @property
    def values(self) -> np.ndarray:
        return np.array([row.mean for row in self.rows])

    @property
    def success(self) -> list[float]:
        return [row.success_rate for row in self.rows if row.success_rate is not None]


def _read_csv(path: Path, required: tuple[str, ...]) -> list[dict]:
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in required if c not in (reader.fieldnames or [])]
            if missing:
                raise RunError(f"{path} lacks the column(s) {', '.join(missing)}")
            return list(reader)
    except OSError as error:
        raise RunError(f"cannot read {path}: {error.strerror}") from None


def read_results(path: str | Path) -> list[ResultRow]:
    """The rows of a results file; a row that does not parse is an error naming its line."""
    rows = []
    for line, raw in enumerate(_read_csv(Path(path), RESULT_COLUMNS), 2):
        try:
            rate = raw.get("success_rate") or ""
            rows.append(ResultRow(raw["task"], raw["setting"] or "default", int(raw["seed"]), int(raw["env_steps"]),
                                  float(raw["eval_mean"]), int(raw["eval_episodes"]), float(rate) if rate else None,
                                  raw["evaluation"] or "training", raw.get("date", ""), raw.get("machine", ""),
                                  raw["source"]))
        except (TypeError, ValueError) as error:
            raise RunError(f"{path}:{line} is not a results row ({error})") from None
    return rows


def read_peers(path: str | Path) -> list[dict]:
    """The rows of a peers file, ``env_steps`` and ``score`` as numbers."""
    rows = []
    for line, raw in enumerate(_read_csv(Path(path), PEER_COLUMNS), 2):
        try:
            rows.append({**raw, "env_steps": int(raw["env_steps"]), "score": float(raw["score"])})
        except (TypeError, ValueError) as error:
            raise RunError(f"{path}:{line} is not a peers row ({error})") from None
    return rows


def _steps_key(env_steps: int) -> int:
    """Evaluations land a few steps past their schedule (30,016 for 30k): the thousand they mean."""
    return int(round(env_steps / 1000)) * 1000


def steps_label(env_steps: int) -> str:
    if env_steps % 1_000_000 == 0:
        return f"{env_steps // 1_000_000}M"
    return f"{env_steps // 1000}k" if env_steps % 1000 == 0 else str(env_steps)


def final_figures(rows: list[ResultRow]) -> list[Figure]:
    """Each run's last training evaluation and each of its ``ez-robot eval`` rows, grouped
    by task, setting, evaluation, budget and episode count; sorted by task, then the
    default command first, then by the number of runs."""
    last: dict[tuple, ResultRow] = {}
    for row in rows:
        if row.evaluation == "training":
            key = (row.source, "training")
            if key not in last or row.env_steps > last[key].env_steps:
                last[key] = row
        else:
            last[(row.source, row.evaluation, row.env_steps)] = row
    groups: dict[tuple, list[ResultRow]] = defaultdict(list)
    for row in last.values():
        groups[(row.task, row.setting, row.evaluation, _steps_key(row.env_steps), row.episodes)].append(row)
    figures = [Figure(task, setting, evaluation, steps, episodes, tuple(sorted(members, key=lambda r: r.seed)))
               for (task, setting, evaluation, steps, episodes), members in groups.items()]
    runs = _runs_per_setting(rows)
    return sorted(figures, key=lambda f: (f.task, f.setting != "default", -runs[f.task, f.setting], f.setting,
                                          f.evaluation != "training", f.evaluation, -f.env_steps))


def _runs_per_setting(rows: list[ResultRow]) -> dict[tuple[str, str], int]:
    sources = defaultdict(set)
    for row in rows:
        sources[row.task, row.setting].add(row.source)
    return {key: len(value) for key, value in sources.items()}


def _summary(values: np.ndarray) -> str:
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{values.mean():.1f} [{values.min():.1f}, {values.max():.1f}]"


def _seeds(figure: Figure) -> str:
    seeds = [row.seed for row in figure.rows]
    if len(set(seeds)) == len(seeds) and seeds == list(range(seeds[0], seeds[0] + len(seeds))) and len(seeds) > 2:
        return f"{len(seeds)} ({seeds[0]}-{seeds[-1]})"
    return f"{len(seeds)} ({', '.join(map(str, seeds))})"


def _score(figure: Figure) -> str:
    text = _summary(figure.values)
    if figure.success:
        rates = 100 * np.array(figure.success)
        text += f"; success {rates.mean():.1f}%" + (f" [{rates.min():.0f}, {rates.max():.0f}]" if len(rates) > 1 else "")
    return text


def _peer_points(peers: list[dict], task: str) -> dict[str, dict[int, float]]:
    """``{system: {env_steps: mean score over the system's rows there}}`` for one task."""
    points: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in peers:
        if row["task"] == task:
            points[row["system"]][row["env_steps"]].append(row["score"])
    return {system: {steps: float(np.mean(v)) for steps, v in sorted(by_steps.items())}
            for system, by_steps in points.items()}


def _curve(rows: list[ResultRow]) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
    """Mean, min and max over runs at the evaluation points every run of ``rows`` has."""
    by_point: dict[int, dict[str, float]] = defaultdict(dict)
    sources = {row.source for row in rows}
    for row in rows:
        by_point[_steps_key(row.env_steps)][row.source] = row.mean
    xs = [x for x in sorted(by_point) if len(by_point[x]) == len(sources)]
    values = [np.array(list(by_point[x].values())) for x in xs]
    return xs, np.array([v.mean() for v in values]), np.array([v.min() for v in values]), \
        np.array([v.max() for v in values])


def _plot_task(task: str, rows: list[ResultRow], settings: list[str], peers: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.8))
    longest = 0
    for setting in settings:
        members = [r for r in rows if r.setting == setting and r.evaluation == "training"]
        xs, mean, low, high = _curve(members)
        if not xs:
            continue
        longest = max(longest, xs[-1])
        runs = len({r.source for r in members})
        line, = ax.plot(xs, mean, marker=".", label=textwrap.fill(f"{setting} ({runs} run{'s' * (runs > 1)})", 100))
        if runs > 1 and setting == settings[0]:  # one band: more would hide the curves
            ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.15)
    for (system, points), marker in zip(sorted(peers.items()), "xs^dv"):
        steps = [s for s in points if s <= max(longest, MAIN_BUDGET)]
        if steps:
            ax.plot(steps, [points[s] for s in steps], linestyle="--", marker=marker, color="black", alpha=0.6,
                    label=system)
    ax.set_xlabel("env steps")
    ax.set_ylabel("evaluation return (mean over runs)")
    ax.set_title(task)
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(0.0, -0.13))
    fig.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(fig)


def _slug(task: str) -> str:
    """A file name for a task: ``gym-Hopper-v5``; a factory file by its stem and name (``reach_arm-make_arm``)."""
    source, _, name = task.rpartition(":")
    if source.endswith(".py"):
        return f"{Path(source).stem}-{name}"
    return task.replace(":", "-").replace("/", "-")


def write_results_page(results: str | Path, out_dir: str | Path, peers: str | Path | None = None,
                       command: str = "") -> Path:
    """``out_dir/results.md`` and ``out_dir/img/results-<task>.png`` from a results file
    (and a peers file); returns the Markdown file."""
    rows = read_results(results)
    if not rows:
        raise RunError(f"{results} has no rows")
    peer_rows = read_peers(peers) if peers else []
    out = Path(out_dir)
    try:
        (out / "img").mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RunError(f"cannot write the results page to {out}: {error.strerror}") from None
    figures = final_figures(rows)
    tasks = sorted({row.task for row in rows})
    lines = ["# Results", "",
             f"Generated from `{results}`" + (f" and `{peers}`" if peers else "")
             + (f" by `{command}`" if command else "") + ": do not edit by hand.", "",
             "Each figure is the mean over runs of one setting, with the range over runs in brackets; "
             "a run's figure is its last evaluation during training, or an `ez-robot eval` of its final "
             "checkpoint (listed apart: it plays more episodes). Episodes: evaluation episodes behind each "
             "run's figure. Settings are the options added to `ez-robot train --task TASK --budget 100k`.", ""]
    lines += _summary_table(figures, tasks, peer_rows)
    for task in tasks:
        task_rows = [r for r in rows if r.task == task]
        task_figures = [f for f in figures if f.task == task]
        runs = {setting: n for (t, setting), n in _runs_per_setting(task_rows).items()}
        settings = sorted(runs, key=lambda s: (s != "default", -runs[s], s))[:CURVES_PER_TASK]
        image = f"img/results-{_slug(task)}.png"
        peers_here = {system: points for system, points in _peer_points(peer_rows, task).items()
                      if system in PEERS_IN_SUMMARY}
        _plot_task(task, task_rows, settings, peers_here, out / image)
        lines += [f"## {task}", "", f"![{task}: learning curves]({image})", "",
                  "| setting | evaluation | env steps | runs (seeds) | episodes | score |", "|---|---|---|---|---|---|"]
        for f in task_figures:
            lines.append(f"| {_code(f.setting)} | {_code(f.evaluation)} | {steps_label(f.env_steps)} | {_seeds(f)} "
                         f"| {f.episodes} | {_score(f)} |")
        lines.append("")
    if peer_rows:
        lines += _peers_table(peer_rows)
    path = out / "results.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def _code(text: str) -> str:
    return text if text in ("default", "training") else f"`{text}`"


def _summary_table(figures: list[Figure], tasks: list[str], peers: list[dict]) -> list[str]:
    """The default command at its full budget, beside the peers at the same env steps."""
    systems = [s for s in PEERS_IN_SUMMARY if any(p["system"] == s for p in peers)]
    lines = ["## The default command at 100k env steps", "",
             "| task | runs (seeds) | episodes | ez-robot |" + "".join(f" {s} |" for s in systems),
             "|---|---|---|---|" + "---|" * len(systems)]
    for task in tasks:
        points = _peer_points(peers, task)
        cells = "".join(f" {points[s][MAIN_BUDGET]:.0f} |" if MAIN_BUDGET in points.get(s, {}) else " - |"
                        for s in systems)
        ours = [f for f in figures if f.task == task and f.setting == "default" and f.evaluation == "training"
                and f.env_steps == MAIN_BUDGET]
        for f in ours:
            lines.append(f"| {task} | {_seeds(f)} | {f.episodes} | {_score(f)} |{cells}")
        if not ours:
            lines.append(f"| {task} | - | - | no run of the default command to 100k |{cells}")
    return lines + ["", "Peers: the mean of their seeds at 100k env steps (see the peers table at the end).", ""]


def _peers_table(peers: list[dict]) -> list[str]:
    lines = ["## Peers", "", "| system | task | setting | env steps | score | seeds | source |", "|---|---|---|---|---|---|---|"]
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for row in peers:
        groups[(row["system"], row["task"], row["setting"], row["env_steps"], row["source"])].append(row)
    for (system, task, setting, steps, source), members in sorted(groups.items()):
        scores = np.array([m["score"] for m in members])
        if members[0].get("seed"):  # measured runs, one row per seed
            seeds = ", ".join(m["seed"] for m in members)
        else:                       # a published mean over its seeds
            seeds = members[0].get("seeds") or "-"
        std = members[0].get("score_std")
        score = _summary(scores) + (f" +- {std}" if std and len(members) == 1 else "")
        note = members[0].get("note")
        lines.append(f"| {system} | {task} | {setting} | {steps_label(steps)} | {score}{f' ({note})' if note else ''} "
                     f"| {seeds} | {source} |")
    return lines + [""]
