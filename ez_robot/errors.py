"""The errors ez-robot raises for problems a user can fix.

Every one of them derives from :class:`EzRobotError`, and its message says what is wrong
and what to do.  The command line prints these as one line; any other exception is a
bug in ez-robot (or in a user's own code) and keeps its traceback.

This module imports nothing beyond the standard library: the onboard runtime uses it
on robots without torch.
"""
from __future__ import annotations

__all__ = ["EzRobotError", "ConfigError", "UnknownTaskError", "RunError", "EnvironmentFailed", "EnvValueError",
           "TrainingAborted", "ClusterUnreachable", "ExportError", "BundleError", "ObservationError",
           "UntrustedTaskError"]


class EzRobotError(Exception):
    """A problem with what a user asked for or gave ez-robot (the message says what to do)."""


class ConfigError(EzRobotError, ValueError):
    """A configuration mistake: unknown key, bad value, bad budget, a device that is not there."""


class UnknownTaskError(ConfigError):
    """The task name is not in the registry (the message names the closest ones)."""


class RunError(EzRobotError):
    """A run directory, checkpoint or stored replay that cannot be used."""


class EnvironmentFailed(EzRobotError):
    """An environment kept raising after being made again; the run stops."""


class EnvValueError(EnvironmentFailed):
    """An env returned a NaN or infinite observation or reward; the message names the env,
    the step and the field.  The run stops: no search or training step can use it."""


class TrainingAborted(EzRobotError):
    """A run that cannot go on: a worker that could not be kept alive, or nothing left to
    train on."""


class ClusterUnreachable(EzRobotError, ConnectionError):
    """No Ray cluster answers at the address given."""


class ExportError(EzRobotError):
    """A bundle failed its checks against torch and was not written."""


class BundleError(EzRobotError):
    """A bundle that cannot be used: missing, corrupt, tampered with, or from an
    incompatible ez-robot."""


class ObservationError(EzRobotError, ValueError):
    """An observation of the wrong shape or dtype, or with NaN / infinite values."""


class UntrustedTaskError(EzRobotError):
    """A run's saved config or a bundle's manifest names a factory task (``module:factory``,
    ``file.py:factory``), which would import that code and call it; the user has not allowed
    it (``--trust-task``, ``trust_task=True``, or the same ``--task`` given)."""
