"""The single-process trainer: self-play, reanalyze and learning in one loop, no Ray.

It composes the objects a distributed trainer places on workers (actor, replay,
reanalyze, learner) and is the reference for tests, laptops and debugging.
"""
from __future__ import annotations

import copy
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import yaml

import ez_robot
from ez_robot.actor import Actor
from ez_robot.config import Config, config_to_dict
from ez_robot.envs import make_from_config
from ez_robot.evaluation import play
from ez_robot.inference import TorchInference, effective_search_config
from ez_robot.learner import Learner
from ez_robot.networks import make_network
from ez_robot.reanalyze import reanalyze
from ez_robot.replay import ReplayBuffer
from ez_robot.targets import dynamic_horizon, prepare_context

__all__ = ["train", "evaluate", "resolve_device", "set_threads", "Counters", "CHECKPOINT_FORMAT"]

CHECKPOINT_FORMAT = 1


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


def temperature_at(progress: float) -> float:
    """Visit-count temperature 1 -> 0.5 -> 0.25 at 50% and 75% of training (appendix)."""
    return 1.0 if progress < 0.5 else 0.5 if progress < 0.75 else 0.25


def evaluate(net, config: Config, device, episodes: int, seed: int) -> list[float]:
    """Greedy search (no root noise, temperature 0) in eval-mode envs; returns raw returns."""
    return play(net, config, device, episodes, seed).returns


class _RunFiles:
    """The run directory: config, metrics (JSONL), checkpoints (written atomically)."""

    def __init__(self, run_dir: Path, config: Config):
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "checkpoints").mkdir(exist_ok=True)
        with open(self.dir / "config.yaml", "w") as f:
            yaml.safe_dump(config_to_dict(config), f, sort_keys=False)
        self.metrics = open(self.dir / "metrics.jsonl", "a")
        from torch.utils.tensorboard import SummaryWriter

        self.tensorboard = SummaryWriter(str(self.dir / "tensorboard"))

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

    def checkpoint(self, state: dict, name: str = "latest.pt") -> Path:
        path = self.dir / "checkpoints" / name
        tmp = path.with_suffix(".tmp")
        torch.save(state, tmp)
        os.replace(tmp, path)  # a kill never leaves a half-written checkpoint
        return path


class _Training:
    """The objects of one run (actor, replay, learner, reanalyze's target network) and
    the three things the loop does with them."""

    def __init__(self, config: Config, dev: torch.device, num_envs: int):
        t = config.train
        self.config, self.dev, self.num_envs = config, dev, num_envs
        self.rng = np.random.default_rng(config.seed)
        self.search_config = effective_search_config(config.search, t.value_prefix)
        envs = [make_from_config(config.env, seed=config.seed + i, mode="train") for i in range(num_envs)]
        self.obs_shape, self.num_actions = envs[0].observation_space.shape, int(envs[0].action_space.n)
        self.net = make_network(self.obs_shape, self.num_actions, config.model, value_prefix=t.value_prefix).to(dev)
        self.acting_net, self.target_net = copy.deepcopy(self.net).eval(), copy.deepcopy(self.net).eval()
        self.budget_steps = config.agent_steps_budget
        self.total_train_steps = max(1, math.ceil(self.budget_steps * t.train_steps_per_agent_step))
        self.learner = Learner(self.net, config, self.total_train_steps, dev)
        self.replay = ReplayBuffer(config.replay)
        self.actor = Actor(envs, TorchInference(self.acting_net, dev), self.search_config,
                           segment_length=config.replay.segment_length, tail_length=t.unroll_steps + t.td_steps,
                           frame_stack=config.env.frame_stack if len(self.obs_shape) == 3 else 1, seed=config.seed)
        self.target_inference = TorchInference(self.target_net, dev)
        self.counters = Counters()

    def done(self) -> bool:
        c = self.counters
        return c.agent_steps >= self.budget_steps and c.train_steps >= self.total_train_steps

    def collect(self, files: "_RunFiles") -> None:
        """One decision in every env; finished segments go to replay."""
        c = self.counters
        if c.agent_steps >= self.budget_steps:
            return
        segments, episodes = self.actor.step(c.train_steps, temperature_at(c.train_steps / self.total_train_steps))
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

    def learn(self, files: "_RunFiles", checkpoint_interval: int) -> None:
        """Training steps until the learner is at train_steps_per_agent_step of the actor."""
        c, t = self.counters, self.config.train
        due = self.total_train_steps if c.agent_steps >= self.budget_steps else \
            min(int(c.agent_steps * t.train_steps_per_agent_step), self.total_train_steps)
        while self.replay.ready() and c.train_steps < due:
            metrics = _train_step(self.replay, self.learner, self.target_inference, self.search_config, self.config,
                                  c, self.total_train_steps, self.rng)
            c.train_steps += 1
            if c.train_steps % t.selfplay_update_interval == 0:
                self.acting_net.load_state_dict(self.net.state_dict())
            if c.train_steps % t.target_update_interval == 0:
                self.target_net.load_state_dict(self.net.state_dict())
            if c.train_steps % 50 == 0:
                files.log("train", c, **metrics)
            if c.train_steps % checkpoint_interval == 0:
                files.checkpoint(self.state())

    def evaluate(self, files: "_RunFiles", episodes: int) -> dict:
        returns = evaluate(self.net, self.config, self.dev, episodes, seed=10_000 + self.config.seed)
        result = {"mean": float(np.mean(returns)), "std": float(np.std(returns)), "returns": returns}
        files.log("eval", self.counters, **result)
        return result

    def state(self) -> dict:
        return {"format": CHECKPOINT_FORMAT, "ez_robot_version": ez_robot.__version__,
                "torch_version": torch.__version__, "config": config_to_dict(self.config),
                "obs_shape": tuple(self.obs_shape), "num_actions": self.num_actions,
                "model": self.net.state_dict(), "target_model": self.target_net.state_dict(),
                "optimizer": self.learner.optimizer.state_dict(), "counters": dict(self.counters.__dict__),
                "numpy_rng": self.rng.bit_generator.state, "torch_rng": torch.get_rng_state()}


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
          progress: bool = True, threads: int = 1) -> dict:
    """Trains until the budget is spent and the learner has done its training steps;
    evaluates every ``eval_interval`` agent steps and at the end.  Returns a summary."""
    set_threads(threads)
    torch.manual_seed(config.seed)
    run = _Training(config, resolve_device(device), num_envs)
    files = _RunFiles(Path(run_dir), config)
    eval_interval = eval_interval or max(run.budget_steps // 10, 1)
    eval_episodes = eval_episodes or config.train.eval_episodes
    next_eval, last_eval, diverged = eval_interval, {}, False
    bar, start = _progress(progress, run.budget_steps), time.time()
    try:
        while not run.done():
            run.collect(files)                      # --- self-play ---
            run.learn(files, checkpoint_interval)   # --- reanalyze + learning ---
            if run.counters.agent_steps >= next_eval and not run.done():  # --- periodic evaluation ---
                next_eval += eval_interval
                last_eval = run.evaluate(files, eval_episodes)
            _advance(bar, run.counters, run.budget_steps, start)
        last_eval = run.evaluate(files, eval_episodes)
    except FloatingPointError as error:
        diverged = True  # keep the last good checkpoint: this state is not one
        files.log("diverged", run.counters, error=str(error))
        raise
    finally:
        _close(bar)
        if not diverged:  # at the end, and on Ctrl-C or any other error
            files.checkpoint(run.state())
        files.close()
    c = run.counters
    return {"agent_steps": c.agent_steps, "env_frames": c.env_frames, "train_steps": c.train_steps,
            "episodes": c.episodes, "wall_seconds": time.time() - start, "last_eval": last_eval}


def _train_step(replay, learner, target_inference, search_config, config, counters, total_train_steps, rng):
    t = config.train
    beta = config.replay.priority_beta_start + (config.replay.priority_beta_end - config.replay.priority_beta_start) \
        * min(counters.train_steps / total_train_steps, 1.0)
    ref = replay.sample(t.batch_size, beta, rng)
    collected = np.array([s.collected_at[p] for s, p in zip(ref.segments, ref.positions)])
    horizons = dynamic_horizon(collected, counters.train_steps, total_train_steps, t.td_steps,
                               t.dynamic_horizon_tau) if t.off_policy_correction else np.full(len(collected),
                                                                                               t.td_steps)
    context = prepare_context(ref, unroll_steps=t.unroll_steps, horizons=horizons, discount=search_config.discount,
                              lstm_horizon=search_config.lstm_horizon, num_actions=learner.net.num_actions, rng=rng)
    targets = reanalyze(context, ref.segments, target_inference, search_config, rng,
                        policy_ratio=t.reanalyze_policy_ratio, off_policy_correction=t.off_policy_correction)
    metrics, priorities = learner.step(context, targets, ref.weights)
    replay.update_priorities(ref.segment_ids, ref.positions, priorities)
    return metrics


def _progress(enabled: bool, total: int):
    if not enabled:
        return None
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(TextColumn("[bold]train"), BarColumn(), TextColumn("{task.completed}/{task.total} agent steps"),
                   TextColumn("{task.fields[status]}"), TimeRemainingColumn())
    bar.start()
    bar.add_task("train", total=total, status="")
    return bar


def _advance(bar, counters: Counters, total: int, start: float) -> None:
    if bar is None:
        return
    recent = f"return {np.mean(counters.recent_returns):.1f}" if counters.recent_returns else "return -"
    rate = counters.agent_steps / max(time.time() - start, 1e-9)
    bar.update(bar.task_ids[0], completed=min(counters.agent_steps, total),
               status=f"{recent} | {counters.train_steps} train steps | {rate:.1f} steps/s")


def _close(bar) -> None:
    if bar is not None:
        bar.stop()
