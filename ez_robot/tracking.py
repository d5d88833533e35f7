"""Experiment trackers besides TensorBoard: sinks of a run's records.

A tracker is a :class:`ez_robot.run_files.Sink`: the run's files open it with the run's
resolved config once the run directory is held, and it hears of every record
metrics.jsonl gets, as TensorBoard does; it also takes the evaluation videos a run
records.  Its owner (:class:`ez_robot.api.TrainingRequest`) makes it before training and
closes it after.  This module is the only one that knows
which trackers exist; the one there is is Weights & Biases (``--wandb``, the ``track``
extra).
"""
from __future__ import annotations

import json
import os
import uuid
import warnings
from pathlib import Path

from ez_robot.config import Config, config_to_dict
from ez_robot.errors import ConfigError, RunError
from ez_robot.schedules import Counters

__all__ = ["Tracker", "WandbTracker", "require_trackers", "make_trackers"]

TRACKING_FILE = "tracking.json"
"""In a run directory: the trackers' own ids of the run, so that a resumed run goes on in
the same tracked run."""
NOT_METRICS = ("kind", "time", "agent_steps", "env_frames", "train_steps")


class Tracker:
    """The sink interface of a tracker: opened on the run (by :class:`RunFiles`, once the
    run directory is held), every record, the evaluation videos, the end (by its owner)."""

    def open(self, run_dir: Path, config: Config) -> None:
        raise NotImplementedError

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


def make_trackers(*, wandb: bool = False, group: str | None = None, log=None) -> list[Tracker]:
    """The trackers asked for, to hand to a trainer as sinks; ``group`` names a group of
    seeds, ``log`` takes a line saying where each tracked run is."""
    return [WandbTracker(group=group, log=log)] if wandb else []


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

    def __init__(self, *, group: str | None = None, log=None):
        self._wandb, self.group, self.log, self.run, self._failed = _import_wandb(), group, log, None, False

    def open(self, run_dir: Path, config: Config) -> None:
        """Starts the W&B run (or goes on with the one ``run_dir`` was tracked in)."""
        wandb = self._wandb
        ids = _ids(run_dir)
        run_id = ids.get("wandb") or uuid.uuid4().hex[:12]
        if "wandb" not in ids:
            (run_dir / TRACKING_FILE).write_text(json.dumps({**ids, "wandb": run_id}) + "\n")
        name = f"{self.group}/{run_dir.name}" if self.group else run_dir.name
        try:
            self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "ez-robot"), dir=str(run_dir), id=run_id,
                                  name=name, group=self.group, resume="allow", config=config_to_dict(config),
                                  settings=wandb.Settings(console="off", silent=True))
        except Exception as error:  # noqa: BLE001 - not logged in, no network, a bad entity...
            raise RunError(f"W&B could not start a run ({type(error).__name__}: {str(error).splitlines()[0]}); "
                           "log in (`wandb login`), or set WANDB_MODE=offline to write it to the run directory "
                           "without a network") from None
        self.run.define_metric("env_frames")
        self.run.define_metric("*", step_metric="env_frames")
        if self.log is not None:
            where = f"offline in {self.run.dir}" if self.run.settings.mode == "offline" else self.run.url
            self.log(f"W&B run {run_id}: {where}")

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
        if self.run is not None:
            self.run.finish()
            self.run = None


def _steps(counters: Counters) -> dict:
    return {"env_frames": counters.env_frames, "agent_steps": counters.agent_steps,
            "train_steps": counters.train_steps}
