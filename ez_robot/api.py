"""The Python API: train, load a trained run and act with it, evaluate, export.  The
command line (``ez-robot train``, ``eval``, ``export``) calls these functions.

    import ez_robot

    run_dir = ez_robot.train("examples/arm/reach_arm.py:make_arm", budget="20k")
    agent = ez_robot.load(run_dir)
    obs, _ = env.reset()
    action = agent.act(obs)            # in the env's own action space
    ez_robot.export_bundle(run_dir)    # ONNX networks + bundle for the onboard runtime

A task is a name (``cartpole_swingup``, ``gym:Hopper-v5``, ``pkg.module:factory``,
``path/to/file.py:factory``) or a module-level factory function itself.  Mistakes a user
can fix raise :class:`ez_robot.errors.EzRobotError` subclasses with the remedy in words.
"""
from __future__ import annotations

import difflib
import shlex
import sys
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ez_robot.errors import ConfigError

__all__ = ["train", "TrainOptions", "TrainingRequest", "load", "Agent", "evaluate", "export_bundle", "task_name"]


def task_name(task: str | Callable) -> str:
    """The task string of a task given as a name or as a factory function (``module:name``,
    or ``file.py:name`` for a function of the script being run)."""
    if isinstance(task, str):
        return task
    if not callable(task):
        raise ConfigError(f"a task is a name or a factory function, got {type(task).__name__}")
    qualname = getattr(task, "__qualname__", "")
    module = getattr(task, "__module__", None)
    if not qualname or "<" in qualname or module is None:  # a lambda or a function defined inside another
        raise ConfigError(f"{task!r} cannot be made again in another process: give a function defined at the top "
                          f"level of a module or script (or its name, pkg.module:factory)")
    if module == "__main__":
        path = getattr(sys.modules["__main__"], "__file__", None)
        if path is None:
            raise ConfigError(f"{qualname} is defined in an interactive session: put it in a file and give "
                              f"path/to/file.py:{qualname}")
        return f"{Path(path).resolve()}:{qualname}"
    path = getattr(sys.modules.get(module), "__file__", None)
    if path and (module.startswith("ez_robot_task_") or "." not in module) and "site-packages" not in path:
        # a file loaded by path, or a top-level script module (found through a sys.path entry
        # that Ray workers do not have): the file itself
        return f"{Path(path).resolve()}:{qualname}"
    return f"{module}:{qualname}"


def _option(default, help: str):
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class TrainOptions:
    """How to run training: everything ``ez-robot train`` and :func:`train` take besides
    the task.  Each field's help is the command line's ``--help`` text."""

    budget: str | int | None = _option(None, "Run length with a k/M suffix (Atari: agent steps; DMC: env steps).")
    seed: int | None = _option(None, "Seed of every random generator in the run [default: 0; a resumed run keeps "
                                     "its own].")
    obs: str | None = _option(None, "Observation kind for DMControl tasks: state or pixels [default: state].")
    overrides: tuple = _option((), "Override any config key, e.g. --set train.lr=0.1 (repeatable).")
    env_kwargs: Mapping[str, Any] | None = _option(None, "Keyword arguments of a factory or gym task's env.")
    run_dir: str | Path | None = _option(None, "Run directory (default runs/<task>-<timestamp>).")
    resume: str | Path | None = _option(None, "Continue the run in RUN_DIR from its checkpoint: counters, "
                                              "schedules and logs go on; a larger --budget extends a finished run.")
    workers: int | None = _option(None, "Self-play worker processes on Ray (an embedded local Ray unless "
                                        "--address); 0 runs everything in one process, without Ray.  [default: 1; "
                                        "a resumed run keeps its trainer]")
    reanalyze_workers: int | None = _option(None, "Ray: reanalyze worker processes (default: one per CPU, at "
                                                  "most 8); 0 reanalyzes in the learner's process.")
    address: str | None = _option(None, "Ray: join a cluster (auto, or ray://host:10001); default: an embedded "
                                        "local Ray.")
    gpus: float | None = _option(None, "Ray: GPUs shared by the learner and reanalyze inference (default: all "
                                       "that torch sees, none with --device cpu).")
    device: str = _option("auto", "Where the networks run: auto (CUDA when torch sees a GPU), cpu or cuda.")
    num_envs: int = _option(1, "Environments stepped together by each actor (batched search).")
    checkpoint_interval: int = _option(1000, "Training steps between checkpoints (one is also written at exit, "
                                             "Ctrl-C included).")
    replay_checkpoint: bool = _option(True, "Keep the replay buffer with the checkpoints (compressed, each "
                                            "segment written once), so that a resumed run goes on with its data.")
    threads: int = _option(1, "Torch threads per process; more help only large batches on an idle machine.")
    trust_task: bool = _option(False, "With --resume: allow a run whose task is a factory (module:factory, "
                                      "file.py:factory) to import and call it; only for runs you trust.")
    progress: bool = _option(True, "Show progress while training: a bar on a terminal, lines elsewhere.")
    log_every: float = _option(30.0, "Seconds between two progress lines where stdout is not a terminal (a batch "
                                     "job's log, a pipe); every evaluation gets a line too.")
    seeds: str | Sequence[int] | None = _option(None, "Train these seeds at once as a group, e.g. 0-4 or 0,2,5: one "
                                                      "run directory each under the group's (--run-dir G: G/seed-0, "
                                                      "...), resumed together by --resume G, ending with the "
                                                      "group's report.")
    seeds_at_once: int | None = _option(None, "With --seeds: at most this many seeds train at the same time "
                                              "(default: as many as the Ray cluster's CPUs hold).")
    wandb: bool = _option(False, "Mirror the metrics, the config and the videos to Weights & Biases besides "
                                 "TensorBoard (pip install 'ez-robot[track]'; WANDB_MODE=offline needs no network).")
    video: int = _option(0, "Once training is done, record this many greedy episodes of the final networks as mp4 "
                            "in RUN_DIR/videos (as `ez-robot eval --video N`), sent to the trackers too.")

    @classmethod
    def help(cls, name: str) -> str:
        return next(f.metadata["help"] for f in fields(cls) if f.name == name)


def train(task: str | Callable | None = None, *, log: Callable[[str], None] | None = print, **options) -> Path:
    """Trains an agent on ``task`` (or goes on with the run in ``resume=RUN_DIR``) and
    returns the run directory.

    ``options`` are the fields of :class:`TrainOptions` (``budget="100k"``, ``seed``,
    ``overrides=["train.lr=0.1"]``, ``env_kwargs``, ``workers=0`` for one process without
    Ray, ...).  With ``seeds="0-4"`` (or a list) it trains a group of seeds and returns the
    group directory (:mod:`ez_robot.groups`), as does ``resume`` of a group directory.
    ``log`` gets the start and end lines (None: quiet).  Ctrl-C stops it with a
    checkpoint that ``resume`` continues."""
    from ez_robot.groups import GroupRequest, is_group

    options = _options(options)
    if options.seeds is not None or (options.resume is not None and is_group(options.resume)):
        group = GroupRequest.prepare(None if task is None else task_name(task), options, TrainingRequest)
        group.run(log)
        return group.dir
    request = TrainingRequest.prepare(task, options)
    request.run(log)
    return request.run_dir


_OUTPUTS = ("progress", "log_every", "wandb", "video")
"""The options of what a run shows and mirrors, which its trainer does not take."""


def _options(options: Mapping[str, Any]) -> TrainOptions:
    known = {f.name for f in fields(TrainOptions)}
    unknown = sorted(set(options) - known)
    if unknown:
        close = difflib.get_close_matches(unknown[0], known, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ConfigError(f"unknown training option {unknown[0]!r}{hint}; the options are the fields of "
                          f"ez_robot.api.TrainOptions: {', '.join(sorted(known))}")
    return TrainOptions(**options)


class TrainingRequest:
    """A checked training request: the resolved config, the run directory, the trainer
    (``workers``; 0 is the single-process one) and its options.  :meth:`prepare` raises for
    every mistake before anything starts; :meth:`run` trains."""

    def __init__(self, config, run_dir: Path, state: dict | None, workers: int, options: dict,
                 outputs: dict | None = None):
        self.config, self.run_dir, self.state, self.workers, self.options = config, run_dir, state, workers, options
        self.outputs = {name: getattr(TrainOptions(), name) for name in _OUTPUTS} | (outputs or {})
        """What the run shows and mirrors besides its run directory: TrainOptions' progress,
        log_every, wandb and video."""

    @classmethod
    def prepare(cls, task: str | Callable | None = None, options: TrainOptions = TrainOptions()) -> "TrainingRequest":
        from ez_robot import envs
        from ez_robot.checkpoint import checkpoint_path, read_checkpoint, require_trusted_config, resume_config
        from ez_robot.config import load_config
        from ez_robot.envs.custom import absolute_task
        from ez_robot.tracking import require_trackers
        from ez_robot.trainer import check_resumable

        o = options
        if o.seeds is not None or o.seeds_at_once is not None:
            raise ConfigError("--seeds trains a group (ez_robot.groups.GroupRequest), not one run")
        if o.log_every <= 0 or o.video < 0:
            raise ConfigError(f"need --log-every > 0 and --video >= 0, got {o.log_every} and {o.video}")
        require_trackers(wandb=o.wandb)
        ray_only = {"address": o.address, "gpus": o.gpus, "reanalyze_workers": o.reanalyze_workers}
        given = [name for name, value in ray_only.items() if value is not None]
        workers, run_dir = o.workers, o.run_dir
        if workers == 0 and given:
            raise ConfigError(f"--{given[0].replace('_', '-')} is for the Ray trainer; --workers 0 (workers=0) runs "
                              f"without Ray")
        overrides = [*o.overrides, *(f"env.kwargs.{name}={_yaml(value)}" for name, value in (o.env_kwargs or {}).items())]
        state = None
        if o.resume is not None:
            state = read_checkpoint(o.resume)
            saved = state["config"]
            if task is not None and absolute_task(task_name(task)) != saved["env"]["task"]:
                raise ConfigError(f"the task {task_name(task)} differs from the run's task {saved['env']['task']}")
            require_trusted_config(state, o.trust_task or task is not None, also=" or give the same --task")
            for name, value, was in (("obs", o.obs, saved["env"]["obs"]), ("seed", o.seed, saved["seed"])):
                if value is not None and value != was:
                    raise ConfigError(f"--{name} {value} differs from the run's {name} {was}; a resumed run keeps it")
            if run_dir is not None and Path(run_dir).resolve() != Path(o.resume).resolve():
                raise ConfigError("the run directory and the run to resume differ; a run resumes in its own")
            config = resume_config(state, budget=o.budget, overrides=overrides)
            check_resumable(config, state, o.resume, o.replay_checkpoint)
            run_dir = Path(o.resume)
            if workers is None:  # the run keeps its trainer unless asked for another
                workers = 0 if state["trainer"] == "single" and not given else 1
        else:
            if task is None:
                raise ConfigError("give a task (or resume=RUN_DIR to continue a run)")
            name = task_name(task)
            envs.validate_task(name)
            config = load_config(name, obs=o.obs or "state", budget=o.budget, seed=0 if o.seed is None else o.seed,
                                 overrides=overrides)
            run_dir = Path(run_dir or f"runs/{envs.task_slug(config.env.task)}-{time.strftime('%Y%m%d-%H%M%S')}")
            if checkpoint_path(run_dir).exists():
                raise ConfigError(f"{run_dir} already holds a run; continue it with --resume "
                                  f"{shlex.quote(str(run_dir))} (resume=...), or give another run directory")
        workers = 1 if workers is None else workers
        trainer_options = dict(device=o.device, num_envs=o.num_envs, checkpoint_interval=o.checkpoint_interval,
                               threads=o.threads, resume=state, replay_checkpoint=o.replay_checkpoint)
        if workers > 0:
            trainer_options.update(workers=workers, **ray_only)
        return cls(config, Path(run_dir), state, workers, trainer_options,
                   {name: getattr(o, name) for name in _OUTPUTS})

    def run(self, log: Callable[[str], None] | None = print, *, display=None, group: str | None = None) -> dict:
        """Trains; returns the trainer's summary.  ``display`` is what training shows
        (:class:`ez_robot.progress.ProgressDisplay`; default: a bar on a terminal, lines
        elsewhere, none without ``progress``); ``group`` names the run's group of seeds to
        the trackers."""
        from ez_robot.progress import ProgressDisplay
        from ez_robot.tracking import make_trackers

        log = log or (lambda line: None)
        if self.workers == 0:
            from ez_robot.trainer import train as run_training
        else:
            from ez_robot.ray_trainer import train as run_training
        outputs = self.outputs
        if display is None and outputs["progress"]:
            display = ProgressDisplay(every=outputs["log_every"])
        config = self.config
        if self.state is None:
            log(f"run directory: {self.run_dir}  ({config.agent_steps_budget} agent steps = "
                f"{config.env_frames_budget} env frames; budget counts {config.env.budget_unit})")
        else:
            c = self.state["counters"]
            log(f"resuming {self.run_dir} ({'single-process' if self.workers == 0 else 'Ray'} trainer) at "
                f"{c['agent_steps']} agent steps and {c['train_steps']} training steps (budget "
                f"{config.agent_steps_budget} agent steps)")
        for caution in config.cautions + _device_cautions(config, self.options["device"]):
            log(f"caution: {caution}")
        trackers = make_trackers(wandb=outputs["wandb"], group=group, log=log)
        try:
            summary = run_training(config, self.run_dir, progress=display or False,
                                   sinks=[sink for sink in (display, *trackers) if sink is not None], **self.options)
            if outputs["video"] and summary["finished"]:
                for path, counters in _record_videos(self.run_dir, outputs["video"], self.options["device"]):
                    log(f"video: {path}")
                    for tracker in trackers:
                        tracker.video(path, counters)
        finally:
            for tracker in trackers:
                tracker.close()
        last = summary["last_eval"]
        line = f"last evaluation: {last.get('mean', 'none')}"
        if "success_rate" in last:
            line += f", success rate {last['success_rate']:.0%}"
        log(f"done: {summary['agent_steps']} agent steps, {summary['train_steps']} training steps, "
            f"{summary['wall_seconds']:.0f} s; {line}")
        return summary


def _record_videos(run_dir: Path, episodes: int, device: str) -> list[tuple[Path, Any]]:
    """``episodes`` greedy episodes of a run's final networks, from its evaluation seeds,
    recorded to ``RUN_DIR/videos``; each video with the run's counters."""
    from ez_robot.checkpoint import load_run
    from ez_robot.device import resolve_device
    from ez_robot.evaluation import play
    from ez_robot.schedules import Counters, eval_seed

    dev = resolve_device(device)
    run = load_run(run_dir, None, dev)
    (run_dir / "videos").mkdir(exist_ok=True)
    result = play(run.net, run.config, dev, episodes, eval_seed(run.config), record=episodes,
                  video_dir=run_dir / "videos")
    counters = Counters.from_state_dict(run.counters)
    return [(path, counters) for path in result.videos]


def _device_cautions(config, device) -> list[str]:
    """What the device means for a run's length, said before it starts."""
    from ez_robot.device import resolve_device

    if config.env.obs != "pixels" or resolve_device(device).type != "cpu":
        return []
    return ["training from pixels on a CPU: one training step of the pixel ResNet at the paper's batch of 256 "
            "takes ~20-30 s on one core (benchmarks/README.md), so a 100k run takes days to weeks. Train on a "
            "GPU (--device auto finds one), or from states where the task has them (--obs state)"]


def _yaml(value: Any) -> str:
    import yaml

    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


class Agent:
    """A trained run's search policy, acting on the observations of the task's own env
    (a Dict observation as the env gives it) and answering in that env's action space: a
    vector within its Box bounds, or a discrete index.  Each call runs the greedy search
    of ``ez-robot eval`` (no root noise, temperature 0), on the network backend the run
    trained with (``train.inference``: onnxruntime on a CPU by default, else torch)."""

    def __init__(self, run, search_overrides=()):
        from ez_robot.config import search_config, with_search_overrides
        from ez_robot.envs import make_from_config
        from ez_robot.envs.wrappers import FlatObservations, JointDiscreteActions, NormalizedActions, find_wrapper
        from ez_robot.inference import make_inference

        self.run_dir, self.config, self.net = run.run_dir, run.config, run.net
        self.task = run.config.env.task
        self.counters = run.counters
        env = make_from_config(run.config.env, seed=0, mode="train")
        try:
            self._flatten = find_wrapper(env, FlatObservations)
            self._actions = find_wrapper(env, (JointDiscreteActions, NormalizedActions))
            self.observation_space = (self._flatten.raw_observation_space if self._flatten is not None
                                      else env.observation_space)
            self.action_space = self._actions.env.action_space if self._actions is not None else env.action_space
        finally:
            env.close()
        device = next(run.net.parameters()).device
        # onnxruntime on the CPU when the run's config says so (the default): one search
        # makes many batch-1 network calls, where torch's per-call overhead dominates
        self._inference = make_inference(run.net, device, run.config.train.inference)
        self._search = search_config(with_search_overrides(run.config, search_overrides)).replace(
            add_noise=False, temperature=0.0)
        self._rng = np.random.default_rng(0)

    def act(self, observation) -> np.ndarray | int:
        """The action for one observation of the task's env."""
        from ez_robot.inference import run_search

        flat = self._flatten.observation(observation) if self._flatten is not None else np.asarray(observation)
        out = run_search(self._inference, flat[None], self._search, self._rng)
        action = out.actions[0] if out.candidates is not None else int(out.actions[0])
        return self._actions.action(action) if self._actions is not None else action

    def __repr__(self) -> str:
        return f"Agent({self.task!r}, {self.counters.get('agent_steps')} agent steps, from {self.run_dir})"


def load(run_dir: str | Path, checkpoint: str | Path | None = None, device: str = "cpu", *,
         search_overrides=(), trust_task: bool = False) -> Agent:
    """The agent of a run directory (its latest checkpoint, or ``checkpoint``).
    ``search_overrides`` (``["search.num_simulations=8"]``) change its search, as
    ``ez-robot eval --set`` does.  A run whose task is a factory (``module:factory``,
    ``file.py:factory``) needs ``trust_task=True``: making its env imports and calls the
    code the run's files name (:class:`ez_robot.errors.UntrustedTaskError` otherwise)."""
    from ez_robot.device import resolve_device
    from ez_robot.checkpoint import load_run

    return Agent(load_run(run_dir, checkpoint, resolve_device(device), trust_task=trust_task), search_overrides)


def evaluate(run_dir: str | Path, *, episodes: int | None = None, seed: int = 0, video: int = 0,
             checkpoint: str | Path | None = None, device: str = "auto", progress: bool = False,
             search_overrides=(), out: str | Path | None = None, trust_task: bool = False) -> dict:
    """Greedy-search episodes of a run (as ``ez-robot eval``); writes the report and returns
    it, its file under ``"path"``: ``RUN_DIR/eval.json`` for the run as trained,
    ``eval-<label>.json`` with search overrides or an earlier checkpoint, or ``out``.
    An episode whose env raises is played again on a new env (``failed_episodes`` and
    ``env_errors`` in the report); an env that keeps failing, or returns a NaN, raises
    :class:`ez_robot.errors.EnvironmentFailed` with its error.
    ``trust_task``: as :func:`load`."""
    from ez_robot.evaluation import evaluate_run

    return evaluate_run(run_dir, episodes=episodes, seed=seed, checkpoint=checkpoint, video=video, device=device,
                        progress=progress, search_overrides=search_overrides, out=out, trust_task=trust_task)


def export_bundle(run_dir: str | Path, out: str | Path | None = None, *, checkpoint: str | Path | None = None,
           observations: int = 32, trust_task: bool = False) -> Path:
    """Exports a run as a bundle (default ``RUN_DIR/bundle``), checked against torch; returns
    the bundle directory.  ``trust_task``: as :func:`load`."""
    from ez_robot.export.onnx_export import export_run

    export_run(run_dir, out, checkpoint=checkpoint, observations=observations, trust_task=trust_task)
    return Path(out) if out is not None else Path(run_dir) / "bundle"
