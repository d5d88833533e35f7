"""Where a trainer's time goes: wall seconds per phase, and network time inside searches."""
from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager

from ez_robot.inference import TorchInference

__all__ = ["Stopwatch", "TimedInference"]


class Stopwatch:
    """Accumulated wall seconds per name (``selfplay``, ``learner.step``...)."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def __call__(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] += seconds

    def take(self) -> dict[str, float]:
        """The seconds so far, and a fresh start (workers report increments)."""
        out, self.seconds = dict(self.seconds), defaultdict(float)
        return out


class TimedInference(TorchInference):
    """:class:`TorchInference` that adds the time of its network calls to ``stopwatch[name]``,
    so that a search's time splits into network inference and the rest (tree, driver)."""

    def __init__(self, net, device, stopwatch: Stopwatch, name: str):
        super().__init__(net, device)
        self.stopwatch, self.name = stopwatch, name

    def root(self, observations):
        with self.stopwatch(self.name):
            return super().root(observations)

    def recurrent_fn(self, hidden, actions, reset_mask):
        with self.stopwatch(self.name):
            return super().recurrent_fn(hidden, actions, reset_mask)
