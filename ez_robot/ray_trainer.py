"""The Ray trainer's driver: starts a run's workers (:mod:`ez_robot.ray_workers`) on a
cluster (:mod:`ez_robot.ray_cluster`), and logs, evaluates and checkpoints while they run.

- The learner trains in chunks of at most a second, up to the next checkpoint; between
  two chunks the driver logs their metrics and, at a checkpoint boundary, writes the
  checkpoint (learner state, counters, replay).  Checkpoints are also written at exit,
  Ctrl-C and SIGTERM included.
- Evaluations run as tasks on the learner's weights of the moment, while training goes
  on; an evaluation still running at a checkpoint is redone by a resumed run.
- Faults: a worker process that dies is restarted by Ray (``max_restarts``), pulls the
  latest weights and goes on; restarts are logged, and the decisions a dead self-play
  worker was granted but never reported are granted again.  An env that raises is made
  again (:class:`ez_robot.envs.guard.RemakeOnError`), as in the single-process trainer.
- Nodes: each actor is bound to a node of the plan (:class:`ez_robot.ray_cluster.Placement`).
  A node that leaves the cluster stops the run's actors with a checkpoint (the storage,
  the replay and, on CPUs, the learner live on the driver's node); the run goes on from
  it on the nodes left, or stops saying what they lack and how to resume.
"""
from __future__ import annotations

import logging
import shlex
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path

import ray
import torch

from ez_robot.builders import env_spec, make_model
from ez_robot.config import Config
from ez_robot.device import check_compile, resolve_device, set_threads
from ez_robot.errors import ConfigError, EnvironmentFailed, TrainingAborted
from ez_robot.checkpoint import checkpoint_path, read_checkpoint
from ez_robot.ray_cluster import Placement, alive_nodes, cluster_nodes, default_reanalyze_workers, init_ray
from ez_robot.ray_storage import ReplayWorker, SharedStorage
from ez_robot.ray_workers import STEPS_PER_REQUEST, LearnerWorker, Reanalyzer, SelfPlayWorker, evaluate_weights, shippable
from ez_robot.run_files import RunFiles, holds_run_dir
from ez_robot.schedules import Counters, eval_interval_for, next_eval_after, replay_shortfall, total_train_steps
from ez_robot.progress import TrainingProgress, interrupt_on_sigterm
from ez_robot.trainer import check_resumable, env_remedy

__all__ = ["train"]

_log = logging.getLogger(__name__)

NODE_LOSS_SECONDS = 45.0
"""How long an actor's death waits for Ray to tell whether its node left the cluster (Ray
finds a dead node by missed health checks: ~15-30 s with its defaults)."""
STARTUP_NOTICE_SECONDS = 30.0


def _say(line: str) -> None:
    """A line about the cluster for the person watching (stderr, beside Ray's own)."""
    print(line, file=sys.stderr, flush=True)


class _NodeLost(Exception):
    """Nodes the run's actors were on left the cluster (handled inside this module)."""

    def __init__(self, names: list[str]):
        super().__init__(f"node {', '.join(names)} left the Ray cluster")


@holds_run_dir
def train(config: Config, run_dir: Path | str, *, workers: int = 1, reanalyze_workers: int | None = None,
          address: str | None = None, gpus: float | None = None, device: str = "auto", num_envs: int = 1,
          checkpoint_interval: int = 1000, eval_interval: int | None = None, eval_episodes: int | None = None,
          progress: bool = True, threads: int = 1, resume: dict | None = None, replay_checkpoint: bool = True,
          max_restarts: int = 3, max_seconds: float | None = None, sinks=()) -> dict:
    """Trains with ``workers`` self-play workers and ``reanalyze_workers`` reanalyze workers
    on Ray (an embedded local Ray unless ``address``); same arguments, run directory,
    checkpoints and summary as :func:`ez_robot.trainer.train`."""
    if workers < 1 or (reanalyze_workers is not None and reanalyze_workers < 0) or num_envs < 1:
        raise ConfigError(f"need workers >= 1, reanalyze_workers >= 0 and num_envs >= 1, got {workers}, "
                          f"{reanalyze_workers} and {num_envs}")
    if resume is not None:  # before any worker starts
        check_resumable(config, resume, run_dir, replay_checkpoint)
    set_threads(threads)
    if gpus is None:
        gpus = torch.cuda.device_count() if resolve_device(device).type == "cuda" else 0
    if address is None:  # the learner runs here (on a cluster, on a node this one cannot look at)
        check_compile(config.train.compile, resolve_device(device))
    started = init_ray(address)
    try:  # SIGTERM interrupts as Ctrl-C does from here on, while the actors start too (tens of seconds)
        with interrupt_on_sigterm():
            nodes = cluster_nodes()
            if reanalyze_workers is None:
                reanalyze_workers = default_reanalyze_workers(nodes)
            lost, deadline = None, None if max_seconds is None else time.time() + max_seconds
            while True:  # once, and again on the nodes left after one leaves
                try:
                    placement = Placement.plan(nodes, workers, reanalyze_workers, gpus)
                except TrainingAborted as error:
                    if lost is None:
                        raise
                    raise TrainingAborted(f"{lost}; the run stopped at its checkpoint ({_at(resume)}), and {error}; "
                                          f"then resume it: ez-robot train --resume {shlex.quote(str(run_dir))} --address ADDR") from None
                if address is not None or len(nodes) > 1:
                    for line in placement.describe():
                        _say(f"placement: {line}")
                try:
                    pipeline = _Pipeline(config, Path(run_dir), workers=workers, reanalyze_workers=reanalyze_workers,
                                         placement=placement, num_envs=num_envs, threads=threads, resume=resume,
                                         replay_checkpoint=replay_checkpoint, max_restarts=max_restarts,
                                         sinks=sinks)
                    return pipeline.run(checkpoint_interval, eval_interval, eval_episodes, progress,
                                        None if deadline is None else max(deadline - time.time(), 0.0))
                except _NodeLost as error:
                    lost = error
                finally:  # Ray frees what the actors held a moment after they are killed
                    nodes_after = None if started else _nodes_left(nodes)
                resume = _checkpoint_after(lost, run_dir)
                nodes = nodes_after or _nodes_left(nodes)
                _say(f"{lost}; going on from the checkpoint at {_at(resume)} on the nodes left")
    finally:
        if started:
            ray.shutdown()


def _at(state: dict) -> str:
    c = state["counters"]
    return f"{c['agent_steps']} agent steps, {c['train_steps']} training steps"


def _checkpoint_after(lost: _NodeLost, run_dir) -> dict:
    """The checkpoint the run wrote when it stopped (or its last periodic one, where the
    learner was on the node that left)."""
    if not checkpoint_path(run_dir).exists():
        raise TrainingAborted(f"{lost} before the run's first checkpoint; start it again")
    return read_checkpoint(run_dir)


def _nodes_left(before: list, seconds: float = 30.0) -> list:
    """The alive nodes and what they have free, once Ray has taken back what the stopped
    actors held (at most ``seconds``): a run that follows in the same Ray finds them free."""
    had = {node.node_id: node.cpus for node in before}
    deadline = time.time() + seconds
    while True:
        nodes = cluster_nodes()
        if all(node.cpus >= had.get(node.node_id, 0.0) - 1e-6 for node in nodes) or time.time() > deadline:
            return nodes
        time.sleep(0.5)


def _raise_env_failure(error: ray.exceptions.RayTaskError, where: str) -> None:
    """A remote task that failed on the user's env raises that failure here, named by where
    it ran and without Ray's traceback (the env, not a bug); any other failure returns."""
    if isinstance(error.cause, EnvironmentFailed):
        raise type(error.cause)(f"{where}: {error.cause}") from None


class _Pipeline:
    """The actors of one run, and the driver's loop over them."""

    def __init__(self, config: Config, run_dir: Path, *, workers, reanalyze_workers, placement: Placement, num_envs,
                 threads, resume, replay_checkpoint, max_restarts, sinks=()):
        self.config, self.run_dir, self.threads, self.max_restarts = config, run_dir, threads, max_restarts
        self.placement = placement
        self.spec = env_spec(config)
        self.total = total_train_steps(config)
        self.counters = Counters.from_state_dict(resume["counters"]) if resume else Counters()
        self.resumed = resume is not None
        self.restarts = resume.get("restarts", 0) if resume else 0
        self.seconds: dict[str, float] = defaultdict(float)
        self.files = RunFiles(run_dir, config, resume_from=resume, sinks=sinks)
        try:
            self._start_actors(resume, workers, reanalyze_workers, num_envs, replay_checkpoint)
        except BaseException:  # a node left, an actor failed, Ctrl-C: none of them stays behind
            self._end_actors()
            self.files.close()
            raise

    def _start_actors(self, resume, workers, reanalyze_workers, num_envs, replay_checkpoint):
        config, spec, p, c = self.config, self.spec, self.placement, self.counters
        torch.manual_seed(config.seed)  # the run's first network, as in the single-process trainer
        first = {name: value.detach() for name, value in make_model(config, spec).state_dict().items()}
        learner_state = resume["learner"] if resume else None
        if learner_state is None:
            shipped = shippable(first)  # one dict for both: the storage is sent its arrays once
            weights = {"acting": (0, shipped), "target": (0, shipped)}
        else:
            versions = learner_state["versions"]
            weights = {"acting": (versions["acting"], shippable(learner_state["acting_model"])),
                       "target": (versions["target"], shippable(learner_state["target_model"]))}
        run = f"ez-robot-{uuid.uuid4().hex[:8]}"
        names = {"storage": f"{run}-storage", "replay": f"{run}-replay",
                 "reanalyzers": [f"{run}-reanalyze-{i}" for i in range(reanalyze_workers)]}
        # self-play may be two requests per worker ahead of the learner: enough to overlap
        # with it, and few enough that it never takes CPU from the learner for long
        lead = 2 * workers * num_envs * STEPS_PER_REQUEST
        self.storage = ray.remote(SharedStorage).options(name=names["storage"], **p.options("data")).remote(
            config, c.at(), weights, lead, restarts=self.restarts, selfplay_workers=workers)
        self.replay = ray.remote(ReplayWorker).options(name=names["replay"], **p.options("data")).remote(
            config, names["storage"], spec.action, config.seed + 2 + c.train_steps,
            str(self.run_dir / "checkpoints" / "replay") if replay_checkpoint else None,
            resume.get("replay") if resume else None)
        self._wait_started({"replay": self.replay})
        self.reanalyzers = [
            ray.remote(Reanalyzer).options(name=name, max_restarts=self.max_restarts,
                                           **p.options(f"reanalyze-{i}")).remote(
                i, config, names, spec, p.device, self.threads, seed=config.seed + 100 + i + c.train_steps)
            for i, name in enumerate(names["reanalyzers"])]
        self.learner = ray.remote(LearnerWorker).options(name=f"{run}-learner", **p.options("learner")).remote(
            config, names, spec, p.device, self.threads, first, learner_state)
        self.selfplay = [ray.remote(SelfPlayWorker).options(name=f"{run}-selfplay-{i}", max_restarts=self.max_restarts,
                                                            **p.options(f"selfplay-{i}")).remote(
            i, config, names, num_envs, spec, self.threads, c.agent_steps) for i in range(workers)]
        self._wait_started({"learner": self.learner,
                            **{f"reanalyze-{i}": actor for i, actor in enumerate(self.reanalyzers)},
                            **{f"selfplay-{i}": actor for i, actor in enumerate(self.selfplay)}})

    def _wait_started(self, actors: dict) -> None:
        """Waits for actors to start, saying so every half minute with what they wait for;
        an actor whose constructor failed is one line, not a Ray traceback."""
        waiting = {actor.__ray_ready__.remote(): role for role, actor in actors.items()}
        while waiting:
            ready, _ = ray.wait(list(waiting), num_returns=len(waiting), timeout=STARTUP_NOTICE_SECONDS)
            for ref in ready:
                role = waiting.pop(ref)
                try:
                    ray.get(ref)
                except ray.exceptions.RayActorError as error:
                    self._raise_if_node_lost(NODE_LOSS_SECONDS)
                    cause = getattr(error, "cause", None) or error
                    lines = [line for line in str(cause).splitlines() if "Error" in line]
                    raise TrainingAborted(f"{role} could not start: {lines[-1].strip() if lines else cause}") \
                        from None
            if waiting:
                self._raise_if_node_lost()
                roles = sorted(waiting.values())
                plan = ["data" if role == "replay" else role for role in roles]  # the replay holds no CPU
                where = sorted({self.placement.names.get(self.placement.nodes.get(role), "any node") for role in plan})
                _say(f"waiting for Ray to start {', '.join(roles)} on {', '.join(where)} "
                     f"({max(self.placement.options(role)['num_cpus'] for role in plan):g} CPU each): busy cores are "
                     "slow to start them, and other jobs may hold what the plan found free")

    def _raise_if_node_lost(self, seconds: float = 0.0) -> None:
        """:class:`_NodeLost` when a node of the plan has left the cluster, watching for
        ``seconds`` (an actor's death is seen before its node's)."""
        used, deadline = self.placement.used_nodes(), time.time() + seconds
        while len(used) > 1:
            gone = used - alive_nodes()
            if gone:
                names = [self.placement.names.get(node, node) for node in sorted(gone)]
                self.files.log("node_lost", self.counters, nodes=names)
                raise _NodeLost(names)
            if time.time() >= deadline:
                return
            time.sleep(1.0)

    def run(self, checkpoint_interval: int, eval_interval: int | None, eval_episodes: int | None,
            progress: bool, max_seconds: float | None) -> dict:
        c = self.counters
        self.eval_interval = eval_interval_for(self.config, c, eval_interval)
        self.eval_episodes = eval_episodes or self.config.train.eval_episodes
        c.next_eval, self.evals, last_eval = next_eval_after(c, self.eval_interval), {}, {}
        self.learner_steps, self.chunk = c.train_steps, None
        if self.resumed:
            self.files.log("resume", c, trainer="ray", budget=self.config.train.budget,
                           replay_moves=ray.get(self.replay.size.remote()))
            # the evaluation the checkpoint left unlogged starts before self-play does, on the
            # checkpoint's weights at the checkpoint's steps, as the lost one would have been
            self._evaluations()
        # the workers' loops: self-play until the budget is spent, the buffer sweep until the run stops
        self.loops = {("selfplay", i): w.run.remote() for i, w in enumerate(self.selfplay)}
        if self.config.reanalyze.mode == "buffer":
            self.loops.update({("reanalyze", i): w.sweep.remote() for i, w in enumerate(self.reanalyzers)})
        self.retries: dict[tuple, float] = {}  # loops of workers Ray is restarting: when to start them again
        self.chunk = self._next_chunk(checkpoint_interval)
        clock, diverged = TrainingProgress(c, self.config.agent_steps_budget, progress, max_seconds), False
        nodes_checked = time.time()
        try:
            while self.busy() and clock.tick(c):
                ray.wait([r for r in [self.chunk, *self.loops.values(), *self.evals] if r is not None],
                         num_returns=1, timeout=0.5)
                self._learning(checkpoint_interval)   # --- learner chunks, train metrics, checkpoints ---
                self._watch_loops()                   # --- dead or finished worker loops ---
                self._log_events()                    # --- episodes, restarts, env failures ---
                self._evaluations()                   # --- periodic evaluation, a remote task ---
                if time.time() - nodes_checked > 1.0:  # --- nodes that left the cluster ---
                    self._raise_if_node_lost()
                    nodes_checked = time.time()
            if not self.busy():
                last_eval = self._final_evaluation()
        except FloatingPointError as error:
            diverged = True  # keep the last good checkpoint: this state is not one
            self.files.log("diverged", c, error=str(error))
            raise
        except EnvironmentFailed as error:  # the checkpoint written below resumes the run once the env is mended
            self.files.log("env_failed", c, error=str(error))
            raise type(error)(f"{error}; {env_remedy(error)}, then resume the run with its checkpoint: "
                              f"ez-robot train --resume {shlex.quote(str(self.run_dir))}") from None
        except (TrainingAborted, ray.exceptions.RayError):  # a worker's death: was it its node's?
            self._raise_if_node_lost(NODE_LOSS_SECONDS)
            raise
        finally:
            clock.close()
            self._shutdown(save=not diverged)
        return clock.summary(c, last_eval, self.seconds, finished=not self.busy(), restarts=self.restarts)

    def busy(self) -> bool:
        """Training steps or self-play left (or a dead self-play worker to run again)."""
        return self.chunk is not None or self._selfplay_running()

    def _selfplay_running(self) -> bool:
        return any(kind == "selfplay" for kind, _ in [*self.loops, *self.retries])

    def _next_chunk(self, checkpoint_interval: int):
        if self.counters.train_steps >= self.total:
            return None
        if not self._selfplay_running():  # self-play is over: can training go on?
            problem = replay_shortfall(self.config, self.counters, ray.get(self.replay.size.remote()))
            if problem:
                raise TrainingAborted(problem)
        stop_at = (self.counters.train_steps // checkpoint_interval + 1) * checkpoint_interval
        return self.learner.train.remote(stop_at, 1.0)

    def _learning(self, checkpoint_interval: int) -> None:
        if self.chunk is None or not ray.wait([self.chunk], timeout=0)[0]:
            return
        try:
            result = ray.get(self.chunk)
        except ray.exceptions.RayTaskError as error:
            if isinstance(error.cause, (FloatingPointError, TrainingAborted)):
                raise type(error.cause)(str(error.cause)) from None
            raise  # a bug: keep Ray's traceback of it
        except ray.exceptions.RayActorError as error:
            raise TrainingAborted(f"the learner process died ({str(error).splitlines()[0]}); resume the run "
                                  f"from its last checkpoint with `ez-robot train --resume {shlex.quote(str(self.run_dir))}`") from None
        c, previous = self.counters, self.counters.train_steps
        c.train_steps = result["train_steps"]
        self._add_seconds(result["seconds"])
        for train_steps, metrics in result["records"]:
            self.files.log("train", c.at(train_steps=train_steps), **metrics)
        if c.train_steps != previous and c.train_steps % checkpoint_interval == 0:
            self._save()
        self.chunk = self._next_chunk(checkpoint_interval)

    def _watch_loops(self) -> None:
        """Worker loops that finished (self-play's share of the budget), or whose worker died
        (Ray restarts it: start the loop again) or failed."""
        for key, retry_at in list(self.retries.items()):
            if time.time() >= retry_at:
                del self.retries[key]
                kind, index = key
                worker = self.selfplay[index] if kind == "selfplay" else self.reanalyzers[index]
                self.loops[key] = (worker.run if kind == "selfplay" else worker.sweep).remote()
        for key, ref in list(self.loops.items()):
            if not ray.wait([ref], timeout=0)[0]:
                continue
            del self.loops[key]
            kind, index = key
            try:
                ray.get(ref)  # it finished its share of the budget
            except ray.exceptions.ActorDiedError as error:
                raise TrainingAborted(f"{kind} worker {index} died and Ray could not restart it (max_restarts "
                                      f"{self.max_restarts}): {str(error).splitlines()[0]}") from None
            except ray.exceptions.RayActorError:  # restarting: ask again in a moment
                self.retries[key] = time.time() + 0.5
            except ray.exceptions.RayTaskError as error:
                _raise_env_failure(error, f"{kind} worker {index}")
                raise  # a bug: keep Ray's traceback of it

    def _log_events(self) -> dict:
        """Logs what the storage gathered; returns it (with the counters a checkpoint keeps,
        taken with those events, so that a checkpoint's counters and log agree)."""
        news = ray.get(self.storage.drain.remote())
        c, now = self.counters, news["counters"]
        c.agent_steps, c.env_frames, c.episodes, c.recent_returns = \
            now.agent_steps, now.env_frames, now.episodes, now.recent_returns
        self.learner_steps = now.train_steps  # the learner's count now; c's is its last chunk's
        self.restarts = news["restarts"]
        self._add_seconds(news["seconds"])
        for kind, counters, values in news["events"]:
            self.files.log(kind, counters, **values)
        return news

    def _evaluations(self) -> None:
        c = self.counters
        if c.agent_steps >= c.next_eval and (c.agent_steps < self.config.agent_steps_budget or self._offline_left()):
            self.evals[self._evaluate()] = (c.next_eval, c.at(train_steps=self.learner_steps))
            c.next_eval = (c.agent_steps // self.eval_interval + 1) * self.eval_interval
        # logged in the order they were started: one that finishes before an earlier one waits
        # for it, so the curve's steps only grow and a checkpoint's pending evaluation (the
        # earliest one still running) comes after every one logged before it
        for ref in list(self.evals):
            if not ray.wait([ref], timeout=0)[0]:
                break
            self._log_eval(ref)

    def _offline_left(self) -> bool:
        """Offline training steps still to come: the budget gets an evaluation before them (the
        final one covers it otherwise)."""
        return self.config.train.offline_train_steps > 0 and self.chunk is not None

    def _evaluate(self):
        return evaluate_weights.options(**self.placement.evaluation()).remote(
            self.config, self.spec, self.learner.weights.remote(), self.eval_episodes, self.threads,
            self.placement.device)

    def _log_eval(self, ref) -> dict:
        _, counters = self.evals.pop(ref)
        try:
            result = ray.get(ref)
        except ray.exceptions.RayTaskError as error:
            _raise_env_failure(error, "evaluation")
            raise  # a bug: keep Ray's traceback of it
        self.seconds["evaluation"] += result.pop("seconds")
        self.files.log("eval", counters, **result)
        return result

    def _final_evaluation(self) -> dict:
        for ref in list(self.evals):  # the periodic ones still running
            self._log_eval(ref)
        c = self.counters
        ref = self._evaluate()
        self.evals[ref] = (c.next_eval, c.at())
        result = self._log_eval(ref)
        c.next_eval = (c.agent_steps // self.eval_interval + 1) * self.eval_interval  # a longer budget goes on
        c.final_eval = c.agent_steps
        return result

    def _add_seconds(self, seconds: dict) -> None:
        for name, value in seconds.items():
            self.seconds[name] += value

    def _save(self) -> None:
        """A checkpoint: the learner's state between two chunks, the counters, the replay."""
        start = time.perf_counter()
        learner = ray.get(self.learner.state_dict.remote())
        counters = self._log_events()["saved"]
        counters.train_steps = learner["train_steps"]
        # an evaluation still running is redone after a resume: the schedule restarts at it
        counters.next_eval = min([point for point, _ in self.evals.values()], default=self.counters.next_eval)
        counters.final_eval = self.counters.final_eval
        replay = ray.get(self.replay.save.remote())
        self.files.checkpoint(trainer="ray", config=self.config, spec=self.spec, counters=counters, learner=learner,
                              replay=replay, restarts=self.restarts)
        if replay is not None:
            ray.get(self.replay.prune.remote(replay))
        self.seconds["checkpoint"] += time.perf_counter() - start

    def _shutdown(self, save: bool) -> None:
        """Stops self-play, checkpoints (at the end, on Ctrl-C, on errors), ends the actors."""
        try:
            ray.get(self.storage.stop.remote())
            if save:
                self._save()
        except (ray.exceptions.RayError, TrainingAborted) as error:  # a dead learner: the last periodic one stands
            _log.warning("no checkpoint at exit (%s); %s keeps the last periodic one", str(error).splitlines()[0],
                         self.run_dir / "checkpoints")
        finally:
            self._end_actors()
            self.files.close()

    def _end_actors(self) -> None:
        for name in ("selfplay", "reanalyzers", "learner", "replay", "storage"):
            actors = getattr(self, name, [])
            for actor in actors if isinstance(actors, list) else [actors]:
                ray.kill(actor)
