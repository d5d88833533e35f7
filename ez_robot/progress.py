"""The progress of one training process (a run, or the part of it since a resume): its
progress bar, time limit and rates, and the signals that stop it with a checkpoint."""
from __future__ import annotations

import contextlib
import signal
import threading
import time

import numpy as np

from ez_robot.schedules import Counters

__all__ = ["TrainingProgress", "interrupt_on_sigterm"]


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
    over its training phase (once the replay buffer filled and the learner started)."""

    def __init__(self, counters: Counters, budget_steps: int, progress: bool, max_seconds: float | None):
        self.start, self.budget_steps = time.time(), budget_steps
        self.deadline = self.start + max_seconds if max_seconds is not None else None
        self.first = (counters.agent_steps, counters.train_steps)
        self.training: tuple | None = None  # (time, agent steps, train steps) at the first training step
        self.bar = _progress_bar(budget_steps) if progress else None

    def tick(self, counters: Counters) -> bool:
        """Updates the progress bar; False once the time limit is reached."""
        if self.training is None and counters.train_steps > self.first[1]:
            self.training = (time.time(), counters.agent_steps, counters.train_steps)
        if self.bar is not None:
            recent = f"return {np.mean(counters.recent_returns):.1f}" if counters.recent_returns else "return -"
            rate = (counters.agent_steps - self.first[0]) / max(time.time() - self.start, 1e-9)
            self.bar.update(self.bar.task_ids[0], completed=min(counters.agent_steps, self.budget_steps),
                            status=f"{recent} | {counters.train_steps} train steps | {rate:.1f} steps/s")
        return self.deadline is None or time.time() < self.deadline

    def time_left(self) -> bool:
        return self.deadline is None or time.time() < self.deadline

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()

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


def _progress_bar(total: int):
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(TextColumn("[bold]train"), BarColumn(), TextColumn("{task.completed}/{task.total} agent steps"),
                   TextColumn("{task.fields[status]}"), TimeRemainingColumn())
    bar.start()
    bar.add_task("train", total=total, status="")
    return bar
