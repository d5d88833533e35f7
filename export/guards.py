"""The control loop's guards on what reaches the actuators (numpy only; no torch).

:class:`Guards` is what a user sets; :class:`ActionGuard` is those settings resolved
against a policy's action space and control period, and applied on every tick:

- **fallback**: the action sent on a tick that has no fresh, finite reading or no
  decision in time (``"hold"`` the last action sent, ``"neutral"``, or an action given);
- **bounds**: every action sent lies within them (the bundle's, or tighter ones given);
- **rate limit**: no action dimension changes by more than ``max_change`` from one tick to
  the next (off unless given: a limit has the units of the robot's own commands);
- **stop action**: what the loop sends first when it stops (Ctrl-C, SIGTERM, the end of
  the run, an error); the rate limit does not delay it.

"neutral" is zero in every dimension whose bounds hold zero (no torque, no velocity, no
set-point change), the middle of the bounds elsewhere, and action 0 for discrete actions.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence, Union

import numpy as np

from ez_robot.errors import ConfigError

__all__ = ["Guards", "ActionGuard", "FALLBACK_REASONS", "parse_action", "parse_numbers"]

ActionChoice = Union[str, int, float, Sequence[float]]

FALLBACK_REASONS = {
    "stale": "the reading was older than max_age_ms",
    "non_finite": "the reading held NaN or infinite values",
    "sensor_error": "reading the sensors raised",
    "sensor_stalled": "reading the sensors did not return before the tick's end",
    "bad_observation": "the runtime refused the reading (shape, dtype, a missing key)",
    "bad_action": "the search gave a non-finite action",
    "deadline": "the decision was not ready by the end of its tick",
}
"""Why a tick sent its fallback action instead of the searched one (the tick log's words)."""


@dataclass(frozen=True)
class Guards:
    """What the control loop sends when things go wrong, and the limits on every action."""

    fallback: ActionChoice = "hold"
    """Action of a tick without a fresh, finite reading or a timely decision: "hold" (the
    last action sent; "neutral" before the first), "neutral", or an action."""
    stop_action: ActionChoice = "neutral"
    """Action sent first when the loop stops: "neutral", "hold" or an action."""
    max_age_ms: float | None = None
    """A reading older than this is stale (default: two control periods)."""
    max_change: float | Sequence[float] | None = None
    """Largest change of each action dimension from one tick to the next, in the action's
    units (one value for every dimension, or one each); None: no rate limit."""
    low: float | Sequence[float] | None = None
    """Lower action bounds, within the bundle's (default: the bundle's)."""
    high: float | Sequence[float] | None = None
    """Upper action bounds, within the bundle's (default: the bundle's)."""
    stop_after_fallbacks: int | None = None
    """Stop the loop (stop action first) after this many fallback ticks in a row; None: never."""


class ActionGuard:
    """:class:`Guards` resolved for one action space: ``low``/``high`` are [d] arrays for
    continuous actions, None for ``num_actions`` discrete ones."""

    def __init__(self, guards: Guards, *, period_s: float, low=None, high=None, num_actions: int | None = None):
        self.guards = guards
        self.continuous = low is not None
        if self.continuous:
            bundle_low, bundle_high = np.asarray(low, np.float64), np.asarray(high, np.float64)
            self.low = self._vector(guards.low, "low", bundle_low)
            self.high = self._vector(guards.high, "high", bundle_high)
            if (self.low < bundle_low).any() or (self.high > bundle_high).any() or (self.low > self.high).any():
                raise ConfigError(f"the action bounds must lie within the bundle's (low {bundle_low.tolist()}, high "
                                  f"{bundle_high.tolist()}) with low <= high; got low {self.low.tolist()}, high "
                                  f"{self.high.tolist()}")
            self.max_change = None if guards.max_change is None else self._vector(guards.max_change, "max_change")
            if self.max_change is not None and not (self.max_change > 0).all():
                raise ConfigError(f"max_change must be > 0 in every dimension, got {self.max_change.tolist()}")
            self.neutral = np.where((self.low <= 0) & (self.high >= 0), 0.0, (self.low + self.high) / 2)
        else:
            self.num_actions, self.low = num_actions, None
            for name in ("max_change", "low", "high"):
                if getattr(guards, name) is not None:
                    raise ConfigError(f"{name} applies to continuous actions; this policy's are discrete")
            self.neutral = 0
        self.fallback = self._choice(guards.fallback, "fallback")
        self.stop = self._choice(guards.stop_action, "stop_action")
        if guards.max_age_ms is not None and not guards.max_age_ms > 0:
            raise ConfigError(f"max_age_ms must be > 0, got {guards.max_age_ms}")
        self.max_age_s = 2 * period_s if guards.max_age_ms is None else guards.max_age_ms / 1000.0
        if guards.stop_after_fallbacks is not None and guards.stop_after_fallbacks < 1:
            raise ConfigError(f"stop_after_fallbacks must be >= 1, got {guards.stop_after_fallbacks}")

    def _vector(self, value, name: str, default: np.ndarray | None = None) -> np.ndarray:
        """One value for every dimension, or one each, as a [d] array (``default`` for None)."""
        if value is None:
            return default.copy()
        size = len(default if default is not None else self.low)
        vector = np.asarray(value, np.float64).reshape(-1)
        if vector.size == 1:
            vector = np.full(size, vector[0])
        if vector.size != size or not np.isfinite(vector).all():
            raise ConfigError(f"{name} must be one finite value or {size} (one per action dimension), got "
                              f"{np.asarray(value).tolist()}")
        return vector

    def _choice(self, value: ActionChoice, name: str):
        """"hold" stays a word (resolved each tick); "neutral" and actions become actions."""
        if isinstance(value, str):
            if value == "hold":
                return "hold"
            if value == "neutral":
                return self.neutral
            raise ConfigError(f"{name} must be 'hold', 'neutral' or an action, got {value!r}")
        if not self.continuous:
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
                    or not 0 <= value < self.num_actions:
                raise ConfigError(f"{name} must be 'hold', 'neutral' or an action in 0..{self.num_actions - 1}, "
                                  f"got {value!r}")
            return int(value)
        action = self._vector(value, name, self.low)
        if (action < self.low).any() or (action > self.high).any():
            raise ConfigError(f"{name} {action.tolist()} lies outside the action bounds (low {self.low.tolist()}, "
                              f"high {self.high.tolist()})")
        return action

    # --- per tick ---

    def fallback_action(self, last):
        """The fallback, given the last action sent (None before the first)."""
        return _resolve(self.fallback, last, self.neutral)

    def stop_action(self, last):
        """The stop action, given the last action sent (None before the first)."""
        return _resolve(self.stop, last, self.neutral)

    def limit(self, action, last) -> tuple[object, bool, bool]:
        """``action`` within the rate limit from ``last`` (None: nothing sent yet, taken as
        neutral) and within the bounds -> (action sent, rate-limited?, clipped to bounds?)."""
        if not self.continuous:
            return int(action), False, False
        action = np.asarray(action, np.float64)
        rate_limited = False
        if self.max_change is not None:
            reference = self.neutral if last is None else last
            limited = np.minimum(np.maximum(action, reference - self.max_change), reference + self.max_change)
            rate_limited = bool((limited != action).any())
            action = limited
        bounded = np.minimum(np.maximum(action, self.low), self.high)
        return bounded, rate_limited, bool((bounded != action).any())

    def finite(self, action) -> bool:
        return not self.continuous or bool(np.isfinite(action).all())

    def describe(self) -> str:
        """One line of the settings in force (the tick log's header and ``ez-robot run`` print it)."""
        words = lambda v: v if isinstance(v, str) else np.asarray(v).round(4).tolist()  # noqa: E731
        parts = [f"fallback {words(self.guards.fallback)}", f"stop action {words(self.guards.stop_action)}",
                 f"max age {self.max_age_s * 1000:.1f} ms"]
        if self.continuous:
            parts.append("no rate limit" if self.max_change is None else
                         f"max change {words(self.max_change)} per tick")
        if self.guards.stop_after_fallbacks:
            parts.append(f"stop after {self.guards.stop_after_fallbacks} fallbacks in a row")
        return ", ".join(parts)


def _resolve(choice, last, neutral):
    if isinstance(choice, str):  # "hold"
        return neutral if last is None else last
    return choice


def parse_numbers(text: str, name: str) -> list[float]:
    """A command-line vector: numbers separated by commas (one for every dimension, or one each)."""
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        raise ConfigError(f"{name} takes numbers separated by commas, got {text!r}") from None
    if not all(math.isfinite(v) for v in values):
        raise ConfigError(f"{name} takes finite numbers, got {text!r}")
    return values


def parse_action(text: str, name: str):
    """A command-line action choice: "hold", "neutral", or numbers separated by commas."""
    text = text.strip()
    if text in ("hold", "neutral"):
        return text
    if text.lstrip("-").isdigit():
        return int(text)  # a discrete action, or one value for every dimension
    try:
        return parse_numbers(text, name)
    except ConfigError:
        raise ConfigError(f"{name} takes 'hold', 'neutral' or an action (numbers separated by commas), "
                          f"got {text!r}") from None
