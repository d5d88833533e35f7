"""Ray as the launcher: connecting to a cluster or starting an embedded one, and where each
of a run's actors goes on it.  Nothing here knows what the actors do
(:mod:`ez_robot.ray_workers`) or how a run is driven (:mod:`ez_robot.ray_trainer`).

A run's placement is planned here, node by node, before any actor starts
(:meth:`Placement.plan`): Ray places an actor only on one node that holds all it asks for,
and waits without a word while no node does (a run whose requests fit the cluster's total
but no single node once waited that way for good).  The plan either fits what the nodes
have free, or names what they lack.
"""
from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import socket
from dataclasses import dataclass, field

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ez_robot.errors import ClusterUnreachable, TrainingAborted

__all__ = ["init_ray", "NodeCapacity", "cluster_nodes", "alive_nodes", "default_reanalyze_workers", "Placement"]

MAX_DEFAULT_REANALYZE_WORKERS = 8
_UNIT = 10_000  # Ray counts resources in ten-thousandths; plans are made in these units, exactly


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


def _is_loopback(address: str) -> bool:
    """Whether a ``host:port`` address (``auto``: the one Ray recorded) is on this machine's
    loopback interface."""
    if address == "auto":
        try:  # where `ray start` recorded its cluster (or RAY_ADDRESS)
            from ray._private.services import get_ray_address_from_environment
            address = get_ray_address_from_environment("auto", None) or ""
        except Exception:  # noqa: BLE001 - no recorded cluster: Ray's own error comes next
            return False
    if address.startswith("ray://"):  # the client connects to what it is given
        return False
    host = address.rpartition(":")[0].strip("[]")
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name: what it resolves to
        pass
    try:
        return bool(host) and all(ipaddress.ip_address(info[4][0]).is_loopback
                                  for info in socket.getaddrinfo(host, None))
    except (OSError, ValueError):
        return False


@contextlib.contextmanager
def _driver_on_loopback(loopback: bool):
    """A driver that joins a cluster bound to 127.0.0.1 stays on 127.0.0.1.  Ray turns a
    loopback address into the machine's other address before connecting (and so its node
    IP), where nothing of such a cluster listens: it retried for minutes.  Ray reads, at
    connect time, whether it may look for another address; it may not while we connect."""
    constants = None
    if loopback:
        from ray._private import ray_constants as constants
    if constants is None or not hasattr(constants, "ENABLE_RAY_CLUSTER"):
        yield
        return
    saved, constants.ENABLE_RAY_CLUSTER = constants.ENABLE_RAY_CLUSTER, False
    try:
        yield
    finally:
        constants.ENABLE_RAY_CLUSTER = saved


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
            with _driver_on_loopback(_is_loopback(address)):
                ray.init(address=address, logging_level=logging.WARNING)
        except ConnectionError as error:  # "auto" with no cluster running on this machine
            raise ClusterUnreachable(f"could not join a Ray cluster at --address {address}: {error}") from None
    return True


# --- the nodes ----------------------------------------------------------------------------

@dataclass(frozen=True)
class NodeCapacity:
    """What one alive node has free for a run."""

    node_id: str
    address: str
    cpus: float
    gpus: float
    driver: bool = False
    """The node the driver runs on: the storage and the replay stay there."""

    @property
    def name(self) -> str:
        return f"{self.address} ({self.node_id[:6]})"


def cluster_nodes() -> list[NodeCapacity]:
    """The cluster's alive nodes and what each has free now (the head first, as Ray lists
    them)."""
    try:  # per node; Ray's public API only sums them over the cluster
        from ray._private.state import available_resources_per_node
        free = available_resources_per_node()
    except Exception:  # noqa: BLE001 - an older or newer Ray: what the nodes hold in all
        free = {}
    here = ray.get_runtime_context().get_node_id()
    return [NodeCapacity(node["NodeID"], node["NodeManagerAddress"],
                         free.get(node["NodeID"], node["Resources"]).get("CPU", 0.0),
                         free.get(node["NodeID"], node["Resources"]).get("GPU", 0.0), node["NodeID"] == here)
            for node in ray.nodes() if node["Alive"]]


def alive_nodes() -> set[str]:
    return {node["NodeID"] for node in ray.nodes() if node["Alive"]}


def default_reanalyze_workers(nodes: list[NodeCapacity]) -> int:
    """One reanalyze worker per free CPU, at most 8: reanalyze searches the whole batch
    with the target network every training step and is most of a run's compute (93% of
    a single-process cartpole_swingup run), while self-play mostly waits on the learner."""
    cpus = int(sum(node.cpus for node in nodes) + 1e-6)
    return max(1, min(cpus, MAX_DEFAULT_REANALYZE_WORKERS))


# --- the plan -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Placement:
    """Where a run's actors go and what each asks for.  Compute actors (learner, reanalyze,
    self-play) take ``cpu`` CPUs each: one where the nodes have a CPU free for each, less
    where the run has more actors than CPUs (they share them, as on an embedded Ray).  The
    learner, the reanalyze workers and evaluation share the GPUs; self-play stays on CPU.
    The storage and the replay are bookkeeping, take nothing, and stay on the driver's node
    with the learner where it can (a worker node that leaves takes none of the run's data
    with it).  Each actor is bound to its node."""

    cpu: float
    """CPUs per compute actor."""
    gpu: float
    """GPUs per learner, reanalyze worker and evaluation."""
    nodes: dict[str, str] = field(default_factory=dict)
    """Actor role (``learner``, ``reanalyze-0``, ``selfplay-0``, ``data``) -> node id."""
    names: dict[str, str] = field(default_factory=dict)
    """Node id -> how the plan names it (address and id)."""

    @classmethod
    def plan(cls, nodes: list[NodeCapacity], workers: int, reanalyze_workers: int, gpus: float) -> "Placement":
        """The placement with the largest CPU share that every node can hold, or
        :class:`TrainingAborted` naming what the cluster lacks."""
        roles = ["learner", *(f"reanalyze-{i}" for i in range(reanalyze_workers)),
                 *(f"selfplay-{i}" for i in range(workers))]
        gpu = _units(gpus / (reanalyze_workers + 2)) if gpus else 0
        free = {node.node_id: (_units(node.cpus), _units(node.gpus)) for node in nodes}
        lacking = []
        if not any(cpus for cpus, _ in free.values()):
            lacking.append("a free CPU on any node")
        if gpus and sum(gpus_ for _, gpus_ in free.values()) < _units(gpus):
            lacking.append(f"{gpus:g} free GPUs (free: {sum(node.gpus for node in nodes):g})")
        if not lacking:
            for cpu in _cpu_shares(free, len(roles)):
                assigned = _assign(nodes, free, roles, cpu, gpu)
                if assigned is not None:
                    data = next((node.node_id for node in nodes if node.driver), None)
                    return cls(cpu / _UNIT, gpu / _UNIT, {**assigned, **({"data": data} if data else {})},
                               {node.node_id: node.name for node in nodes})
            lacking.append(f"a node with both a CPU share and {gpu / _UNIT:g} GPU free for the learner and for each "
                           f"of the {reanalyze_workers} reanalyze workers")
        have = "; ".join(f"{node.name}: {node.cpus:g} CPU, {node.gpus:g} GPU free" for node in nodes) or "no node"
        raise TrainingAborted(f"the Ray cluster lacks {' and '.join(lacking)} for this run ({workers} self-play, "
                              f"{reanalyze_workers} reanalyze workers and the learner{f', {gpus:g} GPUs' if gpus else ''}"
                              f"; {have}): add nodes, free them of other jobs, or ask for fewer --workers / "
                              "--reanalyze-workers / --gpus")

    @property
    def device(self) -> str:
        """Where the learner and reanalyze inference run."""
        return "cuda" if self.gpu else "cpu"

    def options(self, role: str) -> dict:
        """Ray options of the actor ``role`` (``learner``, ``reanalyze-i``, ``selfplay-i``,
        ``data`` for the storage and the replay)."""
        if role == "data":
            options = {"num_cpus": 0}
        else:
            options = {"num_cpus": self.cpu}
            if self.gpu and not role.startswith("selfplay"):
                options["num_gpus"] = self.gpu
        if role in self.nodes:
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(self.nodes[role], soft=False)
        return options

    def evaluation(self) -> dict:
        """An evaluation task reserves no CPU (the compute actors hold them all, and it is
        short) and goes wherever Ray likes."""
        return {"num_cpus": 0, **({"num_gpus": self.gpu} if self.gpu else {})}

    def used_nodes(self) -> set[str]:
        return set(self.nodes.values())

    def describe(self) -> list[str]:
        """One line per node: the actors it holds."""
        lines = []
        for node_id, name in self.names.items():
            roles = [role for role, node in self.nodes.items() if node == node_id and role != "data"]
            if roles:
                lines.append(f"{name}: {', '.join(roles)}{' (and the replay)' if self.nodes.get('data') == node_id else ''}")
        share = f"{self.cpu:g} CPU" + (f" and {self.gpu:g} GPU" if self.gpu else "")
        return lines + [f"each takes {share}"]


def _units(amount: float) -> int:
    return int(amount * _UNIT + 1e-6)


def _cpu_shares(free: dict, actors: int) -> list[int]:
    """CPU shares to try, largest first: at most one CPU, and as large as lets the nodes
    hold all ``actors`` (a node's free CPUs divided by a whole number)."""
    shares = {min(_UNIT, cpus // k) for cpus, _ in free.values() for k in range(1, actors + 1) if cpus // k}
    return sorted((s for s in shares if sum(cpus // s for cpus, _ in free.values()) >= actors), reverse=True)


def _assign(nodes: list[NodeCapacity], free: dict, roles: list[str], cpu: int, gpu: int) -> dict | None:
    """Each role on a node with room for it, or None.  The learner goes to the GPU with
    most room or, on CPUs, to the driver's node; the others spread over the nodes with most
    room (self-play before the GPU nodes' CPUs are used)."""
    left = {node_id: list(amounts) for node_id, amounts in free.items()}
    order = {node.node_id: i for i, node in enumerate(nodes)}
    driver = {node.node_id for node in nodes if node.driver}
    assigned = {}
    for role in roles:
        needs_gpu = gpu and not role.startswith("selfplay")
        fits = [n for n, (cpus, gpus) in left.items() if cpus >= cpu and (not needs_gpu or gpus >= gpu)]
        if not fits:
            return None
        if role == "learner":
            key = (lambda n: (-left[n][1], order[n])) if gpu else (lambda n: (n not in driver, -left[n][0], order[n]))
        elif needs_gpu:
            key = lambda n: (-left[n][0], order[n])  # noqa: E731
        else:
            key = lambda n: (free[n][1] > 0, -left[n][0], order[n])  # noqa: E731
        node = min(fits, key=key)
        left[node][0] -= cpu
        if needs_gpu:
            left[node][1] -= gpu
        assigned[role] = node
    return assigned
