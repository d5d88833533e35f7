"""Ray as the launcher: connecting to a cluster or starting an embedded one, and the
resources each of a run's actors asks for.  Nothing here knows what the actors do
(:mod:`ez_robot.ray_workers`) or how a run is driven (:mod:`ez_robot.ray_trainer`).
"""
from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass

import ray

from ez_robot.errors import ClusterUnreachable

__all__ = ["init_ray", "resource_shortfall", "default_reanalyze_workers", "Placement"]

MAX_DEFAULT_REANALYZE_WORKERS = 8


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """Fails fast where nothing listens at ``host:port`` (or ``ray://host:port``): Ray's own
    client retries an unreachable address for minutes before it gives up."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        raise ClusterUnreachable(f"--address {address!r} is not auto, host:port or ray://host:port")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as error:
        raise ClusterUnreachable(f"no Ray cluster answers at {address} ({error.strerror or error}); start one "
                                 "there (`ray start --head`), or leave out --address for an embedded local Ray") \
            from None


def init_ray(address: str | None = None, num_cpus: int | None = None) -> bool:
    """Connects to a cluster (``address``: ``auto``, ``host:port`` or ``ray://host:port``),
    or starts an embedded local one.  Returns whether it started Ray (and so should shut
    it down).

    The embedded Ray runs Ray's own head processes (GCS, raylet, log and autoscaler
    monitors, and its API server ``dashboard.py``, which Ray always starts; with
    ``include_dashboard=False`` it serves no web UI), without an auth token or usage
    statistics, and stops with the run."""
    if ray.is_initialized():
        return False
    if address is None:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        # address="local": always a new embedded instance, never one that RAY_ADDRESS or an
        # earlier `ray start` points at (joining a cluster is what --address is for)
        ray.init(address="local", num_cpus=num_cpus or os.cpu_count(), include_dashboard=False,
                 logging_level=logging.WARNING)
    else:
        if address != "auto":
            _check_reachable(address)
        try:
            ray.init(address=address, logging_level=logging.WARNING)
        except ConnectionError as error:  # "auto" with no cluster running on this machine
            raise ClusterUnreachable(f"could not join a Ray cluster at --address {address}: {error}") from None
    return True


def resource_shortfall(needed: dict[str, float], available: dict[str, float]) -> str | None:
    """What a run's actors ask for beyond what a cluster has free, in words (``None`` when
    it fits).  Ray places actors only when their resources free up, and says nothing while
    they wait."""
    short = [f"{amount:g} {kind} (free: {available.get(kind, 0.0):g})" for kind, amount in needed.items()
             if amount > available.get(kind, 0.0) + 1e-9]  # nothing asked (0 GPUs) is never short
    if not short:
        return None
    return (f"the Ray cluster lacks free resources for this run: it needs {', '.join(short)}; its workers "
            "wait until Ray can place them (stop other jobs there, add nodes, or use fewer --workers / "
            "--reanalyze-workers)")


def default_reanalyze_workers() -> int:
    """One reanalyze worker per CPU Ray has, at most 8: reanalyze searches the whole batch
    with the target network every training step and is most of a run's compute (93% of
    a single-process cartpole_swingup run), while self-play mostly waits on the learner."""
    cpus = int(ray.cluster_resources().get("CPU", 1))
    return max(1, min(cpus, MAX_DEFAULT_REANALYZE_WORKERS))


@dataclass(frozen=True)
class Placement:
    """Ray resource requests of a run's actors.  Compute actors (self-play, reanalyze,
    learner) take one CPU each (an embedded Ray divides the machine's CPUs among them);
    the learner, the reanalyze workers and evaluation share the GPUs; self-play stays on
    CPU.  Storage and replay are bookkeeping and take none."""

    cpu: float
    """CPUs per compute actor."""
    gpu: float
    """GPUs per learner, reanalyze worker and evaluation."""

    @classmethod
    def plan(cls, workers: int, reanalyze_workers: int, gpus: float, local: bool) -> "Placement":
        compute = workers + reanalyze_workers + 1
        cpu = min(1.0, (os.cpu_count() or 1) / compute) if local else 1.0
        return cls(cpu=cpu, gpu=gpus / (reanalyze_workers + 2) if gpus else 0.0)

    @property
    def device(self) -> str:
        """Where the learner and reanalyze inference run."""
        return "cuda" if self.gpu else "cpu"

    def compute(self) -> dict:
        """Options of a learner or reanalyze actor (and evaluation tasks)."""
        return {"num_cpus": self.cpu, **({"num_gpus": self.gpu} if self.gpu else {})}

    def selfplay(self) -> dict:
        return {"num_cpus": self.cpu}

    def evaluation(self) -> dict:
        """An evaluation task reserves no CPU: the compute actors hold them all, and it is short."""
        return {"num_cpus": 0, **({"num_gpus": self.gpu} if self.gpu else {})}

    def warn_if_short(self, workers: int, reanalyze_workers: int) -> None:
        """On a shared cluster: says when the run asks for more than is free."""
        needed = {"CPU": (workers + reanalyze_workers + 1) * self.cpu, "GPU": (reanalyze_workers + 1) * self.gpu}
        warning = resource_shortfall(needed, ray.available_resources())
        if warning:
            logging.getLogger(__name__).warning(warning)
