"""Write benchmarks/results.csv: one row per evaluation of a training run.

    python benchmarks/build_results.py --runs runs/walker_walk-s3 --append   # add a new run's rows
    git worktree add /tmp/archive fcc05c6                                   # the archive the file was built from
    python benchmarks/build_results.py --runs /tmp/archive/benchmarks/results/runs/*

Each run directory gives one row per periodic evaluation in ``metrics.jsonl`` (what
training logs every tenth of the budget, greedy, usually 10 episodes) and one per
``eval.json`` / ``eval-<label>.json`` (``ez-robot eval``), so learning curves can be drawn
from the file alone (``ez-robot report --results benchmarks/results.csv``).

Columns:

- ``task``: the ``--task`` of the run (a factory file relative to the repository);
- ``setting``: how the run's training differs from ``ez-robot train --task TASK --budget
  100k`` on today's presets, written as the options that reproduce it (``--config NAME``,
  ``--set key=value``, ``--budget``), or ``default``.  A switch that no longer exists is
  kept with ``(removed)`` after it, unless it was off;
- ``seed``; ``env_steps`` (simulator steps, as ``--budget`` counts them on DMC; decisions
  for factory tasks, whose action repeat is 1);
- ``eval_mean``, ``eval_episodes``, ``success_rate`` (for envs that report ``is_success``);
- ``evaluation``: ``training`` for the periodic evaluations, else the ``ez-robot eval``
  options that made it (``eval --seed 100``; ``--set search.KEY=VALUE`` for an evaluation
  with another search);
- ``date`` (UTC) of the evaluation record, or of the run's last record for ``eval*.json``,
  which hold no time; ``machine``; ``source``: the run directory's name.

The per-run archive this file was first built from (176 runs: config, evaluations, thinned
training metrics) is in the git history at commit fcc05c6, under ``benchmarks/results/runs/``.
After adding rows, regenerate the results page: ``ez-robot report --results
benchmarks/results.csv --peers benchmarks/peers.csv --out docs/``.
"""
from __future__ import annotations

import argparse
import csv
import datetime
import functools
import json
import sys
from pathlib import Path

import yaml

from ez_robot.config import config_from_dict, config_to_dict, load_config, recipe_overrides
from ez_robot.config.loading import _all_keys

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results.csv"
COLUMNS = ["task", "setting", "seed", "env_steps", "eval_mean", "eval_episodes", "success_rate", "evaluation",
           "date", "machine", "source"]
MACHINE = "2-core x86_64 CPU"
DEFAULT_BUDGET = 100_000
RECIPES = ("ezv2_states",)
NOT_SETTINGS = {"seed", "env.task", "env.obs", "train.budget", "preset"}
# The example arm's factory observes the offset to its target by default since this time;
# runs made before it, which do not name the argument, observed no offset.
TO_TARGET_DEFAULT_SINCE = datetime.datetime(2026, 11, 25, 15, 49, tzinfo=datetime.timezone.utc).timestamp()


def flatten(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def repository_task(task: str) -> str:
    """A factory file's task relative to the repository (runs store the absolute path)."""
    source, sep, name = task.rpartition(":")
    if sep and source.endswith(".py") and "/examples/" in source:
        return "examples/" + source.split("/examples/", 1)[1] + ":" + name
    return task


@functools.cache
def reference(task: str, obs: str, recipe: str | None, mode: str | None) -> dict:
    """Today's resolved config of the default command (plus ``--config recipe`` and an
    action mode: a mode brings its own part of the preset), flattened."""
    overrides = (recipe_overrides(recipe) if recipe else []) + ([f"env.action_mode={mode}"] if mode else [])
    if task.startswith("examples/"):  # a factory file: the copy in this checkout
        source, name = task.rsplit(":", 1)
        task = f"{ROOT / source}:{name}"
    return flatten(config_to_dict(load_config(task, obs=obs, budget=DEFAULT_BUDGET, overrides=overrides)))


@functools.cache
def factory_default(task: str, key: str):
    """The default of a factory task's keyword argument (``env.kwargs.NAME``), else None."""
    source, sep, name = task.rpartition(":")
    if not (key.startswith("env.kwargs.") and sep and source.endswith(".py")):
        return None
    import importlib.util
    import inspect

    spec = importlib.util.spec_from_file_location("factory", ROOT / source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    parameter = inspect.signature(getattr(module, name)).parameters.get(key.removeprefix("env.kwargs."))
    return None if parameter is None else parameter.default


def _text(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return json.dumps(value)


def _budget(value: int) -> str:
    return f"{value // 1000}k" if value % 1000 == 0 else str(value)


def setting(config: dict, first_time: float) -> str:
    """The options that turn today's default command into the run's training."""
    flat = flatten(config)
    known = set(_all_keys()) | {"seed", "preset"}
    removed = {k: v for k, v in flat.items() if k not in known and not k.startswith("env.kwargs.")}
    off = {k for k, v in removed.items() if v in (0, False, None, "none", "off")}  # a removed switch left off:
    removed = {k: v for k, v in removed.items() if k not in off}                   # today's behaviour
    kept = {k: v for k, v in config.items()}
    for key in [*removed, *off]:  # drop it from the nested config before completing it
        section, name = key.split(".", 1)
        kept[section] = {n: v for n, v in kept[section].items() if n != name}
    run = flatten(config_to_dict(config_from_dict(kept)))  # keys the run predates at their defaults
    task = repository_task(run["env.task"])
    if task.startswith("examples/arm/reach_arm.py") and "env.kwargs.to_target" not in run \
            and first_time < TO_TARGET_DEFAULT_SINCE:
        run["env.kwargs.to_target"] = False
    options = []
    if run["env.obs"] != "state" and not task.startswith("atari:"):
        options.append(f"--obs {run['env.obs']}")
    if run["train.budget"] != DEFAULT_BUDGET:
        options.append(f"--budget {_budget(run['train.budget'])}")
    best = None
    for recipe in (None, *RECIPES):
        ref = reference(task, run["env.obs"], recipe, None)
        if ref["env.action_mode"] != run["env.action_mode"]:
            ref = {**reference(task, run["env.obs"], recipe, run["env.action_mode"]),
                   "env.action_mode": ref["env.action_mode"]}  # so that the mode itself is named
        keys = sorted((set(run) | set(ref)) - NOT_SETTINGS)
        diffs = [f"--set {k}={_text(run[k])}" for k in keys if k in run and run[k] != ref.get(k, factory_default(task, k))]
        candidate = ([f"--config {recipe}"] if recipe else []) + diffs
        if best is None or len(candidate) <= len(best):  # a tie goes to the recipe, the command the docs give
            best = candidate
    options += best
    options += [f"--set {k}={_text(v)} (removed)" for k, v in sorted(removed.items())]
    return " ".join(options) or "default"


def _date(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%d")


def _number(value, digits: int = 1) -> str:
    return "" if value is None else f"{float(value):.{digits}f}"


def rows_of(run_dir: Path) -> list[dict]:
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    records = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a run killed mid-write leaves its last line cut short
    times = [r["time"] for r in records if "time" in r]
    run_setting = setting(config, min(times))
    base = {"task": repository_task(config["env"]["task"]), "setting": run_setting, "seed": config["seed"],
            "machine": MACHINE, "source": run_dir.name}
    rows = []
    for record in records:
        if record.get("kind") != "eval":
            continue
        rows.append({**base, "env_steps": record["env_frames"], "eval_mean": _number(record["mean"]),
                     "eval_episodes": len(record.get("returns") or []) or "",
                     "success_rate": _number(record.get("success_rate"), 3), "evaluation": "training",
                     "date": _date(record["time"])})
    for path in [run_dir / "eval.json", *sorted(run_dir.glob("eval-*.json"))]:
        if not path.is_file():
            continue
        result = json.loads(path.read_text())
        how = ["eval"] + ([f"--seed {result['seed']}"] if result.get("seed") else [])
        how += [f"--set {o}" for o in result.get("search_overrides") or []]
        if path.name != "eval.json" and not result.get("search_overrides"):
            how.append(f"({path.stem.removeprefix('eval-')})")
        rows.append({**base, "env_steps": result["env_frames"], "eval_mean": _number(result["mean"]),
                     "eval_episodes": result.get("episodes") or len(result["returns"]),
                     "success_rate": _number(result.get("success_rate"), 3), "evaluation": " ".join(how),
                     "date": _date(max(times))})
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", nargs="+", type=Path, required=True, help="run directories")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--append", action="store_true", help="add rows to --out instead of rewriting it")
    parser.add_argument("--machine", default=MACHINE, help=f"the machine the runs trained on ({MACHINE!r})")
    args = parser.parse_args(argv)
    rows = []
    for run_dir in sorted(args.runs):
        if not (run_dir / "config.yaml").is_file() or not (run_dir / "metrics.jsonl").is_file():
            sys.exit(f"{run_dir} is not a run directory (it needs config.yaml and metrics.jsonl)")
        rows += [{**row, "machine": args.machine} for row in rows_of(run_dir)]
    append = args.append and args.out.is_file()
    with open(args.out, "a" if append else "w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS, lineterminator="\n")
        if not append:
            writer.writeheader()
        writer.writerows(rows)
    print(f"{'added' if append else 'wrote'} {len(rows)} rows from {len(args.runs)} runs to {args.out}")


if __name__ == "__main__":
    main()
