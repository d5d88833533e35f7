"""A run directory: its resolved config, metrics (JSONL and TensorBoard, and any other
sink of the records) and checkpoints, and the lock that keeps a second process from
training in it at the same time."""
from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import time
import warnings
from pathlib import Path
from typing import Protocol, Sequence

try:
    import fcntl
except ImportError:  # Windows: no lock
    fcntl = None

import yaml

from ez_robot.checkpoint import write_checkpoint
from ez_robot.config import Config, config_to_dict
from ez_robot.errors import RunError
from ez_robot.schedules import Counters

__all__ = ["RunFiles", "Sink", "holds_run_dir", "locked_dir", "strict_json"]


def strict_json(value, **dumps_options) -> str:
    """``value`` as standard JSON: a NaN or infinite float is written as ``null``.

    Python's ``json.dumps`` writes them as ``NaN`` and ``Infinity``, tokens no JSON parser
    but Python's accepts (``jq``, JavaScript, strict readers).  ``null`` is what pandas
    reads back as NaN; where a record has to tell them apart, the event says so in words
    (a divergence, an env's error).  A value that is finite is written exactly as
    ``json.dumps`` writes it."""
    try:
        return json.dumps(value, allow_nan=False, **dumps_options)
    except ValueError:  # a non-finite float somewhere: the rare path
        return json.dumps(_finite_or_none(value), allow_nan=False, **dumps_options)


def _finite_or_none(value):
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite_or_none(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(item) for item in value]
    return value


def holds_run_dir(train):
    """For a trainer's ``train(config, run_dir, ...)``: while it runs, ``run_dir/.lock`` is
    locked (:func:`locked_dir`), and a second process that would train in the same
    directory (a resume started twice, a job retried while the first still runs) is
    refused before it reads or writes anything, rather than both writing the checkpoint and
    pruning each other's replay files."""

    @functools.wraps(train)
    def holding(config, run_dir, *args, **kwargs):
        with locked_dir(run_dir):
            return train(config, run_dir, *args, **kwargs)

    return holding


@contextlib.contextmanager
def locked_dir(directory: Path | str, doing: str = "training in it"):
    """Holds ``directory/.lock`` (``flock``; the directory is made if needed) while the
    block runs; another process holding it is a :class:`RunError` naming its pid and what
    it is ``doing``.  The kernel drops the lock when the process ends, killed or not.  A
    directory this made and the block left empty is removed again."""
    if fcntl is None:  # Windows: no lock
        yield
        return
    directory = Path(directory)
    created = not directory.exists()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        lock = open(directory / ".lock", "a+")
    except OSError as error:  # a parent that is a file, a place the user may not write to
        raise RunError(f"cannot write the run directory {directory}: {error.strerror}") from None
    try:
        with lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.seek(0)
                holder = lock.read().strip()
                raise RunError(f"{directory} is in use: another process{f' (pid {holder})' if holder else ''} "
                               f"is {doing}; let it finish or stop it first (Ctrl-C or SIGTERM leaves "
                               "a checkpoint to resume)") from None
            except OSError as error:  # a filesystem without locks (some network mounts): go on unguarded
                warnings.warn(f"cannot lock {directory / '.lock'} ({error.strerror}); a second process "
                              f"{doing} would not be stopped")
            lock.truncate(0)
            lock.write(f"{os.getpid()}\n")
            lock.flush()
            yield
    except BaseException:
        if created and [p.name for p in directory.iterdir()] == [".lock"]:  # a run that wrote nothing
            (directory / ".lock").unlink()                                  # leaves nothing behind
            directory.rmdir()
        raise


class Sink(Protocol):
    """Something that is opened on the run (its directory, held by this process, and its
    resolved config) and then hears of every record it logs, after metrics.jsonl has it:
    the progress display (:class:`ez_robot.progress.ProgressDisplay`), an experiment
    tracker (:mod:`ez_robot.tracking`)."""

    def open(self, run_dir: Path, config: Config) -> None: ...

    def record(self, kind: str, counters: Counters, values: dict) -> None: ...


class RunFiles:
    """Writes ``config.yaml``, ``metrics.jsonl``, TensorBoard events and checkpoints, and
    passes each record on to ``sinks`` (which their owner closes).

    ``metrics.jsonl`` holds one standard JSON object per line (:func:`strict_json`: a
    non-finite value is ``null``), so that any JSON reader takes it.

    Resuming from ``resume_from`` (a checkpoint) cuts metrics.jsonl back to where that
    checkpoint was taken, and TensorBoard drops the events after it, so that the logs go
    on from the checkpoint's counters without the steps a killed run did after it."""

    def __init__(self, run_dir: Path | str, config: Config, *, resume_from: dict | None = None,
                 sinks: Sequence[Sink] = ()):
        self.dir, self.sinks = Path(run_dir), tuple(sinks)
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "checkpoints").mkdir(exist_ok=True)
        with open(self.dir / "config.yaml", "w") as f:
            yaml.safe_dump(config_to_dict(config), f, sort_keys=False)
        metrics_path, purge_step = self.dir / "metrics.jsonl", None
        if resume_from is not None:
            keep = resume_from.get("metrics_bytes")
            if keep is not None and metrics_path.exists() and metrics_path.stat().st_size > keep:
                with open(metrics_path, "r+b") as f:
                    f.truncate(keep)
            purge_step = int(resume_from["counters"].get("env_frames", 0)) + 1
        self.metrics = open(metrics_path, "a")
        from torch.utils.tensorboard import SummaryWriter

        self.tensorboard = SummaryWriter(str(self.dir / "tensorboard"), purge_step=purge_step)
        for sink in self.sinks:
            sink.open(self.dir, config)

    def log(self, kind: str, counters: Counters, **values) -> None:
        record = {"kind": kind, "time": time.time(), "agent_steps": counters.agent_steps,
                  "env_frames": counters.env_frames, "train_steps": counters.train_steps, **values}
        self.metrics.write(strict_json(record) + "\n")  # NaN and infinities as null
        self.metrics.flush()
        for name, value in values.items():  # scalars only, against env frames (the budget's x-axis)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self.tensorboard.add_scalar(f"{kind}/{name}", value, counters.env_frames)
        for sink in self.sinks:
            sink.record(kind, counters, values)

    def checkpoint(self, **parts) -> Path:
        """Writes the run's checkpoint (:func:`ez_robot.checkpoint.write_checkpoint`), with
        where the metrics log stands."""
        self.metrics.flush()
        return write_checkpoint(self.dir, metrics_bytes=self.metrics.tell(), **parts)

    def has_checkpoint(self) -> bool:
        return (self.dir / "checkpoints" / "latest.pt").is_file()

    def close(self) -> None:
        self.metrics.close()
        self.tensorboard.close()
