"""The registered task suites, and the questions asked of them by task name.

:data:`SUITES` is the registry: one object per family of task names, asked in order,
the first that claims a task owning it.  Adding a suite is a class of its own (a
:class:`~ez_robot.envs.suite.Suite`, in a module of its own) and one entry here, ahead
of the factory suite, which takes every ``source:name`` left over.
"""
from __future__ import annotations

import difflib

import gymnasium as gym

from ez_robot.envs.atari import AtariSuite
from ez_robot.envs.custom import FactorySuite
from ez_robot.envs.dmc import DMControlSuite
from ez_robot.envs.gym_ids import GymSuite
from ez_robot.envs.suite import Suite
from ez_robot.errors import UnknownTaskError

__all__ = ["SUITES", "suite_for", "suite_of_env", "listed_tasks", "validate_task", "unknown_task"]

GYM = GymSuite()

SUITES: tuple[Suite, ...] = (
    DMControlSuite(),  # <domain>_<task>: names without a colon
    AtariSuite(),      # atari:<Game>
    GYM,               # gym:<id>
    FactorySuite(),    # package.module:factory, path/to/file.py:factory: last, it takes any source:name
)


def suite_for(task: str) -> Suite:
    """The suite that owns ``task`` (known to it or not: :func:`validate_task` checks)."""
    for suite in SUITES:
        if suite.claims(task):
            return suite
    raise UnknownTaskError(f"unknown task {task!r}: no suite claims it; `ez-robot tasks` lists the tasks")


def suite_of_env(env: gym.Env) -> Suite:
    """The suite that built ``env``, by its unwrapped base; a plain Gymnasium env (a
    ``gym:`` id's, a factory's, or one made by hand) is read as the ``gym:`` suite reads one."""
    return next((suite for suite in SUITES if suite.made(env)), GYM)


def listed_tasks() -> list[str]:
    """Every suite's listed tasks, in the order of :data:`SUITES`."""
    return [name for suite in SUITES for name in suite.task_names()]


def validate_task(task: str) -> Suite:
    """The suite of ``task``, or :class:`UnknownTaskError` (naming the closest names) where
    the suite does not know it (a factory: ConfigError, unless its factory can be found)."""
    suite = suite_for(task)
    if not suite.knows(task):
        raise unknown_task(task, suite)
    return suite


def unknown_task(task: str, suite: Suite) -> UnknownTaskError:
    by_lower = {name.lower(): name for name in listed_tasks() + suite.hint_names()}
    close = [by_lower[c] for c in difflib.get_close_matches(task.lower(), list(by_lower), n=3, cutoff=0.6)]
    hint = f"; did you mean: {', '.join(close)}?" if close else "; `ez-robot tasks` lists them"
    return UnknownTaskError(f"unknown task {task!r}{hint}")
