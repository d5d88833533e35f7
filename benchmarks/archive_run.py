"""Keep a finished run's results in the repository, small enough to commit.

    python benchmarks/archive_run.py runs/reacher_easy-s0 runs/ball_in_cup_catch-s0
    ez-robot report benchmarks/results/runs/* --out report/

A learning result outlives the machine that made it only if it is committed: a later
session may start on a fresh machine without ``runs/``.  A run directory holds
checkpoints and replay (hundreds of MB); what ``ez-robot report`` reads is its
``config.yaml``, its evaluations and its training losses.  This copies ``config.yaml``,
``eval.json`` and the ``eval-<label>.json`` of evaluations with other search settings or
checkpoints (when the run has them), and a ``metrics.jsonl`` of every evaluation, every
session boundary (``resume``; the first and last record, so wall time can still be summed
as ``learning.py`` does) and at most ``--train-points`` training records, evenly spaced.
Episodes are dropped.  The copy lands in ``benchmarks/results/runs/<task>-<run folder name>``
unless ``--name`` says otherwise, and is refused if that folder exists (``--force``
replaces it).
"""
import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np

from ez_robot.envs import task_slug
from ez_robot.report import RunError, read_run

ARCHIVE = Path(__file__).resolve().parent / "results" / "runs"


def slim_metrics(lines: list[str], train_points: int) -> list[str]:
    """The records the report and the wall-time sum need, in their original order."""
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a run killed mid-write leaves its last line cut short
    train = [i for i, r in enumerate(records) if r.get("kind") == "train"]
    keep = {0, len(records) - 1}
    if train and train_points > 0:
        picks = np.linspace(0, len(train) - 1, min(train_points, len(train))).round().astype(int)
        keep.update(train[p] for p in picks)
    return [json.dumps(r) for i, r in enumerate(records) if i in keep or r.get("kind") in ("eval", "resume")]


def archive(run_dir: Path, dest_root: Path, name: str | None, train_points: int, force: bool) -> Path:
    record = read_run(run_dir)  # refuses what is not a run directory, with the reason
    dest = dest_root / (name or f"{task_slug(record.task)}-{run_dir.resolve().name}")
    if dest.exists():
        if not force:
            raise RunError(f"{dest} exists (--force replaces it)")
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    shutil.copy2(run_dir / "config.yaml", dest / "config.yaml")
    for report in [run_dir / "eval.json", *sorted(run_dir.glob("eval-*.json"))]:
        if report.is_file():
            shutil.copy2(report, dest / report.name)
    kept = slim_metrics((run_dir / "metrics.jsonl").read_text().splitlines(), train_points)
    (dest / "metrics.jsonl").write_text("\n".join(kept) + "\n")
    return dest


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--to", type=Path, default=ARCHIVE, help="archive folder (default benchmarks/results/runs)")
    parser.add_argument("--name", default=None, help="folder name for a single run")
    parser.add_argument("--train-points", type=int, default=200, help="training records kept per run")
    parser.add_argument("--force", action="store_true", help="replace an archived copy of the same name")
    args = parser.parse_args()
    if args.name and len(args.runs) > 1:
        parser.error("--name names one run; give one run directory with it")
    archived = []
    for run_dir in args.runs:
        try:
            dest = archive(run_dir, args.to, args.name, args.train_points, args.force)
        except RunError as error:
            sys.exit(f"archive_run: {error}")
        size = sum(p.stat().st_size for p in dest.iterdir())
        print(f"{run_dir} -> {dest} ({size / 1024:.0f} KiB)")
        archived.append(str(dest))
    # `git commit -a` leaves new files (a later eval.json) out: add the folders by name
    print(f"to commit: git add {' '.join(archived)}")


if __name__ == "__main__":
    main()
