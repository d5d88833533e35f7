"""Experiment trackers besides TensorBoard: sinks of a run's records.

A tracker is a :class:`ez_robot.run_files.Sink` (it hears of every record metrics.jsonl
gets, as TensorBoard does) that also takes the run's config when it opens and the
evaluation videos a run records.  Its owner (:class:`ez_robot.api.TrainingRequest`)
opens it before training and closes it after.  This module is the only one that knows
which trackers exist; the one there is is Weights & Biases (``--wandb``, the ``track``
extra).
"""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

from ez_robot.config import Config, config_to_dict
from ez_robot.errors import ConfigError, RunError
from ez_robot.schedules import Counters

__all__ = ["Tracker", "WandbTracker", "require_trackers", "open_trackers"]

TRACKING_FILE = "tracking.json"
"""In a run directory: the trackers' own ids of the run, so that a resumed run goes on in
the same tracked run."""
NOT_METRICS = ("kind", "time", "agent_steps", "env_frames", "train_steps")


class Tracker:
    """The sink interface of a tracker: every record, the evaluation videos, the end."""

    def record(self, kind: str, counters: Counters, values: dict) -> None:
        raise NotImplementedError

    def video(self, path: Path, counters: Counters) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


def require_trackers(wandb: bool = False) -> None:
    """Before a run starts: each tracker asked for can be imported (a one-line error naming
    the extra that installs it otherwise)."""
    if wandb:
        _import_wandb()


def open_trackers(run_dir: Path | str, config: Config, *, wandb: bool = False, group: str | None = None,
                  log=None) -> list[Tracker]:
    """The trackers asked for, opened on ``run_dir`` (a resumed run goes on in its tracked
    run) with the resolved ``config``; ``group`` names a group of seeds."""
    return [WandbTracker(Path(run_dir), config, group=group, log=log)] if wandb else []


def _import_wandb():
    try:
        import wandb
    except ImportError:
        raise ConfigError("--wandb needs the wandb package, which the track extra installs: "
                          "pip install 'ez-robot[track]' (from a checkout: pip install -e '.[track]')") from None
    return wandb


def _ids(run_dir: Path) -> dict:
    path = run_dir / TRACKING_FILE
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise RunError(f"{path} is not readable ({error}); delete it to start a new tracked run") from None


class WandbTracker(Tracker):
    """Mirrors a run to Weights & Biases: the config, every record's numbers as
    ``kind/name`` against ``env_frames`` (TensorBoard's tags and x-axis), and the evaluation
    videos.  W&B's files go to ``RUN_DIR/wandb``; its own settings come from its
    environment variables (``WANDB_PROJECT``, default ``ez-robot``; ``WANDB_ENTITY``;
    ``WANDB_MODE=offline`` to write the run there without a network, for ``wandb sync``).
    A resumed run goes on in the same W&B run (its id is kept in ``RUN_DIR/tracking.json``);
    what a killed process logged after its last checkpoint stays there, while
    metrics.jsonl cuts it."""

    def __init__(self, run_dir: Path, config: Config, *, group: str | None = None, log=None):
        wandb = _import_wandb()
        self._wandb = wandb
        ids = _ids(run_dir)
        run_id = ids.get("wandb") or wandb.util.generate_id()
        if "wandb" not in ids:
            (run_dir / TRACKING_FILE).write_text(json.dumps({**ids, "wandb": run_id}) + "\n")
        name = f"{group}/{run_dir.name}" if group else run_dir.name
        try:
            self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "ez-robot"), dir=str(run_dir), id=run_id,
                                  name=name, group=group, resume="allow", config=config_to_dict(config),
                                  settings=wandb.Settings(console="off", quiet=True))
        except Exception as error:  # noqa: BLE001 - not logged in, no network, a bad entity...
            raise RunError(f"W&B could not start a run ({type(error).__name__}: {str(error).splitlines()[0]}); "
                           "log in (`wandb login`), or set WANDB_MODE=offline to write it to the run directory "
                           "without a network") from None
        self.run.define_metric("env_frames")
        self.run.define_metric("*", step_metric="env_frames")
        self._failed = False
        if log is not None:
            where = f"offline in {self.run.dir}" if self.run.settings.mode == "offline" else self.run.url
            log(f"W&B run {run_id}: {where}")

    def record(self, kind: str, counters: Counters, values: dict) -> None:
        numbers = {f"{kind}/{name}": value for name, value in values.items()
                   if isinstance(value, (int, float)) and not isinstance(value, bool) and name not in NOT_METRICS}
        if numbers:
            self._log({**numbers, **_steps(counters)})

    def video(self, path: Path, counters: Counters) -> None:
        self._log({"eval/video": self._wandb.Video(str(path), format="mp4"), **_steps(counters)})

    def _log(self, data: dict) -> None:
        try:
            self.run.log(data)
        except Exception as error:  # noqa: BLE001 - the tracker never stops training; metrics.jsonl has it all
            if not self._failed:
                warnings.warn(f"W&B logging failed ({type(error).__name__}: {error}); training goes on, "
                              "metrics.jsonl and TensorBoard keep every record")
            self._failed = True

    def close(self) -> None:
        self.run.finish()


def _steps(counters: Counters) -> dict:
    return {"env_frames": counters.env_frames, "agent_steps": counters.agent_steps,
            "train_steps": counters.train_steps}
