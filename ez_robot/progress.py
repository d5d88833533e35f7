"""The progress of one training process (a run, or the part of it since a resume): what
it shows while it runs (:class:`ProgressDisplay`), its time limit and rates, and the
signals that stop it with a checkpoint."""
from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from typing import Callable

import numpy as np

from ez_robot.schedules import Counters

__all__ = ["TrainingProgress", "ProgressDisplay", "interrupt_on_sigterm"]

DEFAULT_LOG_EVERY = 30.0
"""Seconds between two progress lines where stdout is not a terminal."""


@contextlib.contextmanager
def interrupt_on_sigterm():
    """SIGTERM (a job scheduler's time limit, ``kill``, ``timeout``) stops training as
    Ctrl-C does: ``KeyboardInterrupt``, so the trainer writes its checkpoint first."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class TrainingProgress:
    """Progress, the time limit and the rates of a training process, over all of it and
    over its training phase (once the replay buffer filled and the learner started).

    ``progress`` is what it shows: a :class:`ProgressDisplay`, True for the default one (a
    bar on a terminal, lines elsewhere) or False for nothing."""

    def __init__(self, counters: Counters, budget_steps: int, progress: "bool | ProgressDisplay",
                 max_seconds: float | None):
        self.start, self.budget_steps = time.time(), budget_steps
        self.deadline = self.start + max_seconds if max_seconds is not None else None
        self.first = (counters.agent_steps, counters.train_steps)
        self.training: tuple | None = None  # (time, agent steps, train steps) at the first training step
        self.display = ProgressDisplay() if progress is True else progress or None
        if self.display is not None:
            self.display.start(counters, budget_steps)

    def tick(self, counters: Counters) -> bool:
        """Updates the display; False once the time limit is reached."""
        if self.training is None and counters.train_steps > self.first[1]:
            self.training = (time.time(), counters.agent_steps, counters.train_steps)
        if self.display is not None:
            self.display.tick(counters)
        return self.deadline is None or time.time() < self.deadline

    def time_left(self) -> bool:
        return self.deadline is None or time.time() < self.deadline

    def close(self) -> None:
        if self.display is not None:
            self.display.close()

    def summary(self, counters: Counters, last_eval: dict, seconds: dict, **extra) -> dict:
        c, now = counters, time.time()
        wall = max(now - self.start, 1e-9)
        out = {"agent_steps": c.agent_steps, "env_frames": c.env_frames, "train_steps": c.train_steps,
               "episodes": c.episodes, "wall_seconds": wall, "last_eval": last_eval,
               "agent_steps_per_second": (c.agent_steps - self.first[0]) / wall,
               "train_steps_per_second": (c.train_steps - self.first[1]) / wall,
               "seconds": dict(seconds), "training_phase": None, **extra}
        if self.training is not None and now - self.training[0] > 0:
            span = now - self.training[0]
            out["training_phase"] = {"seconds": span, "agent_steps_per_second": (c.agent_steps - self.training[1]) / span,
                                     "train_steps_per_second": (c.train_steps - self.training[2]) / span}
        return out


class ProgressDisplay:
    """What a training process shows while it runs, in one of three styles:

    - ``bar``: a progress bar (a terminal);
    - ``lines``: a line every ``every`` seconds (agent steps, env frames, training steps,
      rates, the recent training return, the latest evaluation, ETA) and a line per
      evaluation, for a batch job's log or a pipe, where a bar shows nothing;
    - ``off``.

    ``auto`` is ``bar`` when stdout is a terminal and ``lines`` otherwise.  ``write`` takes
    each line (default: stdout).  The display is also a sink of the run's records
    (:class:`ez_robot.run_files.RunFiles`), which is how it hears of evaluations."""

    def __init__(self, style: str = "auto", every: float = DEFAULT_LOG_EVERY,
                 write: Callable[[str], None] | None = None):
        if style == "auto":
            style = "bar" if sys.stdout.isatty() else "lines"
        if style not in ("bar", "lines", "off"):
            raise ValueError(f"unknown progress style {style!r}")
        if every <= 0:
            raise ValueError(f"the seconds between progress lines must be > 0, got {every}")
        self.style, self.every = style, every
        self.write = write or (lambda line: print(line, flush=True))
        self.last_eval: tuple[Counters, dict] | None = None
        self.bar = None

    def start(self, counters: Counters, budget_steps: int) -> None:
        self.began, self.budget_steps = time.time(), budget_steps
        self.first = (counters.agent_steps, counters.train_steps)
        self.next_line = self.began + self.every
        if self.style == "bar":
            self.bar = _progress_bar(budget_steps)

    def tick(self, counters: Counters) -> None:
        now = time.time()
        if self.bar is not None:
            recent = f"return {np.mean(counters.recent_returns):.1f}" if counters.recent_returns else "return -"
            rate = (counters.agent_steps - self.first[0]) / max(now - self.began, 1e-9)
            self.bar.update(self.bar.task_ids[0], completed=min(counters.agent_steps, self.budget_steps),
                            status=f"{recent} | {counters.train_steps} train steps | {rate:.1f} steps/s")
        elif self.style == "lines" and now >= self.next_line:
            self.write(self.progress_line(counters, now))
            self.next_line = now + self.every

    def progress_line(self, counters: Counters, now: float) -> str:
        c, elapsed = counters, max(now - self.began, 1e-9)
        agent_rate = (c.agent_steps - self.first[0]) / elapsed
        train_rate = (c.train_steps - self.first[1]) / elapsed
        left = max(self.budget_steps - c.agent_steps, 0)
        eta = "-" if agent_rate <= 0 else _clock(left / agent_rate)
        parts = [f"{c.agent_steps}/{self.budget_steps} agent steps ({c.agent_steps / max(self.budget_steps, 1):.0%}), "
                 f"{c.env_frames} env frames, {c.train_steps} training steps",
                 f"{agent_rate:.1f} agent steps/s, {train_rate:.2f} training steps/s",
                 f"training return {np.mean(c.recent_returns):.1f}" if c.recent_returns else "training return -"]
        if self.last_eval is not None:
            at, values = self.last_eval
            parts.append(f"last evaluation {values['mean']:.1f} at {at.agent_steps} agent steps")
        parts.append(f"ETA {eta}" if left else "self-play done")
        return f"{time.strftime('%H:%M:%S')} train: " + " | ".join(parts)

    def open(self, run_dir, config) -> None:
        """As a sink of the run's records: nothing to open."""

    def record(self, kind: str, counters: Counters, values: dict) -> None:
        """A record of the run (:meth:`RunFiles.log`): evaluations get a line."""
        if kind != "eval" or "mean" not in values:
            return
        self.last_eval = (counters, values)
        if self.style != "lines":
            return
        returns = values.get("returns") or []
        line = (f"{time.strftime('%H:%M:%S')} eval at {counters.agent_steps} agent steps ({counters.env_frames} "
                f"env frames, {counters.train_steps} training steps): return {values['mean']:.1f}")
        if "std" in values:
            line += f" +- {values['std']:.1f}"
        if returns:
            line += f" over {len(returns)} episodes"
        if values.get("success_rate") is not None:
            line += f", success rate {values['success_rate']:.0%}"
        self.write(line)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _progress_bar(total: int):
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(TextColumn("[bold]train"), BarColumn(), TextColumn("{task.completed}/{task.total} agent steps"),
                   TextColumn("{task.fields[status]}"), TimeRemainingColumn())
    bar.start()
    bar.add_task("train", total=total, status="")
    return bar
