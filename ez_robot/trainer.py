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
from ez_robot.inference import TorchInference, effective_search_config, run_search
from ez_robot.learner import Learner
from ez_robot.networks import make_network
from ez_robot.reanalyze import reanalyze
from ez_robot.replay import ReplayBuffer
from ez_robot.targets import dynamic_horizon, prepare_context

__all__ = ["train", "evaluate", "resolve_device", "Counters", "CHECKPOINT_FORMAT"]

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
    inference = TorchInference(net, device)
    search_config = effective_search_config(config.search, config.train.value_prefix).replace(
        add_noise=False, temperature=0.0)
    envs = [make_from_config(config.env, seed=seed + i, mode="eval") for i in range(episodes)]
    observations = [env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]
    returns, done = np.zeros(episodes), np.zeros(episodes, bool)
    rng = np.random.default_rng(seed)
    net.eval()
    while not done.all():
        live = np.flatnonzero(~done)
        out = run_search(inference, np.stack([observations[i] for i in live]), search_config, rng)
        for i, action in zip(live, out.actions):
            obs, reward, terminated, truncated, _ = envs[i].step(int(action))
            returns[i] += reward
            observations[i] = obs
            done[i] = terminated or truncated
    return returns.tolist()


class _RunFiles:
    """The run directory: config, metrics (JSONL), checkpoints (written atomically)."""

    def __init__(self, run_dir: Path, config: Config):
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "checkpoints").mkdir(exist_ok=True)
        with open(self.dir / "config.yaml", "w") as f:
            yaml.safe_dump(config_to_dict(config), f, sort_keys=False)
        self.metrics = open(self.dir / "metrics.jsonl", "a")

    def log(self, kind: str, counters: Counters, **values) -> None:
        record = {"kind": kind, "time": time.time(), "agent_steps": counters.agent_steps,
                  "env_frames": counters.env_frames, "train_steps": counters.train_steps, **values}
        self.metrics.write(json.dumps(record) + "\n")
        self.metrics.flush()

    def checkpoint(self, state: dict, name: str = "latest.pt") -> Path:
        path = self.dir / "checkpoints" / name
        tmp = path.with_suffix(".tmp")
        torch.save(state, tmp)
        os.replace(tmp, path)  # a kill never leaves a half-written checkpoint
        return path


def train(config: Config, run_dir: Path | str, *, device: str = "auto", num_envs: int = 1,
          checkpoint_interval: int = 1000, eval_interval: int | None = None, eval_episodes: int | None = None,
          progress: bool = True) -> dict:
    """Trains until the budget is spent.  Returns a summary (counters, last evaluation)."""
    dev = resolve_device(device)
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    files = _RunFiles(Path(run_dir), config)
    t, K = config.train, config.train.unroll_steps
    search_config = effective_search_config(config.search, t.value_prefix)

    envs = [make_from_config(config.env, seed=config.seed + i, mode="train") for i in range(num_envs)]
    obs_shape, num_actions = envs[0].observation_space.shape, int(envs[0].action_space.n)
    net = make_network(obs_shape, num_actions, config.model, value_prefix=t.value_prefix).to(dev)
    acting_net, target_net = copy.deepcopy(net).eval(), copy.deepcopy(net).eval()
    budget_steps = config.agent_steps_budget
    total_train_steps = max(1, math.ceil(budget_steps * t.train_steps_per_agent_step))
    learner = Learner(net, config, total_train_steps, dev)
    replay = ReplayBuffer(config.replay)
    frame_stack = config.env.frame_stack if len(obs_shape) == 3 else 1
    actor = Actor(envs, TorchInference(acting_net, dev), search_config, segment_length=config.replay.segment_length,
                  tail_length=K + t.td_steps, frame_stack=frame_stack, seed=config.seed)
    target_inference = TorchInference(target_net, dev)
    counters = Counters()
    eval_interval = eval_interval or max(budget_steps // 10, 1)
    next_eval = eval_interval
    last_eval: dict = {}

    def checkpoint_state() -> dict:
        return {"format": CHECKPOINT_FORMAT, "ez_robot_version": ez_robot.__version__,
                "torch_version": torch.__version__, "config": config_to_dict(config),
                "obs_shape": tuple(obs_shape), "num_actions": num_actions,
                "model": net.state_dict(), "target_model": target_net.state_dict(),
                "optimizer": learner.optimizer.state_dict(), "counters": counters.__dict__,
                "numpy_rng": rng.bit_generator.state, "torch_rng": torch.get_rng_state()}

    bar = _progress(progress, budget_steps)
    start = time.time()
    diverged = False
    try:
        while counters.agent_steps < budget_steps or counters.train_steps < total_train_steps:
            # --- self-play ---
            if counters.agent_steps < budget_steps:
                temperature = temperature_at(counters.train_steps / total_train_steps)
                segments, episodes = actor.step(counters.train_steps, temperature)
                for segment in segments:
                    replay.add(segment)
                counters.agent_steps += num_envs
                counters.env_frames += num_envs * config.env.action_repeat
                for ep in episodes:
                    counters.episodes += 1
                    counters.recent_returns = (counters.recent_returns + [ep.episode_return])[-20:]
                    files.log("episode", counters, episode_return=ep.episode_return, length=ep.length)
            elif not replay.ready():
                raise RuntimeError(f"the budget ({budget_steps} agent steps) is spent but the replay holds "
                                   f"{len(replay)} moves, below min_replay_size ({config.replay.min_replay_size})")

            # --- learning, at train_steps_per_agent_step ---
            due = total_train_steps if counters.agent_steps >= budget_steps else \
                int(counters.agent_steps * t.train_steps_per_agent_step)
            while replay.ready() and counters.train_steps < min(due, total_train_steps):
                metrics = _train_step(replay, learner, target_inference, search_config, config, counters,
                                      total_train_steps, rng)
                counters.train_steps += 1
                if counters.train_steps % t.selfplay_update_interval == 0:
                    acting_net.load_state_dict(net.state_dict())
                if counters.train_steps % t.target_update_interval == 0:
                    target_net.load_state_dict(net.state_dict())
                if counters.train_steps % 50 == 0:
                    files.log("train", counters, **metrics)
                if counters.train_steps % checkpoint_interval == 0:
                    files.checkpoint(checkpoint_state())

            # --- periodic evaluation ---
            if counters.agent_steps >= next_eval and counters.agent_steps <= budget_steps:
                next_eval += eval_interval
                returns = evaluate(net, config, dev, eval_episodes or t.eval_episodes, seed=10_000 + config.seed)
                last_eval = {"mean": float(np.mean(returns)), "std": float(np.std(returns)), "returns": returns}
                files.log("eval", counters, **last_eval)
            _advance(bar, counters, budget_steps, start)
    except FloatingPointError as error:
        diverged = True  # keep the last good checkpoint: this state is not one
        files.log("diverged", counters, error=str(error))
        raise
    finally:
        _close(bar)
        if not diverged:  # at the end, and on Ctrl-C or any other error
            files.checkpoint(checkpoint_state())
        files.metrics.close()
    return {"agent_steps": counters.agent_steps, "env_frames": counters.env_frames,
            "train_steps": counters.train_steps, "episodes": counters.episodes,
            "wall_seconds": time.time() - start, "last_eval": last_eval}


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
