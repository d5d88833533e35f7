"""The single-process trainer: self-play, reanalyze and learning in one loop, no Ray.

It composes the objects the Ray trainer (:mod:`ez_robot.ray_trainer`) places on workers
(actor, replay, reanalyze, learner) and is the reference for tests, laptops and debugging.
Both trainers write the same run directory and checkpoints (:mod:`ez_robot.checkpoint`),
and either resumes a run the other wrote.
"""
from __future__ import annotations

import copy
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import yaml

from ez_robot._timing import Stopwatch, TimedInference
from ez_robot.actor import Actor
from ez_robot.checkpoint import CHECKPOINT_FORMAT, CheckpointError, ReplayFiles, metadata, write_checkpoint
from ez_robot.config import Config, config_to_dict
from ez_robot.envs import make_from_config
from ez_robot.evaluation import play
from ez_robot.inference import effective_search_config
from ez_robot.learner import Learner
from ez_robot.networks import make_network
from ez_robot.reanalyze import reanalyze
from ez_robot.replay import ReplayBuffer
from ez_robot.targets import dynamic_horizon, prepare_context

__all__ = ["train", "evaluate", "resolve_device", "set_threads", "Counters", "CHECKPOINT_FORMAT", "sample_batch",
           "temperature_at", "total_train_steps", "train_steps_due", "make_actor"]


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda was asked for, but torch sees no CUDA device; use --device auto or cpu")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"--device must be auto, cpu or cuda, got {device!r}")
    return torch.device(device)


@dataclass
class Counters:
    agent_steps: int = 0
    env_frames: int = 0
    train_steps: int = 0
    episodes: int = 0
    recent_returns: list = field(default_factory=list)


def total_train_steps(config: Config) -> int:
    return max(1, math.ceil(config.agent_steps_budget * config.train.train_steps_per_agent_step))


def train_steps_due(config: Config, agent_steps: int) -> int:
    """Training steps the learner may have done after ``agent_steps`` decisions: the
    config's ratio, and all of them once self-play has spent the budget."""
    total = total_train_steps(config)
    if agent_steps >= config.agent_steps_budget:
        return total
    return min(int(agent_steps * config.train.train_steps_per_agent_step), total)


def make_actor(config: Config, envs: list, inference, obs_shape, seed: int) -> Actor:
    """Self-play over ``envs`` with the run's search, segment and frame-stack settings."""
    t = config.train
    return Actor(envs, inference, effective_search_config(config.search, t.value_prefix),
                 segment_length=config.replay.segment_length, tail_length=t.unroll_steps + t.td_steps,
                 frame_stack=config.env.frame_stack if len(obs_shape) == 3 else 1, seed=seed)


def temperature_at(progress: float) -> float:
    """Visit-count temperature 1 -> 0.5 -> 0.25 at 50% and 75% of training (appendix)."""
    return 1.0 if progress < 0.5 else 0.5 if progress < 0.75 else 0.25


def evaluate(net, config: Config, device, episodes: int, seed: int) -> list[float]:
    """Greedy search (no root noise, temperature 0) in eval-mode envs; returns raw returns."""
    return play(net, config, device, episodes, seed).returns


class _RunFiles:
    """The run directory: config, metrics (JSONL + TensorBoard), checkpoints.

    Resuming from ``resume_from`` (a checkpoint) cuts metrics.jsonl back to where that
    checkpoint was taken, and TensorBoard drops the events after it, so that the logs go
    on from the checkpoint's counters without the steps a killed run did after it."""

    def __init__(self, run_dir: Path, config: Config, *, resume_from: dict | None = None):
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "checkpoints").mkdir(exist_ok=True)
        with open(self.dir / "config.yaml", "w") as f:
            yaml.safe_dump(config_to_dict(config), f, sort_keys=False)
        metrics_path, purge_step = self.dir / "metrics.jsonl", None
        if resume_from is not None:
            keep = resume_from.get("metrics_bytes")
            if keep is not None and metrics_path.exists() and metrics_path.stat().st_size > keep:
                with open(metrics_path, "r+b") as f:
                    f.truncate(keep)
            purge_step = int(resume_from["counters"].get("env_frames", 0)) + 1
        self.metrics = open(metrics_path, "a")
        from torch.utils.tensorboard import SummaryWriter

        self.tensorboard = SummaryWriter(str(self.dir / "tensorboard"), purge_step=purge_step)

    def log(self, kind: str, counters: Counters, **values) -> None:
        record = {"kind": kind, "time": time.time(), "agent_steps": counters.agent_steps,
                  "env_frames": counters.env_frames, "train_steps": counters.train_steps, **values}
        self.metrics.write(json.dumps(record) + "\n")
        self.metrics.flush()
        for name, value in values.items():  # scalars only, against env frames (the budget's x-axis)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self.tensorboard.add_scalar(f"{kind}/{name}", value, counters.env_frames)

    def close(self) -> None:
        self.metrics.close()
        self.tensorboard.close()

    def checkpoint(self, state: dict) -> Path:
        """Writes ``state`` as the run's checkpoint, with where the metrics log stands."""
        self.metrics.flush()
        return write_checkpoint(self.dir, {**state, "metrics_bytes": self.metrics.tell()})


class _Training:
    """The objects of one run (actor, replay, learner, reanalyze's target network) and
    the three things the loop does with them.  ``resume`` is a checkpoint to go on from."""

    def __init__(self, config: Config, dev: torch.device, num_envs: int, *, resume: dict | None = None,
                 replay_files: ReplayFiles | None = None):
        t = config.train
        self.config, self.dev, self.num_envs = config, dev, num_envs
        self.rng = np.random.default_rng(config.seed)
        self.stopwatch = Stopwatch()
        self.search_config = effective_search_config(config.search, t.value_prefix)
        # a resumed run starts fresh episodes: other env seeds than the run's first ones
        seed = config.seed + (resume["counters"]["agent_steps"] if resume else 0)
        envs = [make_from_config(config.env, seed=seed + i, mode="train") for i in range(num_envs)]
        self.obs_shape, self.num_actions = envs[0].observation_space.shape, int(envs[0].action_space.n)
        self.net = make_network(self.obs_shape, self.num_actions, config.model, value_prefix=t.value_prefix).to(dev)
        self.acting_net, self.target_net = copy.deepcopy(self.net).eval(), copy.deepcopy(self.net).eval()
        self.budget_steps = config.agent_steps_budget
        self.total_train_steps = total_train_steps(config)
        self.learner = Learner(self.net, config, self.total_train_steps, dev)
        self.replay = ReplayBuffer(config.replay)
        self.replay_files = replay_files
        self.actor = make_actor(config, envs, TimedInference(self.acting_net, dev, self.stopwatch,
                                                             "selfplay.inference"), self.obs_shape, seed)
        self.target_inference = TimedInference(self.target_net, dev, self.stopwatch, "reanalyze.inference")
        self.counters = Counters()
        if resume is not None:
            self._restore(resume)

    def done(self) -> bool:
        c = self.counters
        return c.agent_steps >= self.budget_steps and c.train_steps >= self.total_train_steps

    def collect(self, files: "_RunFiles") -> None:
        """One decision in every env; finished segments go to replay."""
        c = self.counters
        if c.agent_steps >= self.budget_steps:
            return
        with self.stopwatch("selfplay"):
            segments, episodes = self.actor.step(c.train_steps,
                                                 temperature_at(c.train_steps / self.total_train_steps))
            c.agent_steps += self.num_envs
            if c.agent_steps >= self.budget_steps:  # self-play ends: unfinished episodes go to replay too
                segments += self.actor.flush()
        for segment in segments:
            self.replay.add(segment)
        c.env_frames += self.num_envs * self.config.env.action_repeat
        for ep in episodes:
            c.episodes += 1
            c.recent_returns = (c.recent_returns + [ep.episode_return])[-20:]
            files.log("episode", c, episode_return=ep.episode_return, length=ep.length)

    def learn(self, files: "_RunFiles", checkpoint_interval: int, deadline: float | None = None) -> None:
        """Training steps until the learner is at train_steps_per_agent_step of the actor
        (or the session's time is up)."""
        c, t = self.counters, self.config.train
        due = train_steps_due(self.config, c.agent_steps)
        while self.replay.ready() and c.train_steps < due and (deadline is None or time.time() < deadline):
            metrics = self._train_step()
            c.train_steps += 1
            if c.train_steps % t.selfplay_update_interval == 0:
                self.acting_net.load_state_dict(self.net.state_dict())
            if c.train_steps % t.target_update_interval == 0:
                self.target_net.load_state_dict(self.net.state_dict())
            if c.train_steps % 50 == 0:
                files.log("train", c, **metrics)
            if c.train_steps % checkpoint_interval == 0:
                self.save(files)

    def _train_step(self) -> dict:
        """sample -> dynamic horizon -> context -> reanalyze -> SGD step -> new priorities."""
        t, c = self.config.train, self.counters
        with self.stopwatch("sample"):
            ref, context = sample_batch(self.replay, self.config, c.train_steps, self.total_train_steps,
                                        self.num_actions, self.search_config, self.rng)
        with self.stopwatch("reanalyze"):
            targets = reanalyze(context, ref.segments, self.target_inference, self.search_config, self.rng,
                                policy_ratio=t.reanalyze_policy_ratio, off_policy_correction=t.off_policy_correction)
        with self.stopwatch("learner"):
            metrics, priorities = self.learner.step(context, targets, ref.weights)
        self.replay.update_priorities(ref.segment_ids, ref.positions, priorities)
        return metrics

    def evaluate(self, files: "_RunFiles", episodes: int) -> dict:
        with self.stopwatch("evaluation"):
            returns = evaluate(self.net, self.config, self.dev, episodes, seed=10_000 + self.config.seed)
        result = {"mean": float(np.mean(returns)), "std": float(np.std(returns)), "returns": returns}
        files.log("eval", self.counters, **result)
        return result

    def save(self, files: "_RunFiles") -> None:
        """A checkpoint (and the replay segments stored since the last one)."""
        with self.stopwatch("checkpoint"):
            state = self.state()
            state["replay"] = self.replay_files.save(self.replay) if self.replay_files else None
            files.checkpoint(state)
            if self.replay_files:
                self.replay_files.prune(state["replay"])

    def state(self) -> dict:
        return {**metadata("single"), "config": config_to_dict(self.config),
                "obs_shape": tuple(self.obs_shape), "num_actions": self.num_actions,
                "model": self.net.state_dict(), "target_model": self.target_net.state_dict(),
                "acting_model": self.acting_net.state_dict(), "optimizer": self.learner.optimizer.state_dict(),
                "learner": {"train_steps": self.learner.train_steps, "generator": self.learner.generator.get_state()},
                "counters": dict(self.counters.__dict__), "restarts": 0,
                "numpy_rng": self.rng.bit_generator.state, "actor_rng": self.actor.rng.bit_generator.state,
                "torch_rng": torch.get_rng_state()}

    def _restore(self, state: dict) -> None:
        load_networks(state, self.net, self.target_net, self.acting_net, self.learner)
        self.counters = Counters(**state["counters"])
        self.learner.train_steps = state.get("learner", {}).get("train_steps", self.counters.train_steps)
        self.rng.bit_generator.state = state["numpy_rng"]
        if "actor_rng" in state:
            self.actor.rng.bit_generator.state = state["actor_rng"]
        torch.set_rng_state(state["torch_rng"])
        if self.replay_files and state.get("replay"):
            self.replay = self.replay_files.load(self.config.replay, state["replay"])


def load_networks(state: dict, net, target_net, acting_net, learner) -> None:
    """Weights, target and acting weights, optimizer and augmentation RNG from a checkpoint."""
    try:
        net.load_state_dict(state["model"])
        target_net.load_state_dict(state["target_model"])
        acting_net.load_state_dict(state.get("acting_model", state["model"]))
        learner.optimizer.load_state_dict(state["optimizer"])
    except (RuntimeError, ValueError, KeyError) as error:
        detail = " ".join(str(error).split())
        raise CheckpointError(f"the checkpoint's weights do not fit the network its config describes (written by "
                              f"ez-robot {state.get('ez_robot_version', '?')}): {detail[:400]}") from None
    if "generator" in state.get("learner", {}):
        learner.generator.set_state(state["learner"]["generator"])


def check_resumable(config: Config, state: dict) -> None:
    """A resumed run must have budget left (a larger --budget extends a finished run)."""
    counters = state["counters"]
    if counters["agent_steps"] >= config.agent_steps_budget and counters["train_steps"] >= total_train_steps(config):
        raise CheckpointError(
            f"the run already finished its budget ({counters['agent_steps']} agent steps, {counters['train_steps']} "
            f"training steps; budget {config.train.budget} {config.env.budget_unit}); give a larger --budget "
            "to extend it")


def set_threads(threads: int) -> None:
    """Torch intra-op threads for this process.

    One is the default everywhere: the search runs the networks on small batches, where
    extra threads gain little, and when processes together ask for more threads than the
    machine has cores, torch's OpenMP workers spin against each other.  Measured on the
    2-core machine with a second busy process: a tiny run took 375 s with 2 threads and
    7.7 s with 1.  Raise it for large learner batches on an otherwise idle machine.
    """
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    torch.set_num_threads(threads)


def train(config: Config, run_dir: Path | str, *, device: str = "auto", num_envs: int = 1,
          checkpoint_interval: int = 1000, eval_interval: int | None = None, eval_episodes: int | None = None,
          progress: bool = True, threads: int = 1, resume: dict | None = None, replay_checkpoint: bool = True,
          max_seconds: float | None = None) -> dict:
    """Trains until the budget is spent and the learner has done its training steps;
    evaluates every ``eval_interval`` agent steps and at the end.  Returns a summary.

    ``resume`` is the checkpoint of ``run_dir`` (:func:`ez_robot.checkpoint.read_checkpoint`)
    to go on from, with ``config`` its config (perhaps with a larger budget).
    ``max_seconds`` stops the session earlier (a job's time limit, a benchmark), with a
    checkpoint that resumes it and without the final evaluation."""
    set_threads(threads)
    torch.manual_seed(config.seed)
    if resume is not None:
        check_resumable(config, resume)
    replay_files = ReplayFiles(Path(run_dir) / "checkpoints" / "replay") if replay_checkpoint else None
    run = _Training(config, resolve_device(device), num_envs, resume=resume, replay_files=replay_files)
    files = _RunFiles(Path(run_dir), config, resume_from=resume)
    if resume is not None:
        files.log("resume", run.counters, trainer="single", budget=config.train.budget, replay_moves=len(run.replay))
    eval_interval = eval_interval or max(run.budget_steps // 10, 1)
    eval_episodes = eval_episodes or config.train.eval_episodes
    next_eval, last_eval, diverged = (run.counters.agent_steps // eval_interval + 1) * eval_interval, {}, False
    session = Session(run.counters, run.budget_steps, progress, max_seconds)
    try:
        while not run.done() and session.tick(run.counters):
            run.collect(files)                      # --- self-play ---
            run.learn(files, checkpoint_interval, session.deadline)  # --- reanalyze + learning ---
            if run.counters.agent_steps >= next_eval and not run.done():  # --- periodic evaluation ---
                next_eval += eval_interval
                last_eval = run.evaluate(files, eval_episodes)
        if run.done():
            last_eval = run.evaluate(files, eval_episodes)
    except FloatingPointError as error:
        diverged = True  # keep the last good checkpoint: this state is not one
        files.log("diverged", run.counters, error=str(error))
        raise
    finally:
        session.close()
        if not diverged:  # at the end, and on Ctrl-C or any other error
            run.save(files)
        files.close()
    return session.summary(run.counters, last_eval, run.stopwatch.seconds, finished=run.done())


class Session:
    """One training session (a run, or the part of it since a resume): its progress bar,
    time limit and rates, over the whole session and over its training phase (once the
    replay buffer filled and the learner started)."""

    def __init__(self, counters: Counters, budget_steps: int, progress: bool, max_seconds: float | None):
        self.start, self.budget_steps = time.time(), budget_steps
        self.deadline = self.start + max_seconds if max_seconds is not None else None
        self.first = (counters.agent_steps, counters.train_steps)
        self.training: tuple | None = None  # (time, agent steps, train steps) at the first training step
        self.bar = _progress(progress, budget_steps)

    def tick(self, counters: Counters) -> bool:
        """Updates the progress bar; False once the time limit is reached."""
        if self.training is None and counters.train_steps > self.first[1]:
            self.training = (time.time(), counters.agent_steps, counters.train_steps)
        _advance(self.bar, counters, self.budget_steps, self.start, self.first[0])
        return self.deadline is None or time.time() < self.deadline

    def close(self) -> None:
        _close(self.bar)

    def summary(self, counters: Counters, last_eval: dict, seconds: dict, **extra) -> dict:
        c, now = counters, time.time()
        wall = max(now - self.start, 1e-9)
        out = {"agent_steps": c.agent_steps, "env_frames": c.env_frames, "train_steps": c.train_steps,
               "episodes": c.episodes, "wall_seconds": wall, "last_eval": last_eval,
               "agent_steps_per_second": (c.agent_steps - self.first[0]) / wall,
               "train_steps_per_second": (c.train_steps - self.first[1]) / wall,
               "seconds": dict(seconds), "training_phase": None, **extra}
        if self.training is not None and now - self.training[0] > 0:
            span = now - self.training[0]
            out["training_phase"] = {"seconds": span, "agent_steps_per_second": (c.agent_steps - self.training[1]) / span,
                                     "train_steps_per_second": (c.train_steps - self.training[2]) / span}
        return out


def sample_batch(replay: ReplayBuffer, config: Config, train_steps: int, total_train_steps: int, num_actions: int,
                 search_config, rng: np.random.Generator):
    """A prioritized sample and its CPU context (beta annealed, dynamic horizon from each
    move's collection step).  Returns (SampleRef, BatchContext)."""
    t, r = config.train, config.replay
    beta = r.priority_beta_start + (r.priority_beta_end - r.priority_beta_start) * min(
        train_steps / total_train_steps, 1.0)
    ref = replay.sample(t.batch_size, beta, rng)
    collected = np.array([s.collected_at[p] for s, p in zip(ref.segments, ref.positions)])
    horizons = dynamic_horizon(collected, train_steps, total_train_steps, t.td_steps, t.dynamic_horizon_tau) \
        if t.off_policy_correction else np.full(len(collected), t.td_steps)
    context = prepare_context(ref, unroll_steps=t.unroll_steps, horizons=horizons, discount=search_config.discount,
                              lstm_horizon=search_config.lstm_horizon, num_actions=num_actions, rng=rng)
    return ref, context


def _progress(enabled: bool, total: int):
    if not enabled:
        return None
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(TextColumn("[bold]train"), BarColumn(), TextColumn("{task.completed}/{task.total} agent steps"),
                   TextColumn("{task.fields[status]}"), TimeRemainingColumn())
    bar.start()
    bar.add_task("train", total=total, status="")
    return bar


def _advance(bar, counters: Counters, total: int, start: float, start_steps: int = 0) -> None:
    if bar is None:
        return
    recent = f"return {np.mean(counters.recent_returns):.1f}" if counters.recent_returns else "return -"
    rate = (counters.agent_steps - start_steps) / max(time.time() - start, 1e-9)
    bar.update(bar.task_ids[0], completed=min(counters.agent_steps, total),
               status=f"{recent} | {counters.train_steps} train steps | {rate:.1f} steps/s")


def _close(bar) -> None:
    if bar is not None:
        bar.stop()
