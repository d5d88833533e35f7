"""The onboard control loop's guards, driven through a fake robot (ez_robot.export.robot):
stale, NaN, failing and stalled sensor readings and decisions too slow for their tick each
send the fallback and are logged; no action outside the bounds or over the rate limit is
sent; the loop stops with the stop action last on SIGTERM, on an error, and after too
many fallbacks in a row; ``ez-robot report --ticks`` sums up the tick log."""
import itertools
import json
import signal
import subprocess
import sys
import time
from collections import Counter

import gymnasium as gym
import numpy as np
import pytest
from click.testing import CliRunner

from ez_robot.cli import main
from ez_robot.errors import ConfigError, RunError
from ez_robot.export.controller import run_loop
from ez_robot.export.guards import ActionGuard, Guards
from ez_robot.export.onnx_export import export_model
from ez_robot.export.robot import FakeRobot, SimulatedRobot
from ez_robot.export.runtime import Policy
from ez_robot.export.ticks import format_summary, read_ticks, summarize_ticks
from tests.cli_runner import user_error
from tests.test_export import one_torch_thread, tiny_model  # noqa: F401 - the fixture applies here too

RATE = 20.0  # a 50 ms tick: the tiny model decides in a few ms, with room for a busy machine
DIMS = 6


@pytest.fixture(scope="module")
def walker(tmp_path_factory):
    """walker_walk in the gaussian mode: 6 continuous action dimensions in [-1, 1]."""
    net, config = tiny_model("walker_walk", overrides=["env.action_mode=gaussian", "search.num_candidates=6"])
    bundle = tmp_path_factory.mktemp("walker") / "bundle"
    export_model(net, config, bundle, observations=2)
    return bundle


def assert_guarded(actions, low, high, max_change):
    """Every action but the last (the stop action) lies within the bounds and moved at most
    ``max_change`` per dimension from the one before (the first from neutral, 0 here)."""
    sent = np.asarray(actions[:-1])
    assert (sent >= low).all() and (sent <= high).all(), sent
    steps = np.abs(np.diff(np.vstack([np.zeros(DIMS), sent]), axis=0))
    assert steps.max() <= max_change + 1e-9, steps.max()


# --- the watchdog ------------------------------------------------------------------------------

def test_every_bad_reading_sends_the_fallback_within_its_tick_and_is_logged(walker, tmp_path):
    policy = Policy.load(walker)
    faults = {3: "stale", 6: "nan", 9: "error", 12: "stall"}
    robot = FakeRobot(policy.observation_shape, faults=faults, steps=24, stale_s=1.0, stall_s=0.3)
    guards = Guards(max_change=0.25, low=-0.5, high=0.5)  # fallback "hold", stop action "neutral": the defaults
    report = run_loop(policy, robot, rate_hz=RATE, guards=guards, ticks=tmp_path / "ticks.jsonl")

    header, rows, stop = read_ticks(tmp_path / "ticks.jsonl")
    assert len(rows) == report.decisions == 24 and [row["tick"] for row in rows] == list(range(24))
    reasons = {row["tick"]: row["fallback"] for row in rows if row["fallback"]}
    assert report.fallbacks == Counter(reasons.values())  # every fallback is in the log
    # each fault of a read falls back once, in the order of the reads (a machine too busy for a tick
    # may add deadlines, and a read handed over late a stall, which puts later reads on later ticks)
    assert Counter(reasons.values()) - Counter(deadline=99, sensor_stalled=99) == Counter(
        stale=1, non_finite=1, sensor_error=1)
    order = [reason for reason in reasons.values() if reason != "deadline"]
    assert order.index("stale") < order.index("non_finite") < order.index("sensor_error") < \
        len(order) - 1 - order[::-1].index("sensor_stalled")
    assert rows[min(t for t, r in reasons.items() if r == "sensor_error")]["detail"] == \
        "OSError: sensor bus timeout (read 9)"
    # the stalled read blocks 6 ticks: each of them falls back at its own end, none waits for the read
    stalled = {tick for tick, reason in reasons.items() if reason == "sensor_stalled"}
    runs = [(tick, next(end for end in itertools.count(tick) if end not in stalled) - tick)
            for tick in stalled if tick - 1 not in stalled]
    first, length = max(runs, key=lambda run: run[1])
    assert length >= 3
    times = [t for t, _ in robot.written]
    assert times[first] - times[first - 1] < 0.2
    # "hold": a fallback tick sends the action before it again
    actions = robot.actions
    for tick in set(reasons) - {0}:
        np.testing.assert_array_equal(actions[tick], actions[tick - 1])
    assert_guarded(actions, -0.5, 0.5, 0.25)
    assert report.rate_limited > 0 and any(row["bounded"] for row in rows)  # both limits were at work
    assert stop["stop"] == report.stop_reason == "end" and robot.stopped
    np.testing.assert_array_equal(actions[-1], np.zeros(DIMS))  # the stop action (neutral) last


def test_a_decision_too_slow_for_its_tick_sends_the_fallback(walker, tmp_path, monkeypatch):
    policy = Policy.load(walker)
    root = policy.networks.root

    def slow_root(observations):  # one network call longer than the 50 ms tick: the deadline is too tight
        time.sleep(0.06)
        return root(observations)

    monkeypatch.setattr(policy.networks, "root", slow_root)
    robot = FakeRobot(policy.observation_shape, steps=5, blocking_read=False)
    report = run_loop(policy, robot, rate_hz=RATE, guards=Guards(fallback=[0.3] * DIMS, max_change=0.1),
                      ticks=tmp_path / "ticks.jsonl")
    _, rows, _ = read_ticks(tmp_path / "ticks.jsonl")
    assert [row["fallback"] for row in rows] == ["deadline"] * 5 and report.fallbacks == {"deadline": 5}
    assert all(row["decision_ms"] >= 60 and row["overrun"] for row in rows)
    # the given fallback, reached within the rate limit from neutral
    expected = [[0.1] * DIMS, [0.2] * DIMS, [0.3] * DIMS, [0.3] * DIMS, [0.3] * DIMS]
    np.testing.assert_allclose(robot.actions[:5], expected)
    assert report.missed_deadlines == 5


def test_many_fallbacks_in_a_row_stop_the_loop_with_the_stop_action(walker):
    policy = Policy.load(walker)
    robot = FakeRobot(policy.observation_shape, faults={t: "stale" for t in range(3, 100)}, steps=50,
                      blocking_read=False)
    report = run_loop(policy, robot, rate_hz=RATE, guards=Guards(stop_after_fallbacks=4, stop_action=[0.1] * DIMS))
    assert report.stop_reason == "4 fallbacks in a row (the last: stale)"
    assert report.decisions <= 7 and robot.stopped  # reads 3 to 6 (a deadline missed before may stop it sooner)
    assert len(robot.written) == report.decisions + 1
    np.testing.assert_array_equal(robot.actions[-1], [0.1] * DIMS)


# --- stopping safely ---------------------------------------------------------------------------

STOP_ON_SIGTERM = """
import json, sys
from ez_robot.export.controller import run_loop
from ez_robot.export.guards import Guards
from ez_robot.export.robot import FakeRobot
from ez_robot.export.runtime import Policy

policy = Policy.load(sys.argv[1])
def ready(robot):
    if len(robot.written) == 5:
        print("running", flush=True)
robot = FakeRobot(policy.observation_shape, on_write=ready)  # never done: runs until stopped
report = run_loop(policy, robot, rate_hz=50, episodes=None, ticks=sys.argv[2],
                  guards=Guards(max_change=0.05, stop_action=[0.25] * 6), on_stop=lambda reason: print(reason))
print(json.dumps({"reason": report.stop_reason, "actions": robot.actions.tolist(), "stopped": robot.stopped}))
"""


def test_sigterm_stops_the_loop_with_the_stop_action_last(walker, tmp_path):
    ticks = tmp_path / "ticks.jsonl"
    process = subprocess.Popen([sys.executable, "-c", STOP_ON_SIGTERM, str(walker), str(ticks)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "running"
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 0, err
    hook, result = out.strip().splitlines()[-2:]
    result = json.loads(result)
    assert hook == result["reason"] == "SIGTERM" and result["stopped"]
    actions = np.asarray(result["actions"])
    assert len(actions) >= 6
    np.testing.assert_array_equal(actions[-1], [0.25] * DIMS)  # the stop action, last
    assert_guarded(actions, -1.0, 1.0, 0.05)
    _, rows, stop = read_ticks(ticks)
    assert stop["stop"] == "SIGTERM" and stop["action"] == [0.25] * DIMS and len(rows) == len(actions) - 1


def test_an_error_in_the_loop_is_raised_after_the_stop_action(walker):
    policy = Policy.load(walker)

    def driver_fault(robot):
        if len(robot.written) == 4:
            raise RuntimeError("motor driver fault")

    reasons = []
    robot = FakeRobot(policy.observation_shape, on_write=driver_fault)
    with pytest.raises(RuntimeError, match="motor driver fault"):
        run_loop(policy, robot, rate_hz=RATE, guards=Guards(stop_action=[-0.2] * DIMS), episodes=None,
                 on_stop=reasons.append)
    assert len(robot.written) == 5 and robot.stopped
    np.testing.assert_array_equal(robot.actions[-1], [-0.2] * DIMS)
    assert reasons == ["error: RuntimeError: motor driver fault"]


def test_cli_run_stops_on_sigterm_with_the_stop_action(walker, tmp_path):
    ticks = tmp_path / "ticks.jsonl"
    process = subprocess.Popen([sys.executable, "-m", "ez_robot.cli", "run", str(walker), "--rate", "50",
                                "--episodes", "5", "--simulations", "2", "--ticks", str(ticks)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not ticks.exists() or len(ticks.read_text().splitlines()) < 5):
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 128 + signal.SIGTERM, err
    assert "stopped: SIGTERM" in out and f"ticks: {ticks}" in out
    _, rows, stop = read_ticks(ticks)
    assert stop["stop"] == "SIGTERM" and stop["action"] == [0.0] * DIMS and len(rows) >= 4


# --- the simulated robot -------------------------------------------------------------------------

class _FailsOnce(gym.Wrapper):
    """Raises on the third step of all the envs made (the first episode's)."""

    steps = 0

    def step(self, action):
        _FailsOnce.steps += 1
        if _FailsOnce.steps == 3:
            raise RuntimeError("simulator fault")
        return self.env.step(action)


def test_the_simulated_robot_survives_an_env_fault(tmp_path):
    net, config = tiny_model("gym:CartPole-v1")
    export_model(net, config, tmp_path / "bundle", observations=2)
    policy = Policy.load(tmp_path / "bundle")
    _FailsOnce.steps = 0
    robot = SimulatedRobot(lambda seed: _FailsOnce(gym.make("CartPole-v1", max_episode_steps=10)), seed=3)
    report = run_loop(policy, robot, rate_hz=500, episodes=2)
    assert robot.env_errors == ["RuntimeError: simulator fault"]  # the first episode ended there
    assert len(report.returns) == 2 and report.returns[1] > 0 and report.stop_reason == "end"


# --- settings and messages -----------------------------------------------------------------------

@pytest.mark.parametrize("guards,message", [
    (Guards(fallback=[2.0] * DIMS), r"fallback \[2.0, .*\] lies outside the action bounds"),
    (Guards(max_change=[0.1, 0.2]), "max_change must be one finite value or 6"),
    (Guards(max_change=0.0), "max_change must be > 0"),
    (Guards(low=-2.0), "the action bounds must lie within the bundle's"),
    (Guards(stop_action="brake"), "stop_action must be 'hold', 'neutral' or an action"),
    (Guards(max_age_ms=-1), "max_age_ms must be > 0"),
])
def test_guard_settings_that_do_not_fit_are_named(guards, message):
    with pytest.raises(ConfigError, match=message):
        ActionGuard(guards, period_s=0.02, low=-np.ones(DIMS), high=np.ones(DIMS))


def test_discrete_actions_take_no_rate_limit_and_an_action_index():
    with pytest.raises(ConfigError, match="max_change applies to continuous actions"):
        ActionGuard(Guards(max_change=0.1), period_s=0.02, num_actions=2)
    guard = ActionGuard(Guards(fallback=1), period_s=0.02, num_actions=2)
    assert guard.fallback_action(0) == 1 and guard.stop_action(None) == 0 and guard.max_age_s == 0.04


@pytest.mark.parametrize("rate", ["0", "-5", "nan", "inf"])
def test_cli_run_refuses_a_rate_that_is_not_positive(rate):
    assert f"--rate must be a number of Hz > 0, got {float(rate):g}" in user_error("run", "bundle", "--rate", rate).stderr


def test_the_loop_refuses_a_rate_of_zero(walker):
    with pytest.raises(ConfigError, match="the control rate must be a number of Hz > 0, got 0"):
        run_loop(Policy.load(walker), FakeRobot((24,)), rate_hz=0)


# --- the tick log and its summary ----------------------------------------------------------------

def test_report_sums_up_a_tick_log(tmp_path):
    header = {"format": "ez-robot-ticks", "version": 1, "rate_hz": 100.0, "task": "walker_walk", "guards": "g"}
    rows = []
    for tick in range(11):
        rows.append({"tick": tick, "episode": 0, "t": 0.01 * tick, "age_ms": 0.5,
                     "decision_ms": None if tick in (2, 5, 7) else float(tick), "simulations": 8,
                     "fallback": {2: "stale", 5: "stale", 7: "sensor_stalled"}.get(tick), "detail": None,
                     "rate_limited": tick in (1, 4), "bounded": False, "overrun": tick == 9, "action": [0.0]})
    path = tmp_path / "ticks.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in [header, *rows, {"stop": "SIGTERM", "t": 0.2,
                                                                           "action": [0.0]}]) + "\n")
    summary = summarize_ticks(path)
    decisions = [0, 1, 3, 4, 6, 8, 9, 10]
    assert summary["ticks"] == 11 and summary["achieved_hz"] == pytest.approx(100.0)
    assert summary["decision_p50_ms"] == pytest.approx(np.percentile(decisions, 50))
    assert summary["decision_p99_ms"] == pytest.approx(np.percentile(decisions, 99))
    assert summary["fallbacks"] == {"stale": 2, "sensor_stalled": 1}
    assert (summary["rate_limited"], summary["missed_deadlines"], summary["stop"]) == (2, 1, "SIGTERM")
    out = CliRunner().invoke(main, ["report", "--ticks", str(path)])
    assert out.exit_code == 0, out.output
    assert out.output == format_summary(summary) + "\n"
    assert "11 ticks in 1 episode(s) at 100.0 Hz (target 100.0 Hz)" in out.output
    assert "fallbacks: 3 (stale 2, sensor_stalled 1)" in out.output
    assert "rate-limit clips: 2; bound clips: 0; missed deadlines: 1" in out.output


def test_a_file_that_is_not_a_tick_log_is_named(tmp_path):
    (tmp_path / "notes.txt").write_text("hello\n")
    with pytest.raises(RunError, match="is not JSON: not a tick log"):
        read_ticks(tmp_path / "notes.txt")
    assert "no tick log at" in user_error("report", "--ticks", tmp_path / "missing.jsonl").stderr


def test_the_loop_s_log_agrees_with_its_report(walker, tmp_path):
    policy = Policy.load(walker)
    robot = FakeRobot(policy.observation_shape, faults={2: "nan", 4: "stale"}, steps=8, blocking_read=False)
    report = run_loop(policy, robot, rate_hz=RATE, guards=Guards(max_change=0.05), ticks=tmp_path / "t.jsonl")
    summary = summarize_ticks(tmp_path / "t.jsonl")
    assert summary["ticks"] == report.decisions == 8 and summary["fallbacks"] == dict(report.fallbacks)
    assert summary["rate_limited"] == report.rate_limited > 0 and summary["stop"] == "end"
    assert summary["missed_deadlines"] == report.missed_deadlines
