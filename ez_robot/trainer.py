"""The single-process trainer: self-play, reanalyze and learning in one loop, no Ray.

It runs the objects :mod:`ez_robot.builders` makes (actor, replay, learner), the same
ones the Ray trainer (:mod:`ez_robot.ray_trainer`) places on workers, and is the
reference for tests, laptops and debugging.  Both trainers write the same run directory
and checkpoints, and either resumes a run the other wrote.
"""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from ez_robot import step_trace
from ez_robot._timing import Stopwatch, TimedInference
from ez_robot.batch import sample_batch
from ez_robot.builders import EnvSpec, make_actor, make_envs, make_learner, make_replay
from ez_robot.checkpoint import ReplayFiles
from ez_robot.config import Config
from ez_robot.device import check_compile, resolve_device, set_threads
from ez_robot.errors import ConfigError, EnvironmentFailed, EnvValueError, TrainingAborted
from ez_robot.evaluation import evaluate
from ez_robot.inference import make_inference
from ez_robot.reanalyze import Sweeper, reanalyze, reanalyze_search_config
from ez_robot.replay import ReplayBuffer
from ez_robot.run_files import RunFiles, Sink, holds_run_dir
from ez_robot.schedules import (TRAIN_LOG_INTERVAL, Counters, eval_interval_for, finished, next_eval_after,
                                paced_train_steps, replay_shortfall, temperature_at, train_steps_due)
from ez_robot.progress import ProgressDisplay, TrainingProgress, interrupt_on_sigterm

__all__ = ["train", "check_resumable", "replay_moves_at"]


class _Run:
    """The objects of one run (actor, replay, learner) and what the loop does with them.
    ``resume`` is a checkpoint to go on from."""

    def __init__(self, config: Config, dev: torch.device, num_envs: int, *, resume: dict | None = None,
                 replay_files: ReplayFiles | None = None):
        self.config, self.dev, self.num_envs, self.replay_files = config, dev, num_envs, replay_files
        self.rng = np.random.default_rng(config.seed)
        self.stopwatch = Stopwatch()
        self.search_config = reanalyze_search_config(config)
        # a resumed run starts fresh episodes: other env seeds than the run's first ones
        seed = config.seed + (resume["counters"]["agent_steps"] if resume else 0)
        envs = make_envs(config, seed, num_envs)
        self.spec = EnvSpec.of(envs[0], config.env)
        self.learner = make_learner(config, self.spec, dev)
        self.total_train_steps = self.learner.total_train_steps
        self.paced_train_steps = paced_train_steps(config)  # self-play's share: its temperature spans it
        self.replay: ReplayBuffer = make_replay(config)
        backend = config.train.inference
        self.inferences = {  # the learner's snapshots, as the searches call them
            "acting": TimedInference(make_inference(self.learner.acting_net, dev, backend), self.stopwatch,
                                     "selfplay.inference"),
            "target": TimedInference(make_inference(self.learner.target_net, dev, backend), self.stopwatch,
                                     "reanalyze.inference")}
        self.inference_versions = dict(self.learner.versions)
        self.actor = make_actor(config, self.spec, envs, self.inferences["acting"], seed)
        self.target_inference = self.inferences["target"]
        self.counters = Counters()
        self.sweeper = Sweeper(config, self.target_inference, self.search_config, self.rng) \
            if config.reanalyze.mode == "buffer" else None
        if resume is not None:
            self._restore(resume)

    def done(self) -> bool:
        c = self.counters
        return c.agent_steps >= self.config.agent_steps_budget and c.train_steps >= self.total_train_steps

    def collect(self, files: RunFiles) -> None:
        """One decision in every env; finished segments go to replay."""
        c = self.counters
        if c.agent_steps >= self.config.agent_steps_budget:
            return
        with self.stopwatch("selfplay"):
            played = self.actor.step(c.train_steps, temperature_at(c.train_steps, self.paced_train_steps))
            c.agent_steps += self.num_envs
            segments = played.segments
            if c.agent_steps >= self.config.agent_steps_budget:  # self-play ends: unfinished episodes go too
                segments += self.actor.flush()
        for segment in segments:
            self.replay.add(segment)
        c.env_frames += self.num_envs * self.config.env.action_repeat
        for error in played.env_errors:
            files.log("env_failure", c, error=error)
        for episode in played.episodes:
            c.add_episode(episode.episode_return)
            files.log("episode", c, episode_return=episode.episode_return, length=episode.length)

    def learn(self, files: RunFiles, checkpoint_interval: int, clock: TrainingProgress) -> None:
        """Training steps until the learner is at train_steps_per_agent_step of the actor
        (or the time limit is reached).  The offline steps come TRAIN_LOG_INTERVAL at a time,
        after the evaluation at the budget, with the progress bar's updates in between."""
        c = self.counters
        paced = self.paced_train_steps
        stop = paced if c.train_steps < paced else c.train_steps + TRAIN_LOG_INTERVAL
        due = min(train_steps_due(self.config, c.agent_steps), stop)
        while self.replay.ready() and c.train_steps < due and clock.tick(c):  # a long catch-up shows progress
            metrics = self._train_step()
            c.train_steps += 1
            self._refresh_inference()
            if self.sweeper is not None:  # buffer reanalyze
                with self.stopwatch("reanalyze.sweep"):
                    self.sweeper.step(self.replay, self.learner.versions["target"], c.train_steps)
            if c.train_steps % TRAIN_LOG_INTERVAL == 0:
                files.log("train", c, **metrics)
            if c.train_steps % checkpoint_interval == 0:
                self.save(files)

    def _refresh_inference(self) -> None:
        """The searches' copies of the acting and target networks, after the learner
        refreshed them (onnxruntime graphs are exported again)."""
        for kind, version in self.learner.versions.items():
            if version != self.inference_versions[kind]:
                self.inferences[kind].refresh()
                self.inference_versions[kind] = version

    def _train_step(self) -> dict:
        """sample -> dynamic horizon -> context -> reanalyze -> SGD step -> new priorities."""
        t = self.config.train
        with self.stopwatch("sample"):
            ref, context = sample_batch(self.replay, self.config, self.counters.train_steps, self.spec.action,
                                        self.rng, target_version=self.learner.versions["target"])
        with self.stopwatch("reanalyze"):
            targets = reanalyze(context, self.target_inference, self.search_config, self.rng,
                                policy_ratio=t.reanalyze_policy_ratio)
        acting = self.learner.versions["acting"]
        with self.stopwatch("learner"):
            metrics, priorities = self.learner.step(context, targets, ref.weights)
        if step_trace.enabled():
            step_trace.write(context, targets, metrics["lr"], acting, self.counters.agent_steps)
        self.replay.update_priorities(ref.segment_ids, ref.positions, priorities)
        return metrics

    def starved(self) -> str | None:
        """Why the learner can never train again (self-play is over, the replay too small)."""
        return replay_shortfall(self.config, self.counters, len(self.replay))

    def evaluate(self, files: RunFiles, episodes: int) -> dict:
        with self.stopwatch("evaluation"):
            result = evaluate(self.learner.net, self.config, self.dev, episodes)
        result.pop("seconds")
        files.log("eval", self.counters, **result)
        return result

    def save(self, files: RunFiles) -> None:
        """A checkpoint (and the replay segments stored since the last one)."""
        with self.stopwatch("checkpoint"):
            replay = self.replay_files.save(self.replay) if self.replay_files else None
            files.checkpoint(trainer="single", config=self.config, spec=self.spec, counters=self.counters,
                             learner=self.learner.state_dict(), replay=replay, actor=self.actor.state_dict(),
                             rng={"sample": self.rng.bit_generator.state, "torch": torch.get_rng_state()})
            if replay is not None:
                self.replay_files.prune(replay)

    def _restore(self, state: dict) -> None:
        self.learner.load_state_dict(state["learner"])
        self.counters = Counters.from_state_dict(state["counters"])
        rng = state.get("rng") or {}
        if "sample" in rng:
            self.rng.bit_generator.state = rng["sample"]
        else:  # a Ray checkpoint keeps no generator of ours: derive one from where the run stands
            self.rng.bit_generator.state = np.random.default_rng(
                [self.config.seed, self.counters.train_steps]).bit_generator.state
        if "torch" in rng:
            torch.set_rng_state(rng["torch"])
        for inference in self.inferences.values():  # the snapshots' weights came from the checkpoint
            inference.refresh()
        self.inference_versions = dict(self.learner.versions)
        if state.get("actor"):
            self.actor.load_state_dict(state["actor"])
        if self.replay_files and state.get("replay"):
            self.replay = self.replay_files.load(self.config.replay, state["replay"])


def replay_moves_at(state: dict, replay_checkpoint: bool) -> int:
    """Moves the replay holds when a run resumes from ``state``."""
    if not replay_checkpoint or not state.get("replay"):
        return 0
    return sum(len(p) for p in state["replay"]["priorities"])


def check_resumable(config: Config, state: dict, run_dir: Path | str, replay_checkpoint: bool = True) -> None:
    """Before a resumed run starts anything: it must have budget, training steps or its final
    evaluation left (a larger --budget or more offline training steps extend a finished run),
    its replay files must be whole, and it must be able to fill its replay to where training
    can sample."""
    counters = Counters.from_state_dict(state["counters"])
    if finished(config, counters):
        raise ConfigError(
            f"the run already finished its budget ({counters.agent_steps} agent steps, {counters.train_steps} "
            f"training steps; budget {config.train.budget} {config.env.budget_unit}); give a larger --budget "
            "to extend it, or --set train.offline_train_steps=N to train it N steps more on its replay")
    if replay_checkpoint and state.get("replay"):
        ReplayFiles(Path(run_dir) / "checkpoints" / "replay").check(state["replay"])
    problem = replay_shortfall(config, counters, replay_moves_at(state, replay_checkpoint))
    if problem:
        raise ConfigError(f"cannot resume: {problem}")


@holds_run_dir
def train(config: Config, run_dir: Path | str, *, device: str = "auto", num_envs: int = 1,
          checkpoint_interval: int = 1000, eval_interval: int | None = None, eval_episodes: int | None = None,
          progress: bool | ProgressDisplay = True, threads: int = 1, resume: dict | None = None,
          replay_checkpoint: bool = True, max_seconds: float | None = None, sinks: Sequence[Sink] = ()) -> dict:
    """Trains until the budget is spent and the learner has done its training steps;
    evaluates every ``eval_interval`` agent steps and at the end.  Returns a summary.

    ``resume`` is the checkpoint of ``run_dir`` (:func:`ez_robot.checkpoint.read_checkpoint`)
    to go on from, with ``config`` its config (perhaps with a larger budget).
    ``max_seconds`` stops the training process earlier (a job's time limit, a benchmark), with a
    checkpoint that resumes it and without the final evaluation.  Ctrl-C and SIGTERM stop
    it with a checkpoint too, and so does an env that keeps failing or returns a NaN
    (:class:`ez_robot.errors.EnvironmentFailed`, logged as ``env_failed``).  ``progress`` is
    what it shows (True: a bar on a terminal, lines elsewhere;
    :class:`ez_robot.progress.ProgressDisplay`); ``sinks`` hear of every record logged
    (:class:`ez_robot.run_files.RunFiles`)."""
    set_threads(threads)
    torch.manual_seed(config.seed)
    if resume is not None:
        check_resumable(config, resume, run_dir, replay_checkpoint)
    replay_files = ReplayFiles(Path(run_dir) / "checkpoints" / "replay") if replay_checkpoint else None
    check_compile(config.train.compile, resolve_device(device))
    run = _Run(config, resolve_device(device), num_envs, resume=resume, replay_files=replay_files)
    files = RunFiles(run_dir, config, resume_from=resume, sinks=sinks)
    c = run.counters
    if resume is not None:
        files.log("resume", c, trainer="single", budget=config.train.budget, replay_moves=len(run.replay))
    eval_interval = eval_interval_for(config, c, eval_interval)
    eval_episodes = eval_episodes or config.train.eval_episodes
    c.next_eval, last_eval, diverged = next_eval_after(c, eval_interval), {}, False
    clock = TrainingProgress(c, config.agent_steps_budget, progress, max_seconds)
    try:
        with interrupt_on_sigterm():
            while not run.done() and clock.tick(c):
                run.collect(files)                                  # --- self-play ---
                run.learn(files, checkpoint_interval, clock)         # --- reanalyze + learning ---
                if c.agent_steps >= c.next_eval and not run.done():  # --- periodic evaluation ---
                    last_eval = run.evaluate(files, eval_episodes)
                    c.next_eval = (c.agent_steps // eval_interval + 1) * eval_interval
                if c.agent_steps >= config.agent_steps_budget and (problem := run.starved()):
                    raise TrainingAborted(problem)  # self-play is over: nothing would ever train
            if run.done():
                last_eval = run.evaluate(files, eval_episodes)
                c.next_eval = (c.agent_steps // eval_interval + 1) * eval_interval  # a longer budget goes on from here
                c.final_eval = c.agent_steps
    except FloatingPointError as error:
        diverged = True  # keep the last good checkpoint: this state is not one
        files.log("diverged", c, error=str(error))
        raise
    except EnvironmentFailed as error:  # the checkpoint written below resumes the run once the env is mended
        files.log("env_failed", c, error=str(error))
        raise type(error)(f"{error}; {env_remedy(error)}, then resume the run with its checkpoint: "
                          f"ez-robot train --resume {shlex.quote(str(run_dir))}") from None
    finally:
        clock.close()
        if not diverged:  # at the end, and on Ctrl-C, SIGTERM or any other error
            run.save(files)
        files.close()
    return clock.summary(c, last_eval, run.stopwatch.seconds, finished=run.done())


def env_remedy(error: EnvironmentFailed) -> str:
    """What the user can do about an env that stopped a run."""
    if isinstance(error, EnvValueError):
        return "mend the env"
    return "mend the env (or allow more failures: --set env.max_failures_in_a_row=N)"
