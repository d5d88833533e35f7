"""Where a trainer's time goes: wall seconds per phase, and network time inside searches."""
from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager

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


class TimedInference:
    """An inference (:class:`TorchInference` or :class:`OnnxInference`) that adds the time
    of its network calls to ``stopwatch[name]``, so that a search's time splits into
    network inference and the rest (tree, driver)."""

    def __init__(self, inner, stopwatch: Stopwatch, name: str):
        self.inner, self.stopwatch, self.name = inner, stopwatch, name
        self.action_spec = inner.action_spec

    def root(self, observations):
        with self.stopwatch(self.name):
            return self.inner.root(observations)

    def recurrent_fn(self, hidden, actions, reset_mask):
        with self.stopwatch(self.name):
            return self.inner.recurrent_fn(hidden, actions, reset_mask)

    def refresh(self) -> None:
        with self.stopwatch(f"{self.name}.refresh"):
            self.inner.refresh()
