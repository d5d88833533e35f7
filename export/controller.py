"""A fixed-rate control loop around the onboard runtime (what ``ez-robot run`` drives).

Each tick: observe, decide with the time left in the tick as the search deadline (less
a margin and the environment's own step time, measured as the loop runs), act, then
sleep to the next tick.  A tick that overruns counts as a missed deadline, and the
schedule restarts from now rather than bursting to catch up.  Torch is not involved.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ez_robot.errors import ConfigError
from ez_robot.export.runtime import Policy
from ez_robot.video import VideoWriter

__all__ = ["LoopReport", "run_at_rate", "VideoRecorder"]


@dataclass
class LoopReport:
    rate_hz: float
    """The target control rate."""
    returns: list = field(default_factory=list)
    """Return of each episode."""
    decisions: int = 0
    missed_deadlines: int = 0
    """Ticks that took longer than 1 / rate_hz (decision plus environment step)."""
    decision_ms: list = field(default_factory=list)
    """Wall time of each decision (observation in, action out)."""
    simulations: list = field(default_factory=list)
    """Simulations each decision ran before its deadline."""
    control_seconds: float = 0.0
    """Wall time from each episode's first tick to its end (resets excluded)."""

    @property
    def achieved_hz(self) -> float:
        return self.decisions / self.control_seconds if self.control_seconds > 0 else 0.0

    def summary(self) -> str:
        ms = np.asarray(self.decision_ms or [0.0])
        sims = np.asarray(self.simulations or [0])
        return (f"{len(self.returns)} episode(s), mean return {np.mean(self.returns):.2f}; {self.decisions} decisions "
                f"at {self.achieved_hz:.1f} Hz (target {self.rate_hz:.1f} Hz), {self.missed_deadlines} missed "
                f"deadline(s); decision p50 {np.percentile(ms, 50):.2f} ms, p99 {np.percentile(ms, 99):.2f} ms; "
                f"simulations per decision: mean {sims.mean():.1f}, min {sims.min()}")


def run_at_rate(policy: Policy, env, *, rate_hz: float, episodes: int = 1, seed: int = 0, margin_ms: float = 1.0,
                on_step=None) -> LoopReport:
    """Plays ``episodes`` episodes of ``env`` (an ez-robot task env: it takes discrete
    action indices, or vectors in [-1, 1]^D in the sampled action modes) deciding at ``rate_hz``; ``on_step(episode, env)`` runs after each
    reset and step (a video recorder, say) and counts as environment time."""
    if not rate_hz > 0:
        raise ConfigError(f"the control rate must be > 0 Hz, got {rate_hz}")
    period = 1.0 / rate_hz
    report = LoopReport(rate_hz)
    env_seconds = 0.0  # running estimate of one environment step, kept out of the search budget
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        if on_step is not None:
            on_step(episode, env)
        total, done = 0.0, False
        tick = first_tick = time.perf_counter()
        while not done:
            budget_ms = (tick + period - env_seconds - time.perf_counter()) * 1000.0 - margin_ms
            decision = policy.decide(obs[None], deadline_ms=max(budget_ms, 0.0))
            report.decision_ms.append(decision.elapsed_ms)
            report.simulations.append(int(decision.simulations[0]))
            stepped = time.perf_counter()
            obs, reward, terminated, truncated, _ = env.step(decision.agent_actions[0])
            if on_step is not None:
                on_step(episode, env)
            env_seconds = 0.8 * env_seconds + 0.2 * (time.perf_counter() - stepped)
            total += float(reward)
            done = terminated or truncated
            report.decisions += 1
            tick += period
            now = time.perf_counter()
            if now > tick:
                report.missed_deadlines += 1
                tick = now
            else:
                time.sleep(tick - now)
        report.control_seconds += time.perf_counter() - first_tick
        report.returns.append(total)
    return report


class VideoRecorder:
    """An ``on_step`` for :func:`run_at_rate`: writes one episode's frames (what
    :func:`ez_robot.envs.render_frame` shows of a simulated env) to an mp4 file."""

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
