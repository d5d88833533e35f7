"""The guarded fixed-rate control loop around the onboard runtime (what ``ez-robot run``
drives).  Torch is not involved.

Each tick: read the robot's sensors, decide with the time left in the tick as the search
deadline (less a margin and the robot's own write time, measured as the loop runs),
guard the action (:mod:`ez_robot.export.guards`), write it, log the tick, then wait for
the next tick.  A tick that overruns its period counts as a missed deadline, and the
schedule restarts from now rather than bursting to catch up.

The watchdog: a reading older than ``max_age_ms``, a read that raises, returns NaN or
infinite values or has not returned by the tick's end (a stalled sensor, read on a
thread of its own), an observation the runtime refuses, or a decision not ready by the
tick's end, sends the fallback action instead, and the tick log says why.  Nothing of
these raises.  The loop ends on the robot's ``done``, after its episodes, on Ctrl-C or
SIGTERM, after ``stop_after_fallbacks`` fallbacks in a row, or on an error; whichever it
is, it writes the stop action first, then calls the robot's ``stop()`` and the
``on_stop(reason)`` hook, and an error is raised again only after that.
"""
from __future__ import annotations

import itertools
import math
import queue
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ez_robot.errors import ConfigError, ObservationError
from ez_robot.export.guards import ActionGuard, Guards
from ez_robot.export.robot import Robot
from ez_robot.export.runtime import Policy
from ez_robot.export.ticks import TickLog, action_json
from ez_robot.video import VideoWriter

__all__ = ["LoopReport", "run_loop", "VideoRecorder"]


@dataclass
class LoopReport:
    rate_hz: float
    """The target control rate."""
    returns: list = field(default_factory=list)
    """Return of each episode (where the robot knows its reward: a simulator)."""
    decisions: int = 0
    """Ticks: actions sent, searched or fallback (the stop action not counted)."""
    missed_deadlines: int = 0
    """Ticks that ended after their period (decision plus write)."""
    decision_ms: list = field(default_factory=list)
    """Wall time of each search (observation in, action out)."""
    simulations: list = field(default_factory=list)
    """Simulations each search ran before its deadline."""
    control_seconds: float = 0.0
    """Wall time from each episode's first tick to its end (resets excluded)."""
    fallbacks: Counter = field(default_factory=Counter)
    """Fallback ticks by reason (:data:`ez_robot.export.guards.FALLBACK_REASONS`)."""
    rate_limited: int = 0
    """Ticks whose action the rate limit changed."""
    stop_reason: str = ""
    """Why the loop stopped: "end", "SIGINT", "SIGTERM", "N fallbacks in a row ...", "error: ..."."""
    ticks_path: Path | None = None
    """The tick log, where one was written."""

    @property
    def achieved_hz(self) -> float:
        return self.decisions / self.control_seconds if self.control_seconds > 0 else 0.0

    def summary(self) -> str:
        ms = np.asarray(self.decision_ms or [0.0])
        sims = np.asarray(self.simulations or [0])
        returns = f"{len(self.returns)} episode(s), mean return {np.mean(self.returns):.2f}; " if self.returns else ""
        reasons = ", ".join(f"{reason} {n}" for reason, n in self.fallbacks.most_common())
        return (f"{returns}{self.decisions} decisions "
                f"at {self.achieved_hz:.1f} Hz (target {self.rate_hz:.1f} Hz), {self.missed_deadlines} missed "
                f"deadline(s); decision p50 {np.percentile(ms, 50):.2f} ms, p99 {np.percentile(ms, 99):.2f} ms; "
                f"simulations per decision: mean {sims.mean():.1f}, min {sims.min()}\n"
                f"fallbacks: {sum(self.fallbacks.values())}{f' ({reasons})' if reasons else ''}; rate-limit clips: "
                f"{self.rate_limited}; stopped: {self.stop_reason}")


def run_loop(policy: Policy, robot: Robot, *, rate_hz: float, guards: Guards | None = None,
             episodes: int | None = 1, margin_ms: float = 1.0, ticks: str | Path | None = None,
             on_stop: Callable[[str], None] | None = None, handle_signals: bool = True) -> LoopReport:
    """Drives ``robot`` with ``policy`` at ``rate_hz`` for ``episodes`` episodes (None: until
    the robot is done or the loop is stopped), guarded by ``guards`` (default
    :class:`Guards`()), logging every tick to ``ticks`` (a JSON-lines file) where given.

    ``handle_signals``: SIGINT and SIGTERM stop the loop cleanly (where it runs on the main
    thread); the report's ``stop_reason`` names the signal."""
    if not (rate_hz > 0 and math.isfinite(rate_hz)):
        raise ConfigError(f"the control rate must be a number of Hz > 0, got {rate_hz}")
    if episodes is not None and episodes < 1:
        raise ConfigError(f"episodes must be >= 1 (or None: until stopped), got {episodes}")
    guards = guards or Guards()
    guard = ActionGuard(guards, period_s=1.0 / rate_hz, low=policy.action_low, high=policy.action_high,
                        num_actions=None if policy.continuous else policy.num_actions)
    # onnxruntime's first run of a session is slow (it allocates): one search before the first
    # tick, on a generator of its own so that the policy's candidate draws stay as they were
    policy.search(np.zeros((1, *policy.observation_shape), policy.observation_dtype), num_simulations=1,
                  rng=np.random.default_rng(0))
    log = None if ticks is None else TickLog(ticks, {"rate_hz": rate_hz, "task": policy.task,
                                                     "guards": guard.describe()})
    return _Loop(policy, robot, guard, rate_hz, margin_ms, log, handle_signals).run(episodes, on_stop)


class _Loop:
    def __init__(self, policy: Policy, robot: Robot, guard: ActionGuard, rate_hz: float, margin_ms: float,
                 log: TickLog | None, handle_signals: bool):
        self.policy, self.robot, self.guard, self.log = policy, robot, guard, log
        self.period, self.margin_ms = 1.0 / rate_hz, margin_ms
        self.report = LoopReport(rate_hz, ticks_path=None if log is None else log.path)
        self.signals = _StopSignals(handle_signals)
        self.stop_reason: str | None = None  # set by the loop itself (fallbacks in a row)
        self.last = None  # the last action sent
        self.fallbacks_in_a_row = 0
        self.write_s = 0.0  # running estimate of one write (a simulator's step), kept out of the search budget
        self.sensors = _SensorThread(robot.read) if robot.blocking_read else None
        self.start = time.perf_counter()

    @property
    def stop_requested(self) -> bool:
        return self.signals.received is not None or self.stop_reason is not None

    def run(self, episodes: int | None, on_stop) -> LoopReport:
        reason = "end"
        with self.signals as signals:
            try:
                for episode in range(episodes) if episodes is not None else itertools.count():
                    self.robot.begin(episode)
                    self.last = None  # an episode starts at rest: the rate limit counts from neutral
                    self.episode(episode)
                    if self.robot.episode_return is not None:
                        self.report.returns.append(self.robot.episode_return)
                    if self.stop_requested:
                        break
                reason = self.stop_reason or signals.received or "end"
            except KeyboardInterrupt:  # signals not handled here (handle_signals=False)
                reason = "SIGINT"
                raise
            except BaseException as error:
                reason = f"error: {type(error).__name__}: {error}"
                raise
            finally:
                self.stop(reason, on_stop)
        return self.report

    def episode(self, episode: int) -> None:
        tick = first = time.perf_counter()
        while not self.robot.done and not self.stop_requested:
            tick_end = tick + self.period
            row = self.tick(episode, tick_end)
            if row is None:  # a stop came while deciding: the stop action goes next, not this one
                break
            now = time.perf_counter()
            overrun = now > tick_end
            self.report.missed_deadlines += overrun
            if self.log is not None:
                row["overrun"] = overrun
                self.log.tick(row)
            if overrun:
                tick = now
            else:
                time.sleep(tick_end - now)
                tick = tick_end
        self.report.control_seconds += time.perf_counter() - first

    def tick(self, episode: int, tick_end: float) -> dict | None:
        # --- sense: a fresh, finite reading, or the reason there is none ---
        # (a margin longer than half the tick would leave a read no time at all)
        observation, age_ms, fallback, detail = self.sense(tick_end - min(self.margin_ms / 1000.0, self.period / 2))
        # --- decide within the tick ---
        decision = None
        if fallback is None and not self.signals.received:
            budget_ms = (tick_end - self.write_s - time.perf_counter()) * 1000.0 - self.margin_ms
            try:
                decision = self.policy.decide(observation[None], deadline_ms=max(budget_ms, 0.0))
            except ObservationError as error:
                fallback, detail = "bad_observation", str(error)
            else:
                self.report.decision_ms.append(decision.elapsed_ms)
                self.report.simulations.append(int(decision.simulations[0]))
                if time.perf_counter() > tick_end:
                    fallback, detail = "deadline", f"decided in {decision.elapsed_ms:.2f} ms"
                elif not self.guard.finite(decision.actions[0]):
                    fallback, detail = "bad_action", f"{decision.actions[0].tolist()}"
        if self.signals.received:
            return None
        # --- guard: the fallback where needed, then the rate limit and the bounds ---
        proposed = self.guard.fallback_action(self.last) if fallback else decision.actions[0]
        action, rate_limited, bounded = self.guard.limit(proposed, self.last)
        # --- act ---
        written = time.perf_counter()
        self.robot.write(action)
        done = time.perf_counter()
        self.write_s = 0.8 * self.write_s + 0.2 * (done - written)
        self.last = action
        self.count(fallback, rate_limited)
        return {"tick": self.report.decisions - 1, "episode": episode, "t": round(done - self.start, 5),
                "age_ms": None if age_ms is None else round(age_ms, 3),
                "decision_ms": None if decision is None else round(decision.elapsed_ms, 3),
                "simulations": None if decision is None else int(decision.simulations[0]),
                "fallback": fallback, "detail": detail, "rate_limited": rate_limited, "bounded": bounded,
                "action": action_json(action)}

    def sense(self, give_up: float):
        """-> (observation, age in ms, fallback reason, detail); the reason None for a good reading."""
        if self.sensors is None:
            try:
                reading = self.robot.read()
            except Exception as error:  # noqa: BLE001 - whatever the driver raises
                return None, None, "sensor_error", f"{type(error).__name__}: {error}"
        else:
            result = self.sensors.read(give_up - time.perf_counter())
            if result is None:
                return None, None, "sensor_stalled", "no reading by the tick's end"
            reading, error = result
            if error is not None:
                return None, None, "sensor_error", f"{type(error).__name__}: {error}"
        age_ms = (time.monotonic() - reading.stamp) * 1000.0
        if not age_ms <= self.guard.max_age_s * 1000.0:  # a NaN stamp is stale too
            return None, age_ms, "stale", f"{age_ms:.1f} ms old"
        observation = reading.observation
        try:
            if isinstance(observation, dict):
                observation = self.policy.flatten(observation)
            observation = np.asarray(observation)
        except ObservationError as error:
            return None, age_ms, "bad_observation", str(error)
        if observation.dtype.kind == "f" and not np.isfinite(observation).all():
            return None, age_ms, "non_finite", f"{int((~np.isfinite(observation)).sum())} non-finite value(s)"
        return observation, age_ms, None, None

    def count(self, fallback: str | None, rate_limited: bool) -> None:
        self.report.decisions += 1
        self.report.rate_limited += rate_limited
        if fallback is None:
            self.fallbacks_in_a_row = 0
            return
        self.report.fallbacks[fallback] += 1
        self.fallbacks_in_a_row += 1
        limit = self.guard.guards.stop_after_fallbacks
        if limit is not None and self.fallbacks_in_a_row >= limit:
            self.stop_reason = f"{self.fallbacks_in_a_row} fallbacks in a row (the last: {fallback})"

    def stop(self, reason: str, on_stop) -> None:
        """The stop action first, then the robot's own stop, then the hook; a failure to
        write the stop action is raised after the robot's stop ran."""
        action = self.guard.stop_action(self.last)
        failure = None
        try:
            self.robot.write(action)
            self.last = action
        except Exception as error:  # noqa: BLE001 - raised below, after robot.stop()
            failure, reason = error, f"{reason}; the stop action failed: {type(error).__name__}: {error}"
        try:
            self.robot.stop()
        finally:
            self.report.stop_reason = reason
            if self.sensors is not None:
                self.sensors.close()
            if self.log is not None:
                self.log.tick({"stop": reason, "t": round(time.perf_counter() - self.start, 5),
                               "action": action_json(action)})
                self.log.close()
        if on_stop is not None:
            on_stop(reason)
        if failure is not None:
            raise failure


class _SensorThread:
    """Calls ``read`` on a thread of its own, so that a read that blocks cannot hold the
    loop past its tick: a read still running at the tick's end is a stalled sensor, and
    its reading, when it comes, is the next tick's (checked for age like any other)."""

    def __init__(self, read: Callable):
        self._read = read
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._results: queue.SimpleQueue = queue.SimpleQueue()
        self._pending = False
        threading.Thread(target=self._serve, name="ez-robot-sensors", daemon=True).start()

    def _serve(self) -> None:
        while self._requests.get():
            try:
                self._results.put((self._read(), None))
            except Exception as error:  # noqa: BLE001 - handed to the loop, which falls back
                self._results.put((None, error))

    def read(self, timeout: float):
        """(reading, None) or (None, error), or None where the read has not returned in ``timeout`` s."""
        if not self._pending:
            self._requests.put(True)
            self._pending = True
        try:
            result = self._results.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            return None
        self._pending = False
        return result

    def close(self) -> None:
        self._requests.put(False)


class _StopSignals:
    """SIGINT and SIGTERM set ``received`` (the loop stops within a tick, stop action first)
    instead of raising in the middle of a write; the handlers before are put back after.

    The handler only sets an attribute: one that took a lock (``threading.Event.set``)
    could wait forever on a lock its own thread holds where the signal came."""

    SIGNALS = ("SIGINT", "SIGTERM")

    def __init__(self, enabled: bool):
        self.received: str | None = None
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self._previous: dict = {}

    def _handle(self, signum, frame) -> None:
        self.received = signal.Signals(signum).name

    def __enter__(self) -> "_StopSignals":
        if self.enabled:
            for name in self.SIGNALS:
                number = getattr(signal, name)
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for number, handler in self._previous.items():  # None: a handler set outside Python
            signal.signal(number, signal.SIG_DFL if handler is None else handler)


class VideoRecorder:
    """An ``on_step`` for :class:`ez_robot.export.robot.SimulatedRobot`: writes one
    episode's frames (what :func:`ez_robot.envs.render_frame` shows of a simulated env)
    to an mp4 file."""

    def __init__(self, path: str | Path, fps: float, episode: int = 0):
        self.path, self.fps, self.episode = Path(path), fps, episode
        self._writer: VideoWriter | None = None

    def __call__(self, episode: int, env) -> None:
        if episode != self.episode:
            return
        # a simulated env's renderer: recording needs the env's own packages, never the runtime
        from ez_robot.envs import render_frame

        frame = render_frame(env)
        if self._writer is None:
            self._writer = VideoWriter(self.path, self.fps)
        self._writer.add(frame)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
