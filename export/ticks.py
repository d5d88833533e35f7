"""The tick log: one JSON line per tick of the control loop, and its summary
(``ez-robot report --ticks FILE``).  Standard library and numpy only.

The first line is a header::

    {"format": "ez-robot-ticks", "version": 1, "rate_hz": 50.0, "task": "...", "guards": "...", "started": "..."}

then one line per tick, in order::

    {"tick": 0, "episode": 0, "t": 0.0201, "age_ms": 0.03, "decision_ms": 1.84, "simulations": 12,
     "fallback": null, "detail": null, "rate_limited": false, "bounded": false, "overrun": false,
     "action": [0.12, -0.4]}

``t`` is seconds from the loop's start to the write; ``age_ms`` the reading's age when
the tick took it (null without a reading); ``decision_ms`` and ``simulations`` null on a
tick that did not search; ``fallback`` the reason a fallback action was sent (one of
:data:`ez_robot.export.guards.FALLBACK_REASONS`) and ``detail`` its particulars;
``rate_limited`` / ``bounded`` whether the rate limit / the bounds changed the action;
``overrun`` whether the tick ended after its period; ``action`` what was sent.  The last
line, where the loop stopped cleanly, is ``{"stop": reason, "t": ..., "action": [...]}``
with the stop action.
"""
from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import numpy as np

from ez_robot.errors import ConfigError, RunError

__all__ = ["TickLog", "summarize_ticks", "format_summary", "FORMAT"]

FORMAT = "ez-robot-ticks"
VERSION = 1
_ENCODER = json.JSONEncoder(separators=(",", ":"))  # one encoder: json.dumps with options makes one per call


class TickLog:
    """Writes a tick log; lines reach the file at least once a second and at ``close``."""

    def __init__(self, path: str | Path, header: dict):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 - closed by close()
        except OSError as error:
            raise ConfigError(f"cannot write the tick log at {self.path}: {error.strerror or error}") from None
        self._write({"format": FORMAT, "version": VERSION, **header})
        self._flushed = time.monotonic()

    def tick(self, row: dict) -> None:
        self._write(row)
        now = time.monotonic()
        if now - self._flushed > 1.0:
            self._file.flush()
            self._flushed = now

    def _write(self, row: dict) -> None:
        self._file.write(_ENCODER.encode(row) + "\n")

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


def action_json(action) -> list | int:
    """An action as the log writes it: a list of floats (6 significant digits) or an int."""
    if isinstance(action, (int, np.integer)):
        return int(action)
    return [float(f"{v:.6g}") for v in np.asarray(action, np.float64).reshape(-1)]


# --- reading and summarizing ----------------------------------------------------------------

def read_ticks(path: str | Path) -> tuple[dict, list[dict], dict | None]:
    """(header, tick rows, stop line or None) of a tick log, or a :class:`RunError` naming the problem."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise RunError(f"no tick log at {path}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise RunError(f"cannot read the tick log {path}: {error}") from None
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if number == len(lines) > 1:  # a last line cut short where the process was killed
                break
            raise RunError(f"{path} line {number} is not JSON: not a tick log written by `ez-robot run`") from None
    if not rows or not isinstance(rows[0], dict) or rows[0].get("format") != FORMAT:
        raise RunError(f"{path} is not a tick log written by `ez-robot run` (no {FORMAT!r} header)")
    header, rows = rows[0], rows[1:]
    if header.get("version") != VERSION:
        raise RunError(f"{path} is a tick log of version {header.get('version')}; this ez-robot reads version "
                       f"{VERSION}")
    stop = rows.pop() if rows and "stop" in rows[-1] else None
    if not all(isinstance(row, dict) and "tick" in row for row in rows):
        raise RunError(f"{path} holds lines that are not ticks")
    return header, rows, stop


def summarize_ticks(path: str | Path) -> dict:
    """The figures of a tick log: ticks, rate achieved, decision times, fallbacks by reason,
    rate-limit and bound clips, missed deadlines (ticks that overran), how it stopped."""
    header, rows, stop = read_ticks(path)
    decisions = np.asarray([r["decision_ms"] for r in rows if r.get("decision_ms") is not None], np.float64)
    ages = np.asarray([r["age_ms"] for r in rows if r.get("age_ms") is not None], np.float64)
    simulations = [r["simulations"] for r in rows if r.get("simulations") is not None]
    spans, counts = [], []  # per episode: achieved rate over the ticks, resets left out
    for episode in sorted({r.get("episode", 0) for r in rows}):
        times = [r["t"] for r in rows if r.get("episode", 0) == episode]
        if len(times) > 1:
            spans.append(times[-1] - times[0])
            counts.append(len(times) - 1)
    pct = lambda a, q: float(np.percentile(a, q)) if a.size else None  # noqa: E731
    return {
        "path": str(path), "task": header.get("task"), "rate_hz": header.get("rate_hz"), "guards": header.get("guards"),
        "ticks": len(rows), "episodes": len({r.get("episode", 0) for r in rows}),
        "achieved_hz": sum(counts) / sum(spans) if sum(spans) > 0 else None,
        "decisions": int(decisions.size), "decision_p50_ms": pct(decisions, 50), "decision_p99_ms": pct(decisions, 99),
        "age_p50_ms": pct(ages, 50), "age_p99_ms": pct(ages, 99),
        "simulations_mean": float(np.mean(simulations)) if simulations else None,
        "fallbacks": dict(Counter(r["fallback"] for r in rows if r.get("fallback"))),
        "rate_limited": sum(bool(r.get("rate_limited")) for r in rows),
        "bounded": sum(bool(r.get("bounded")) for r in rows),
        "missed_deadlines": sum(bool(r.get("overrun")) for r in rows),
        "stop": None if stop is None else stop["stop"],
    }


def format_summary(summary: dict) -> str:
    """The summary as a few lines of text."""
    ms = lambda v: "-" if v is None else f"{v:.2f} ms"  # noqa: E731
    rate = "-" if summary["achieved_hz"] is None else f"{summary['achieved_hz']:.1f} Hz"
    target = f" (target {summary['rate_hz']:.1f} Hz)" if summary.get("rate_hz") else ""
    fallbacks = summary["fallbacks"]
    reasons = ", ".join(f"{reason} {n}" for reason, n in sorted(fallbacks.items(), key=lambda kv: -kv[1]))
    lines = [
        f"{summary['path']}: {summary['task'] or 'a run'}, {summary['ticks']} ticks in {summary['episodes']} "
        f"episode(s) at {rate}{target}",
        f"decisions: {summary['decisions']}, p50 {ms(summary['decision_p50_ms'])}, p99 {ms(summary['decision_p99_ms'])}"
        + ("" if summary["simulations_mean"] is None else f"; simulations per decision: mean "
                                                          f"{summary['simulations_mean']:.1f}"),
        f"observation age: p50 {ms(summary['age_p50_ms'])}, p99 {ms(summary['age_p99_ms'])}",
        f"fallbacks: {sum(fallbacks.values())}" + (f" ({reasons})" if reasons else ""),
        f"rate-limit clips: {summary['rate_limited']}; bound clips: {summary['bounded']}; missed deadlines: "
        f"{summary['missed_deadlines']}",
        "stopped: " + (summary["stop"] or "no stop line (the process was killed, or is still running)"),
    ]
    if summary.get("guards"):
        lines.append(f"guards: {summary['guards']}")
    return "\n".join(lines)
