"""Groups of seeds: one command trains several seeds of one setting on Ray, resumes them
together and reports them together.

``ez-robot train --task T --budget B --seeds 0-4 --run-dir G`` writes

- ``G/group.json``: the manifest (task, seeds, and the options the group started with,
  from which a seed that never started starts on a resume);
- ``G/seed-<k>/``: each seed's run directory, as ``ez-robot train --seed k`` writes it;
- ``G/report/``: the group's report, as ``ez-robot report G/seed-*`` writes it.

Every seed is a Ray task on the group's cluster (the embedded local Ray, or
``--address``); nothing here starts processes of its own.  With ``--workers 0`` a seed's
task is its single-process trainer and holds ``--threads`` CPUs, so that a machine of N
cores trains N seeds at once, each exactly as it would alone.  With the Ray trainer a
seed's task is its run's driver (it holds no CPU; it runs on this node, which holds the
group's directory) and its actors hold what one run's actors hold, so that seeds run as
many at once as those fit.  :func:`ez_robot.seed_launcher.plan_seeds` decides how many, and says why, before
anything starts.  SIGTERM or Ctrl-C stops every running seed with its checkpoint;
``--resume G`` resumes the unfinished seeds, starts those that never started and leaves
the finished ones.

This module runs the single-run requests it is handed (:class:`ez_robot.api.TrainingRequest`),
so that it does not import the API that dispatches to it.
"""
from __future__ import annotations

import dataclasses
import json
import re
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from ez_robot.errors import ConfigError, EzRobotError, RunError, TrainingAborted
from ez_robot.seed_launcher import Seed

__all__ = ["MANIFEST", "parse_seeds", "is_group", "group_runs", "GroupRequest", "write_group_report"]

MANIFEST = "group.json"
MANIFEST_FORMAT = 1
STORED = ("budget", "obs", "overrides", "env_kwargs", "workers", "reanalyze_workers", "gpus", "device", "num_envs",
          "checkpoint_interval", "replay_checkpoint", "threads", "log_every", "wandb", "video", "seeds_at_once")
"""The options a group keeps in its manifest."""
SETTING = ("budget", "obs", "overrides", "env_kwargs")
"""Of those, what a run's config holds: a seed that started keeps its own (its checkpoint's)."""


def parse_seeds(seeds: str | Sequence[int]) -> list[int]:
    """``"0-4"`` -> [0, 1, 2, 3, 4]; ``"0,2,5"`` and ``"0-2,7"`` too; or a list of ints."""
    if isinstance(seeds, str):
        found = []
        for part in seeds.split(","):
            match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
            if not match or (match[2] is not None and int(match[2]) < int(match[1])):
                raise ConfigError(f"bad --seeds {seeds!r}: give a range like 0-4, a list like 0,2,5, or both (0-2,7)")
            found += range(int(match[1]), int(match[2] or match[1]) + 1)
    else:
        found = list(seeds)
        if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in found):
            raise ConfigError(f"seeds must be integers >= 0, got {seeds!r}")
    if not found:
        raise ConfigError("--seeds names no seed")
    repeated = sorted({s for s in found if found.count(s) > 1})
    if repeated:
        raise ConfigError(f"--seeds names seed {repeated[0]} twice")
    return found


def is_group(path: str | Path) -> bool:
    return (Path(path) / MANIFEST).is_file()


def seed_dir(group_dir: Path, seed: int) -> Path:
    return group_dir / f"seed-{seed}"


def read_manifest(group_dir: Path) -> dict:
    path = group_dir / MANIFEST
    try:
        manifest = json.loads(path.read_text())
        if manifest.get("format") != MANIFEST_FORMAT:
            raise RunError(f"{path} has format {manifest.get('format')!r}; this ez-robot reads {MANIFEST_FORMAT}")
        return {**manifest, "seeds": parse_seeds(manifest["seeds"])}
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ConfigError) as error:
        raise RunError(f"{path} is not a readable group manifest ({error})") from None


def group_runs(paths: Sequence[str | Path]) -> list[Path]:
    """``paths`` with each group directory replaced by its seeds' run directories (those
    that exist), for ``ez-robot report G``."""
    out = []
    for path in map(Path, paths):
        if is_group(path):
            runs = (seed_dir(path, seed) for seed in read_manifest(path)["seeds"])
            out += [run for run in runs if (run / "config.yaml").exists()]
        else:
            out.append(path)
    return out


# --- the request ---------------------------------------------------------------------------

class GroupRequest:
    """A checked group: its directory, its seeds and, for each seed to train, the options
    of its single-run request.  :meth:`prepare` raises for every mistake before anything
    starts (each seed's request is prepared once, as a check); :meth:`run` trains."""

    def __init__(self, group_dir: Path, manifest: dict, todo: list[Seed], finished: list[int], options,
                 request_type):
        self.dir, self.manifest, self.todo, self.finished = group_dir, manifest, todo, finished
        self.options, self.request_type = options, request_type

    @classmethod
    def prepare(cls, task: str | None, options, request_type) -> "GroupRequest":
        """``options`` is the group's :class:`ez_robot.api.TrainOptions` (``seeds``, or
        ``resume`` of a group directory); ``task`` a task name; ``request_type`` the
        single-run request (:class:`ez_robot.api.TrainingRequest`)."""
        from ez_robot.checkpoint import checkpoint_path

        o = options
        if o.seeds_at_once is not None and o.seeds_at_once < 1:
            raise ConfigError(f"--seeds-at-once must be >= 1, got {o.seeds_at_once}")
        if o.seed is not None:
            raise ConfigError("give --seed or --seeds, not both: the runs of a group take the seeds of --seeds")
        if o.resume is not None:
            group_dir = Path(o.resume)
            manifest = read_manifest(group_dir)
            if task is not None and _absolute(task) != manifest["task"]:
                raise ConfigError(f"the task {task} differs from the group's task {manifest['task']}")
            if o.seeds is not None and parse_seeds(o.seeds) != manifest["seeds"]:
                raise ConfigError(f"--seeds differs from the group's seeds {manifest['seeds']}; a resumed group "
                                  "keeps them (start another group for other seeds)")
            if o.run_dir is not None and Path(o.run_dir).resolve() != group_dir.resolve():
                raise ConfigError("the run directory and the group to resume differ; a group resumes in its own")
            stored = manifest["options"]  # completed below with the defaults of options it lacks
        else:
            if task is None:
                raise ConfigError("give a task (or --resume GROUP_DIR to continue a group)")
            seeds = parse_seeds(o.seeds)
            group_dir = Path(o.run_dir or _default_dir(task))
            if is_group(group_dir):
                raise ConfigError(f"{group_dir} already holds a group; continue it with --resume {group_dir}, "
                                  "or give another directory")
            if checkpoint_path(group_dir).exists():
                raise ConfigError(f"{group_dir} holds a run, not a group; give another directory")
            stored = {name: _jsonable(name, getattr(o, name)) for name in STORED}
            manifest = {"format": MANIFEST_FORMAT, "task": _absolute(task), "seeds": seeds, "options": stored}
        defaults = {f.name: f.default for f in dataclasses.fields(o)}
        stored = {**{name: _jsonable(name, defaults[name]) for name in STORED}, **stored}
        # how seeds train: this call's options where given, else the group's
        how = {name: getattr(o, name) if getattr(o, name) != defaults[name] else stored.get(name, defaults[name])
               for name in STORED if name not in SETTING}
        base = dataclasses.replace(o, **{**how, "seeds_at_once": None}, seeds=None, run_dir=None, resume=None,
                                   seed=None)
        todo, finished = [], []
        for seed in manifest["seeds"]:
            where = seed_dir(group_dir, seed).resolve()
            status, trainer = _status(where, o.budget, o.overrides)
            if status == "finished":
                finished.append(seed)
                continue
            if status == "new":  # the group's setting, and this call's changes to it
                seed_options = dataclasses.replace(
                    base, seed=seed, run_dir=str(where), obs=stored["obs"], env_kwargs=stored["env_kwargs"],
                    budget=o.budget if o.budget is not None else stored["budget"],
                    overrides=(*stored["overrides"], *(o.overrides if o.resume is not None else ())))
                seed_task = manifest["task"]
            else:  # its checkpoint keeps its setting; --budget and --set change it as for one run
                seed_options = dataclasses.replace(base, resume=str(where), budget=o.budget,
                                                   overrides=tuple(o.overrides), obs=o.obs)
                if seed_options.workers is None and trainer == "single":  # it keeps its trainer
                    seed_options = dataclasses.replace(seed_options, workers=0)
                seed_task = None
            if seed_options.workers == 0:  # --address is the group's cluster, not a trainer's
                seed_options = dataclasses.replace(seed_options, address=None)
            try:
                request = request_type.prepare(seed_task, seed_options)  # every mistake now, before anything starts
            except EzRobotError as error:
                raise type(error)(f"seed {seed}: {error}") from None
            todo.append(Seed(seed, seed_task, seed_options, request.workers, request.options))
        if o.resume is not None:  # a new budget, --set or --seeds-at-once is the group's from now on
            manifest["options"] = {**stored, "budget": o.budget if o.budget is not None else stored["budget"],
                                   "overrides": [*stored["overrides"], *o.overrides],
                                   "seeds_at_once": how["seeds_at_once"]}
        return cls(group_dir, manifest, todo, finished, o, request_type)

    def run(self, log: Callable[[str], None] | None = print) -> dict:
        """Trains the seeds left, then writes and logs the group's report.  Returns
        ``{"seeds": {seed: summary or error}, "report": path}``; Ctrl-C or SIGTERM stop
        every seed with its checkpoint and raise KeyboardInterrupt; seeds that failed raise
        :class:`TrainingAborted` after the others finished and the report is written."""
        from ez_robot.progress import interrupt_on_sigterm
        from ez_robot.run_files import locked_dir

        log = log or (lambda line: None)
        outcomes: dict[int, Any] = {}
        with locked_dir(self.dir, "training this group"):
            _write_manifest(self.dir, self.manifest)
            log(f"group directory: {self.dir} ({self.manifest['task']}, seeds "
                f"{', '.join(map(str, self.manifest['seeds']))})")
            if self.todo:
                from ez_robot.ray_cluster import init_ray

                started = init_ray(self.options.address)
                try:  # SIGTERM interrupts as Ctrl-C does from here on (ray.init sets a handler of its own)
                    with interrupt_on_sigterm():
                        outcomes = self._train(log)
                finally:
                    if started:
                        import ray

                        ray.shutdown()
            else:
                log("every seed has finished its budget; give a larger --budget to extend them")
        report = write_group_report(self.dir, self.manifest["seeds"], log)
        failed = {seed: outcome for seed, outcome in outcomes.items() if isinstance(outcome, str)}
        if failed:
            raise TrainingAborted(f"seed{'s' * (len(failed) > 1)} {', '.join(map(str, failed))} failed (see above); "
                                  f"fix the cause, then `ez-robot train --resume {self.dir}` goes on with them")
        return {"seeds": outcomes, "report": report}

    def _train(self, log) -> dict[int, Any]:
        import ray

        from ez_robot.seed_launcher import Launcher, describe, plan_seeds, resources

        for seed in self.todo:
            if seed.task is not None:  # a seed stopped before its first checkpoint starts again from zero
                _clear_unstarted(Path(seed.options.run_dir))
        cluster_cpus = ray.cluster_resources().get("CPU", 0.0)
        cluster_gpus = ray.cluster_resources().get("GPU", 0.0)
        todo, held = [], []
        at_most = self.manifest["options"].get("seeds_at_once")
        sharing = min(len(self.todo), at_most or len(self.todo))
        for seed in self.todo:
            held_here, explicit = resources(seed, cluster_cpus, cluster_gpus, sharing)
            todo.append(dataclasses.replace(seed, options=dataclasses.replace(seed.options, **explicit)))
            held.append(held_here)
        most = {key: max(h[key] for h in held) for key in held[0]}  # what the largest seed holds
        plan = plan_seeds(len(todo), cluster_cpus=cluster_cpus, cluster_gpus=cluster_gpus,
                          at_most=at_most, **most)
        address = self.options.address
        where = "the embedded local Ray" if address is None else f"the Ray cluster at {address}"
        cluster = f"{where} ({cluster_cpus:g} CPUs" + (f", {cluster_gpus:g} GPUs)" if cluster_gpus else ")")
        for line in describe(plan, [seed.seed for seed in todo], todo[0].workers, cluster, self.finished):
            log(line)
        return Launcher(self.request_type, self.dir.resolve(), plan, log).run(todo)


# --- files ---------------------------------------------------------------------------------

def _default_dir(task: str) -> str:
    from ez_robot import envs

    return f"runs/{envs.task_slug(task)}-seeds-{time.strftime('%Y%m%d-%H%M%S')}"


def _jsonable(name: str, value):
    if isinstance(value, tuple):
        value = list(value)
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        raise ConfigError(f"a group keeps its options in {MANIFEST}, and {name}={value!r} is not JSON data") from None
    return value


def _write_manifest(group_dir: Path, manifest: dict) -> None:
    tmp = group_dir / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    tmp.replace(group_dir / MANIFEST)


def _absolute(task: str) -> str:
    from ez_robot.envs.custom import absolute_task

    return absolute_task(task)


def _status(where: Path, budget, overrides) -> tuple[str, str | None]:
    """``new`` (no checkpoint: never started, or stopped before its first one), ``finished``
    (nothing left with this budget), or ``unfinished``; and the checkpoint's trainer."""
    from ez_robot.checkpoint import checkpoint_path, read_checkpoint, resume_config
    from ez_robot.schedules import Counters, finished

    if not checkpoint_path(where).is_file():
        return "new", None
    state = read_checkpoint(where)
    config = resume_config(state, budget=budget, overrides=overrides)
    done = finished(config, Counters.from_state_dict(state["counters"]))
    return "finished" if done else "unfinished", state["trainer"]


def _clear_unstarted(where: Path) -> None:
    """A seed stopped before its first checkpoint left logs that no checkpoint stands
    behind: they go, so that its new start logs from zero."""
    from ez_robot.run_files import locked_dir

    if not where.is_dir():
        return
    with locked_dir(where, "training in it"):
        for path in where.iterdir():
            if path.name != ".lock":
                shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


def write_group_report(group_dir: Path, seeds: list[int], log) -> Path | None:
    """``G/report/report.md`` with its curves (``ez-robot report`` of the seeds' runs), and
    the final evaluation over seeds in a few lines: mean, range and 95% bootstrap interval,
    with the evaluation episodes behind each seed's figure."""
    import numpy as np

    from ez_robot.report import bootstrap_ci, read_run, write_report

    runs = [seed_dir(group_dir, s) for s in seeds if (seed_dir(group_dir, s) / "metrics.jsonl").exists()]
    if not runs:
        log("no seed has logged anything yet: no report")
        return None
    records = [read_run(run) for run in runs]
    scored = [r for r in records if r.final is not None]
    if scored:
        finals = np.array([r.final for r in scored])
        mean, low, high = bootstrap_ci([finals], lambda s: s[0].mean())
        episodes = sorted({r.final_episodes for r in scored if r.final_episodes})
        log(f"final evaluation over {len(scored)} seed{'s' * (len(scored) != 1)}: mean {mean:.1f}, range "
            f"[{finals.min():.1f}, {finals.max():.1f}], 95% bootstrap interval [{low:.1f}, {high:.1f}]; "
            f"{'/'.join(map(str, episodes)) or '?'} evaluation episodes behind each seed's figure")
        for r in scored:
            frames = r.evals[-1]["env_frames"] if r.evals else "?"
            log(f"  seed {r.seed}: {r.final:.1f} ({r.final_source}, {r.final_episodes or '?'} episodes, "
                f"{frames} env frames)")
    missing = sorted(set(seeds) - {r.seed for r in scored})
    if missing:
        log(f"  no evaluation yet: seed{'s' * (len(missing) > 1)} {', '.join(map(str, missing))}")
    try:
        path = write_report(runs, group_dir / "report")
    except ImportError as error:  # matplotlib or scipy: the report extra
        log(f"no report with curves: it needs the report extra ({error.name} is missing): "
            "pip install 'ez-robot[report]'")
        return None
    log(f"group report: {path}")
    return path
