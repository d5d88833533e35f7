"""The Ray side of a group of seeds (:mod:`ez_robot.groups`): how many seeds the cluster
holds at once (:func:`plan_seeds`), and the launcher that runs each seed as a Ray task,
relays its lines and stops it with its checkpoint.

A seed's task is given the single-run request type (:class:`ez_robot.api.TrainingRequest`)
and its options, and prepares and runs its request where Ray placed it.
"""
from __future__ import annotations

import json
import math
import signal
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ez_robot.errors import ConfigError, EzRobotError, RunError

__all__ = ["Seed", "SeedPlan", "plan_seeds", "resources", "describe", "Launcher"]

STOP_WAIT_SECONDS = 600
"""How long stopped seeds get to write their checkpoints."""


@dataclass(frozen=True)
class SeedPlan:
    """How a group's seeds share the cluster: ``at_once`` seeds at the same time, each
    holding ``cpus`` CPUs and ``gpus`` GPUs (``task_cpus``/``task_gpus`` by its Ray task,
    the rest by its Ray trainer's actors)."""

    at_once: int
    cpus: float
    gpus: float
    task_cpus: float
    task_gpus: float
    why: str


def plan_seeds(seeds: int, *, cpus: float, gpus: float, cluster_cpus: float, cluster_gpus: float,
               at_most: int | None = None, task_cpus: float = 0.0, task_gpus: float = 0.0) -> SeedPlan:
    """As many seeds at once as the cluster's CPUs and GPUs hold, at most ``seeds`` and
    ``at_most``; a seed that needs more than the whole cluster has is an error."""
    limits = [(seeds, f"the group has {seeds} seed{'s' * (seeds != 1)} to train")]
    if at_most is not None:
        limits.append((at_most, f"--seeds-at-once {at_most}"))
    for kind, need, have in (("CPU", cpus, cluster_cpus), ("GPU", gpus, cluster_gpus)):
        if need <= 0:
            continue
        if need > have + 1e-9:
            raise ConfigError(f"each seed needs {need:g} {kind}s and the Ray cluster has {have:g}; use fewer "
                              "--threads / --workers / --reanalyze-workers per seed, or a larger cluster")
        fit = math.floor(have / need + 1e-9)
        limits.append((fit, f"{fit} x {need:g} {kind}s fill the cluster's {have:g}"))
    at_once, why = min(limits, key=lambda limit: limit[0])
    return SeedPlan(at_once, cpus, gpus, task_cpus, task_gpus, why)


def resources(seed: "Seed", cluster_cpus: float, cluster_gpus: float, sharing: int) -> tuple[dict, dict]:
    """A seed's resources: (what its task and its actors hold in all, and what the task
    itself holds), and the trainer options that make them explicit.  A single-process
    seed that may use a GPU gets an equal share of the cluster's GPUs with the others its
    CPUs let run at once (at most ``sharing``), and at most one GPU."""
    from ez_robot.device import resolve_device
    from ez_robot.ray_cluster import Placement, default_reanalyze_workers

    options = seed.trainer_options
    if seed.workers == 0:  # the task is the trainer
        cpus = options["threads"]
        gpus = 0.0
        if options["device"] != "cpu" and cluster_gpus > 0:
            at_once = max(1, min(sharing, math.floor(cluster_cpus / cpus + 1e-9)))
            gpus = min(1.0, cluster_gpus / at_once)
        return {"cpus": cpus, "gpus": gpus, "task_cpus": cpus, "task_gpus": gpus}, {}
    reanalyze = options.get("reanalyze_workers")
    reanalyze = default_reanalyze_workers() if reanalyze is None else reanalyze
    run_gpus = options.get("gpus")
    if run_gpus is None:  # as a single run: every GPU torch sees here, none on a CPU
        import torch

        run_gpus = float(torch.cuda.device_count()) if resolve_device(options["device"]).type == "cuda" else 0.0
    placement = Placement.plan(seed.workers, reanalyze, run_gpus, local=options.get("address") is None)
    held = {"cpus": (seed.workers + reanalyze + 1) * placement.cpu, "gpus": (reanalyze + 2) * placement.gpu,
            "task_cpus": 0.0, "task_gpus": 0.0}
    return held, {"reanalyze_workers": reanalyze, "gpus": run_gpus}


@dataclass(frozen=True)
class Seed:
    """A seed to train: its task (None: its checkpoint's), its single-run options, and what
    preparing them found (the trainer: ``workers``, 0 for the single-process one; its
    trainer options)."""

    seed: int
    task: str | None
    options: Any
    workers: int
    trainer_options: dict


def describe(plan: SeedPlan, seeds: list[int], workers: int, cluster: str, finished: list[int]) -> list[str]:
    each = (f"each seed is a single-process trainer (--workers 0) in one Ray task holding {plan.cpus:g} CPU(s)"
            if workers == 0 else
            f"each seed is a Ray-trainer run (--workers {workers}) whose actors hold {plan.cpus:g} CPU(s)")
    if plan.gpus:
        each += f" and {plan.gpus:g} GPU(s)"
    lines = [f"plan: {len(seeds)} seed{'s' * (len(seeds) != 1)} to train ({', '.join(map(str, seeds))}), "
             f"{plan.at_once} at a time on {cluster}: {each}; {plan.at_once} at once because {plan.why}"]
    if finished:
        lines.append(f"finished already, left as they are: seed{'s' * (len(finished) != 1)} "
                     f"{', '.join(map(str, finished))}")
    return lines


class _Lines:
    """A Ray actor that gathers the seeds' lines for the group's driver to print."""

    def __init__(self):
        self.lines: list[str] = []

    def put(self, line: str) -> None:
        self.lines.append(line)

    def drain(self) -> list[str]:
        lines, self.lines = self.lines, []
        return lines


class Launcher:
    """Starts each seed's task when the plan has room for it, relays the seeds' lines,
    and on Ctrl-C or SIGTERM stops the running seeds and waits for their checkpoints."""

    def __init__(self, request_type, group_dir: Path, plan: SeedPlan, log):
        import ray

        self.request_type, self.group_dir, self.plan, self.log = request_type, group_dir, plan, log
        self.lines = ray.remote(_Lines).options(num_cpus=0).remote()

    def run(self, todo: list[Seed]) -> dict[int, Any]:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        seed_task = ray.remote(_train_seed)
        waiting, running, outcomes = list(todo), {}, {}
        seeds = {seed.seed: seed for seed in todo}
        try:
            while waiting or running:
                while waiting and len(running) < self.plan.at_once:
                    seed = waiting.pop(0)
                    # a Ray trainer's driver stays on this node, which holds the run directories
                    extra = {"scheduling_strategy": here} if seed.workers != 0 else {}
                    if self.plan.task_gpus:
                        extra["num_gpus"] = self.plan.task_gpus
                    ref = seed_task.options(name=f"seed-{seed.seed}", num_cpus=self.plan.task_cpus, max_retries=0,
                                            **extra).remote(self.request_type, seed.task, seed.options, seed.seed,
                                                            str(self.group_dir), self.lines)
                    running[ref] = seed.seed
                ready, _ = ray.wait(list(running), num_returns=1, timeout=0.5)
                self._relay()
                for ref in ready:
                    seed = running.pop(ref)
                    outcomes[seed] = self._outcome(seed, ref)
        except KeyboardInterrupt:
            self._stop({ref: seeds[number] for ref, number in running.items()})
            raise
        return outcomes

    def _relay(self) -> None:
        import ray

        for line in ray.get(self.lines.drain.remote()):
            self.log(line)

    def _outcome(self, seed: int, ref) -> dict | str:
        """A seed's summary, or a line saying why it failed."""
        import ray

        try:
            summary = ray.get(ref)
        except ray.exceptions.RayTaskError as error:
            cause = error.cause
            if isinstance(cause, KeyboardInterrupt):  # Ctrl-C reached the seed's process too
                raise KeyboardInterrupt from None
            if isinstance(cause, FloatingPointError):
                message = f"training diverged: {cause} (a lower train.lr may help)"
            elif isinstance(cause, EzRobotError):
                message = str(cause)
            else:  # a bug: its traceback, as Ray gives it
                message = str(error)
            self._relay()
            self.log(f"seed {seed} failed: {message}")
            return message
        except ray.exceptions.RayError as error:  # its process died (killed, out of memory)
            message = f"its process ended ({str(error).splitlines()[0]})"
            self.log(f"seed {seed} failed: {message}")
            return message
        self._relay()
        return summary

    def _stop(self, running: dict) -> None:
        """Each running seed gets a KeyboardInterrupt (its trainer writes its checkpoint);
        waits for them to end (a second Ctrl-C stops waiting), then says where each stopped."""
        import ray

        from ez_robot.checkpoint import checkpoint_path

        if not running:
            return
        numbers = ", ".join(str(seed.seed) for seed in sorted(running.values(), key=lambda seed: seed.seed))
        self.log(f"stopping seed{'s' * (len(running) > 1)} {numbers}: each writes its checkpoint first")
        for ref in running:
            ray.cancel(ref, recursive=False)
        try:
            ray.wait(list(running), num_returns=len(running), timeout=STOP_WAIT_SECONDS)
            self._relay()
        except KeyboardInterrupt:
            self.log("stopped waiting: a seed still writing its checkpoint keeps its previous one")
        for seed in sorted(running.values(), key=lambda seed: seed.seed):
            info = checkpoint_path(seed.options.run_dir or seed.options.resume).with_suffix(".json")
            try:
                c = json.loads(info.read_text())["counters"]
                self.log(f"seed {seed.seed}: checkpoint at {c['agent_steps']} agent steps, {c['train_steps']} "
                         "training steps")
            except (OSError, ValueError, KeyError):
                self.log(f"seed {seed.seed}: no checkpoint yet (it starts from zero when resumed)")


def _train_seed(request_type, task, options, seed: int, group_dir: str, lines) -> dict:
    """A seed's Ray task: its single-run request, prepared and run here, its lines sent to
    the group's driver."""
    from ez_robot.progress import ProgressDisplay

    if not Path(group_dir).is_dir():
        raise RunError(f"seed {seed} was placed on {socket.gethostname()}, where the group directory {group_dir} "
                       "cannot be seen: on a cluster of several nodes, give --run-dir a directory on a filesystem "
                       "they all share")

    def write(line: str) -> None:
        lines.put.remote(f"seed {seed}: {line}")

    display = ProgressDisplay("lines", every=options.log_every, write=write) if options.progress else None
    # ray.cancel interrupts a task through SIGINT's handler, which a worker started from a
    # background job (`cmd &`, nohup) inherits ignored: the task takes Python's own back
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        request = request_type.prepare(task, options)
        return request.run(write, display=display, group=Path(group_dir).name)
    finally:
        signal.signal(signal.SIGINT, previous)


