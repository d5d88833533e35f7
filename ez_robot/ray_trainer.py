"""The Ray trainer: self-play, reanalyze and learning in parallel processes.

The same objects as the single-process trainer (:mod:`ez_robot.trainer`), placed on Ray
actors (the paper's appendix "Training Details")::

    SelfPlayWorker x N --segments--> ReplayWorker <--priorities-- LearnerWorker
      (Actor: its envs,                (ReplayBuffer;               (Learner; asks 2 batches
       one batched search)              sample + CPU context)        ahead per reanalyzer)
            ^                                 |                           ^      |
            | acting weights (every 100)      v                           |      | target
       SharedStorage  <---counters---  Reanalyzer x M  --prepared batch---+      | weights
      (counters, throttle,              (target-network search,                  | (every 200)
       acting weights, events)           reanalyze())  <-------------------------+

- The learner keeps two ``prepare`` calls queued on every reanalyze worker (Ray runs an
  actor's calls in order), so a batch is ready when it asks and it never waits on a single
  reanalyze call; with ``reanalyze_workers=0`` it reanalyzes in its own process.
- The replay actor prepares the context (CPU) itself: it holds the segments, and shipping
  a batch's context is far cheaper than shipping the segments it comes from.
- Self-play and learning keep the single-process ratio: the learner trains up to
  ``train_steps_per_agent_step`` x agent steps, and self-play runs at most two requests
  (16 decisions) per worker ahead of the learner, except while the replay fills.
- The driver (this process) logs, checkpoints every ``checkpoint_interval`` training steps
  and at exit (Ctrl-C included), and evaluates with the learner's current weights.
- Faults: a worker process that dies is restarted by Ray (``max_restarts``), pulls the
  latest weights and goes on; restarts are logged.  An env that raises is made again, and
  its unfinished episode is dropped (the segments already cut from it are whole); too many
  failures of one env in a row stop the run with the error.
"""
from __future__ import annotations

import logging
import math
import os
import socket
import time
import uuid
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import ray
import torch

from ez_robot._timing import Stopwatch, TimedInference
from ez_robot.checkpoint import ReplayFiles, metadata
from ez_robot.config import Config, config_to_dict
from ez_robot.envs import make_from_config
from ez_robot.evaluation import play
from ez_robot.inference import effective_search_config
from ez_robot.learner import Learner
from ez_robot.networks import make_network
from ez_robot.reanalyze import Targets, reanalyze
from ez_robot.replay import ReplayBuffer
from ez_robot.targets import BatchContext
from ez_robot.trainer import (Counters, Session, _RunFiles, check_resumable, load_networks, make_actor,
                              resolve_device, sample_batch, set_threads, temperature_at, total_train_steps,
                              train_steps_due)

__all__ = ["train", "init_ray", "EnvironmentFailed", "TrainingAborted", "ClusterUnreachable"]

_log = logging.getLogger(__name__)

MAX_ENV_FAILURES_IN_A_ROW = 5
BATCHES_AHEAD_PER_REANALYZER = 2  # double buffering


class EnvironmentFailed(RuntimeError):
    """An environment kept raising after being made again; the run stops."""


class TrainingAborted(RuntimeError):
    """A worker could not be kept alive, or failed in a way a restart cannot fix."""


class ClusterUnreachable(ConnectionError):
    """No Ray cluster answers at the address given."""


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


def init_ray(address: str | None = None, num_cpus: int | None = None) -> bool:
    """Connects to a cluster (``address``: ``auto`` or ``ray://host:port``), or starts an
    embedded local one without dashboard or auth token.  Returns whether it started Ray
    (and so should shut it down)."""
    if ray.is_initialized():
        return False
    if address is None:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
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


def _actor(name: str):
    """A run's actor by name.  Workers find each other by name rather than receiving
    handles as constructor arguments, which Ray cannot guarantee across restarts."""
    return ray.get_actor(name)


def _cpu_weights(net: torch.nn.Module) -> dict:
    return {name: value.detach().cpu() for name, value in net.state_dict().items()}


# --- environments that fail ------------------------------------------------------------

class _GuardedEnv:
    """An env that is made again when it raises.  The step that failed reads as a
    truncation to the Actor; ``failed`` tells the worker to drop that episode's end."""

    def __init__(self, make, seed: int):
        self.make, self.seed, self.failures_in_a_row, self.failures = make, seed, 0, 0
        self.env, self.reseed = make(seed), None
        self.observation_space, self.action_space = self.env.observation_space, self.env.action_space
        self.failed = self.ended = False
        self.last_obs = None
        self.errors: list[str] = []

    def reset(self, seed=None, options=None):
        while True:
            try:
                obs, info = self.env.reset(seed=seed if seed is not None else self.reseed, options=options)
                self.reseed, self.last_obs = None, obs
                return obs, info
            except Exception as error:  # noqa: BLE001 - any env error counts
                self._remake(error)

    def step(self, action):
        try:
            obs, reward, terminated, truncated, info = self.env.step(action)
        except Exception as error:  # noqa: BLE001
            self._remake(error)
            self.failed = self.ended = True
            return self.last_obs, 0.0, False, True, {"env_error": repr(error)}
        self.failures_in_a_row, self.failed, self.ended, self.last_obs = 0, False, terminated or truncated, obs
        return obs, reward, terminated, truncated, info

    def _remake(self, error: Exception) -> None:
        self.failures_in_a_row += 1
        self.failures += 1
        self.errors.append(f"{type(error).__name__}: {error}")
        if self.failures_in_a_row > MAX_ENV_FAILURES_IN_A_ROW:
            raise EnvironmentFailed(f"an environment failed {self.failures_in_a_row} times in a row, the last "
                                    f"with {type(error).__name__}: {error}") from error
        try:
            self.env.close()
        except Exception:  # noqa: BLE001 - it is broken already
            pass
        self.reseed = self.seed + 7919 * self.failures
        self.env = self.make(self.reseed)

    def close(self):
        self.env.close()


def _drop_failed(envs: list[_GuardedEnv], segments: list, episodes: list) -> tuple[list, list]:
    """Drops the final segment and the stats of episodes whose env failed this step.

    Actor.step returns the cut segments first (episode_end False), then one final segment
    and one EpisodeStats per ended episode, in env order."""
    ended = [env for env in envs if env.ended]
    finals = [s for s in segments if s.episode_end]
    if len(finals) != len(ended) or len(episodes) != len(ended):
        raise RuntimeError(f"{len(ended)} episodes ended but the actor returned {len(finals)} final segments")
    kept = [s for s in segments if not s.episode_end] + [s for s, env in zip(finals, ended) if not env.failed]
    return kept, [e for e, env in zip(episodes, ended) if not env.failed]


# --- shared storage ---------------------------------------------------------------------

class SharedStorage:
    """Counters, the throttle between self-play and learning, the acting and target
    weights, worker starts, and the events the driver logs."""

    def __init__(self, config: Config, counters: dict, weights: dict, lead: int, restarts: int = 0):
        self.config, self.counters, self.weights = config, dict(counters), weights  # {kind: (version, state)}
        self.budget, self.total_train_steps = config.agent_steps_budget, total_train_steps(config)
        self.lead = lead  # agent steps self-play may run ahead of the learner's ratio
        self.replay_moves, self.stopping, self.restarts = 0, False, restarts
        self.starts: dict[str, int] = defaultdict(int)
        self.events: list = []
        self.seconds: dict[str, float] = defaultdict(float)

    def request_steps(self, wanted: int, num_envs: int) -> dict:
        """Grants up to ``wanted`` agent steps (whole decisions of ``num_envs``)."""
        c, ratio = self.counters, self.config.train.train_steps_per_agent_step
        ceiling = self.budget
        if self.replay_moves >= self.config.replay.min_replay_size:
            ceiling = min(ceiling, int(c["train_steps"] / ratio) + self.lead)
        granted = min(wanted, ceiling - c["agent_steps"])
        granted = num_envs * math.ceil(granted / num_envs) if granted > 0 and not self.stopping else 0
        c["agent_steps"] += granted
        c["env_frames"] += granted * self.config.env.action_repeat
        return {"granted": granted, "train_steps": c["train_steps"], "acting_version": self.weights["acting"][0],
                "selfplay_done": c["agent_steps"] >= self.budget, "stop": self.stopping}

    def report(self, episodes: list, env_errors: list[str], seconds: dict) -> None:
        for episode in episodes:
            self.counters["episodes"] += 1
            self.events.append(("episode", dict(self.counters),
                                {"episode_return": episode.episode_return, "length": episode.length}))
        for error in env_errors:
            self.events.append(("env_failure", dict(self.counters), {"error": error}))
        self.add_seconds(seconds)

    def add_seconds(self, seconds: dict) -> None:
        for name, value in seconds.items():
            self.seconds[name] += value

    def set_weights(self, kind: str, version: int, state: dict) -> None:
        self.weights[kind] = (version, state)

    def get_weights(self, kind: str) -> tuple[int, dict]:
        return self.weights[kind]

    def set_train_steps(self, train_steps: int) -> None:
        self.counters["train_steps"] = train_steps

    def set_replay_moves(self, moves: int) -> None:
        self.replay_moves = moves

    def get_counters(self) -> dict:
        return dict(self.counters)

    def worker_started(self, kind: str, index: int) -> int:
        """Counts a worker's (re)starts; returns how many times it started before."""
        key = f"{kind}-{index}"
        generation = self.starts[key]
        self.starts[key] += 1
        if generation:
            self.restarts += 1
            self.events.append(("restart", dict(self.counters), {"worker": key, "restarts": self.restarts}))
        return generation

    def drain(self) -> dict:
        events, self.events = self.events, []
        seconds, self.seconds = dict(self.seconds), defaultdict(float)
        return {"counters": dict(self.counters), "events": events, "restarts": self.restarts, "seconds": seconds}

    def stop(self) -> None:
        self.stopping = True


# --- replay -----------------------------------------------------------------------------

class _BootstrapObservations:
    """The observations reanalyze needs from one sampled segment (its bootstrap
    observations), shipped instead of the whole segment."""

    def __init__(self, segment, indices: np.ndarray):
        self.by_index = {int(i): segment.observation(int(i)) for i in indices if i >= 0}

    def observation(self, index: int) -> np.ndarray:
        return self.by_index[int(index)]


@dataclass
class _Sample:
    context: BatchContext
    observations: list        # [B] _BootstrapObservations
    segment_ids: np.ndarray   # [B] int64
    positions: np.ndarray     # [B] int64
    weights: np.ndarray       # [B] float32 importance-sampling weights


class ReplayWorker:
    """The replay buffer, and the CPU half of reanalyze (sampling and context)."""

    def __init__(self, config: Config, storage: str, num_actions: int, seed: int, replay_dir: str | None,
                 replay_state: dict | None):
        self.config, self.storage, self.num_actions = config, _actor(storage), num_actions
        self.rng = np.random.default_rng(seed)
        self.search_config = effective_search_config(config.search, config.train.value_prefix)
        self.files = ReplayFiles(replay_dir) if replay_dir else None
        self.replay = self.files.load(config.replay, replay_state) if self.files and replay_state \
            else ReplayBuffer(config.replay)
        self.storage.set_replay_moves.remote(len(self.replay))

    def add(self, segments: list) -> None:
        for segment in segments:
            self.replay.add(segment)
        self.storage.set_replay_moves.remote(len(self.replay))

    def sample(self, train_steps: int, total: int) -> _Sample | None:
        if not self.replay.ready():
            return None
        ref, context = sample_batch(self.replay, self.config, train_steps, total, self.num_actions,
                                    self.search_config, self.rng)
        observations = [_BootstrapObservations(s, context.bootstrap_index[b]) for b, s in enumerate(ref.segments)]
        return _Sample(context, observations, ref.segment_ids, ref.positions, ref.weights)

    def update_priorities(self, segment_ids, positions, priorities) -> None:
        self.replay.update_priorities(segment_ids, positions, priorities)

    def save(self) -> dict | None:
        return self.files.save(self.replay) if self.files else None

    def prune(self, state: dict) -> None:
        self.files.prune(state)

    def size(self) -> int:
        return len(self.replay)


# --- reanalyze --------------------------------------------------------------------------

@dataclass
class _Prepared:
    """A batch ready for a learner step."""
    context: BatchContext
    targets: Targets
    weights: np.ndarray
    segment_ids: np.ndarray
    positions: np.ndarray
    seconds: dict


class Reanalyzer:
    """Fresh target-network searches for sampled batches (the device half of reanalyze)."""

    def __init__(self, index: int, config: Config, names: dict, obs_shape, num_actions: int, device: str,
                 threads: int, seed: int, remote: bool = True):
        self.storage, self.replay = _actor(names["storage"]), _actor(names["replay"])
        if remote:
            set_threads(threads)
            ray.get(self.storage.worker_started.remote("reanalyze", index))
        self.config, self.stopwatch = config, Stopwatch()
        self.rng = np.random.default_rng(seed)
        self.dev = resolve_device(device)
        self.search_config = effective_search_config(config.search, config.train.value_prefix)
        self.net = make_network(obs_shape, num_actions, config.model, value_prefix=config.train.value_prefix)
        self.net = self.net.to(self.dev).eval()
        self.inference = TimedInference(self.net, self.dev, self.stopwatch, "reanalyze.inference")
        self.target_version = -1

    def prepare(self, train_steps: int, total: int, target_version: int) -> _Prepared | None:
        """One batch: sample + context (replay actor), then reanalyze with the target network."""
        if target_version != self.target_version:
            self.target_version, weights = ray.get(self.storage.get_weights.remote("target"))
            self.net.load_state_dict(weights)
        with self.stopwatch("sample"):
            sample = ray.get(self.replay.sample.remote(train_steps, total))
        if sample is None:
            return None
        t = self.config.train
        with self.stopwatch("reanalyze"):
            targets = reanalyze(sample.context, sample.observations, self.inference, self.search_config, self.rng,
                                policy_ratio=t.reanalyze_policy_ratio,
                                off_policy_correction=t.off_policy_correction)
        return _Prepared(sample.context, targets, sample.weights, sample.segment_ids, sample.positions,
                         self.stopwatch.take())


# --- learner ----------------------------------------------------------------------------

class LearnerWorker:
    """The learner and its networks; trains in chunks the driver asks for."""

    def __init__(self, config: Config, names: dict, obs_shape, num_actions: int, device: str, threads: int,
                 initial: dict):
        set_threads(threads)
        # batches arrive through the object store, read-only; the learner only reads them
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        self.config, self.storage, self.replay = config, _actor(names["storage"]), _actor(names["replay"])
        self.reanalyzers = [_actor(name) for name in names["reanalyzers"]]
        self.dev, self.stopwatch = resolve_device(device), Stopwatch()
        self.total = total_train_steps(config)
        self.net = make_network(obs_shape, num_actions, config.model, value_prefix=config.train.value_prefix)
        self.learner = Learner(self.net, config, self.total, self.dev)
        # ``initial``: a checkpoint, or {"model": weights} of the run's first network
        scratch = [make_network(obs_shape, num_actions, config.model, value_prefix=config.train.value_prefix)
                   for _ in range(2)]
        if "optimizer" in initial:
            load_networks(initial, self.net, *scratch, self.learner)
            self.learner.train_steps = initial.get("learner", {}).get("train_steps", initial["counters"]["train_steps"])
            torch.set_rng_state(initial["torch_rng"])
        else:
            self.net.load_state_dict(initial["model"])
        self.net.to(self.dev)
        self.train_steps = self.learner.train_steps
        self.target_version = ray.get(self.storage.get_weights.remote("target"))[0]
        self.local = None if self.reanalyzers else Reanalyzer(0, config, names, obs_shape, num_actions, device,
                                                              threads, seed=config.seed + 1, remote=False)
        self.pending: dict = {}  # request -> index of the reanalyze worker that prepares it
        self.due = 0

    def train(self, stop_at: int, max_seconds: float) -> dict:
        """Training steps until ``stop_at``, the ratio to self-play, or ``max_seconds``."""
        t, records, start = self.config.train, [], time.perf_counter()
        while self.train_steps < min(stop_at, self.total) and time.perf_counter() - start < max_seconds:
            if self.train_steps >= self._due():
                with self.stopwatch("learner.due_wait"):  # self-play is behind
                    time.sleep(0.02)
                continue
            prepared = self._next_batch()
            if prepared is None:  # the replay is still filling
                continue
            with self.stopwatch("learner"):
                metrics, priorities = self.learner.step(prepared.context, prepared.targets, prepared.weights)
            self.replay.update_priorities.remote(prepared.segment_ids, prepared.positions, priorities)
            self.train_steps = self.learner.train_steps
            self.storage.set_train_steps.remote(self.train_steps)
            if self.train_steps % t.selfplay_update_interval == 0:
                ray.get(self.storage.set_weights.remote("acting", self.train_steps, _cpu_weights(self.net)))
            if self.train_steps % t.target_update_interval == 0:
                self.target_version = self.train_steps
                ray.get(self.storage.set_weights.remote("target", self.train_steps, _cpu_weights(self.net)))
            if self.train_steps % 50 == 0:
                records.append((self.train_steps, metrics))
        return {"train_steps": self.train_steps, "records": records, "seconds": self.stopwatch.take()}

    def _due(self) -> int:
        """Training steps allowed now: the ratio to agent steps, all of them once self-play ended."""
        if self.train_steps >= self.due:
            self.due = train_steps_due(self.config, ray.get(self.storage.get_counters.remote())["agent_steps"])
        return self.due

    def _next_batch(self) -> _Prepared | None:
        if self.local is not None:
            prepared = self.local.prepare(self.train_steps, self.total, self.target_version)
        else:
            prepared = self._from_reanalyzers()
        if prepared is None:
            time.sleep(0.05)
            return None
        for name, seconds in prepared.seconds.items():
            self.stopwatch.add(name, seconds)
        return prepared

    def _from_reanalyzers(self) -> _Prepared | None:
        """The first ready of the batches asked for ahead; asks for the next ones."""
        # each worker keeps its own two requests: refilling by position instead would drift
        # every request onto one worker and leave the others idle
        for index, worker in enumerate(self.reanalyzers):
            for _ in range(BATCHES_AHEAD_PER_REANALYZER - list(self.pending.values()).count(index)):
                self.pending[worker.prepare.remote(self.train_steps, self.total, self.target_version)] = index
        with self.stopwatch("learner.batch_wait"):
            ready, _ = ray.wait(list(self.pending), num_returns=1)
        del self.pending[ready[0]]
        try:
            return ray.get(ready[0])
        except ray.exceptions.ActorDiedError as error:
            raise TrainingAborted(f"a reanalyze worker died and Ray could not restart it: "
                                  f"{str(error).splitlines()[0]}") from None
        except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError):
            return None  # Ray is restarting the worker; the next request waits for it

    def weights(self) -> dict:
        return _cpu_weights(self.net)

    def state(self) -> dict:
        return {"model": self.net.state_dict(), "target_model": ray.get(self.storage.get_weights.remote("target"))[1],
                "acting_model": ray.get(self.storage.get_weights.remote("acting"))[1],
                "optimizer": self.learner.optimizer.state_dict(),
                "learner": {"train_steps": self.train_steps, "generator": self.learner.generator.get_state()},
                "torch_rng": torch.get_rng_state()}


# --- self-play --------------------------------------------------------------------------

class SelfPlayWorker:
    """An :class:`Actor` over ``num_envs`` envs; pulls the acting weights when they change."""

    STEPS_PER_REQUEST = 8  # decisions between two calls to the storage

    def __init__(self, index: int, config: Config, names: dict, num_envs: int, obs_shape, num_actions: int,
                 device: str, threads: int, start_steps: int):
        set_threads(threads)
        self.storage, self.replay = _actor(names["storage"]), _actor(names["replay"])
        generation = ray.get(self.storage.worker_started.remote("selfplay", index))
        self.config, self.num_envs = config, num_envs
        self.index, self.stopwatch, self.total = index, Stopwatch(), total_train_steps(config)
        seed = int(np.random.SeedSequence([config.seed, index, generation, start_steps]).generate_state(1)[0] >> 1)
        self.envs = [_GuardedEnv(lambda s: make_from_config(config.env, seed=s, mode="train"), seed + i)
                     for i in range(num_envs)]
        dev = resolve_device(device)
        self.net = make_network(obs_shape, num_actions, config.model,
                                value_prefix=config.train.value_prefix).to(dev).eval()
        self.version = -1
        self.actor = make_actor(config, self.envs, TimedInference(self.net, dev, self.stopwatch, "selfplay.inference"),
                                obs_shape, seed)

    def run(self) -> int:
        """Self-play until the budget is spent or the run stops; returns the decisions made."""
        decisions = 0
        while True:
            with self.stopwatch("selfplay.request"):
                grant = ray.get(self.storage.request_steps.remote(self.STEPS_PER_REQUEST * self.num_envs,
                                                                  self.num_envs))
            if grant["stop"]:
                return decisions
            if grant["granted"] == 0:
                if grant["selfplay_done"]:  # unfinished episodes go to replay too
                    self.replay.add.remote(self.actor.flush())
                    return decisions
                with self.stopwatch("selfplay.throttle_wait"):  # the learner is behind: a step takes ~0.1-2 s
                    time.sleep(0.1)
                continue
            if grant["acting_version"] != self.version:
                self.version, weights = ray.get(self.storage.get_weights.remote("acting"))
                self.net.load_state_dict(weights)
            episodes, errors = self._play(grant["granted"] // self.num_envs, grant["train_steps"])
            decisions += grant["granted"] // self.num_envs
            self.storage.report.remote(episodes, errors, self.stopwatch.take())

    def _play(self, decisions: int, train_steps: int) -> tuple[list, list[str]]:
        episodes, errors = [], []
        temperature = temperature_at(train_steps / self.total)
        for _ in range(decisions):
            with self.stopwatch("selfplay"):
                segments, ended = _drop_failed(self.envs, *self.actor.step(train_steps, temperature))
            if segments:
                self.replay.add.remote(segments)
            episodes += ended
            for env in self.envs:
                errors += env.errors
                env.errors = []
        return episodes, errors

    def pid(self) -> int:
        return os.getpid()


@ray.remote
def _evaluate(config: Config, obs_shape, num_actions: int, weights: dict, episodes: int, threads: int,
              device: str) -> dict:
    set_threads(threads)
    dev = resolve_device(device)
    net = make_network(obs_shape, num_actions, config.model, value_prefix=config.train.value_prefix)
    net.load_state_dict(weights)
    start = time.perf_counter()
    returns = play(net.to(dev).eval(), config, dev, episodes, seed=10_000 + config.seed).returns
    return {"mean": float(np.mean(returns)), "std": float(np.std(returns)), "returns": returns,
            "seconds": time.perf_counter() - start}


# --- the driver -------------------------------------------------------------------------

def train(config: Config, run_dir: Path | str, *, workers: int = 1, reanalyze_workers: int | None = None,
          address: str | None = None, gpus: float | None = None, device: str = "auto", num_envs: int = 1,
          checkpoint_interval: int = 1000, eval_interval: int | None = None, eval_episodes: int | None = None,
          progress: bool = True, threads: int = 1, resume: dict | None = None, replay_checkpoint: bool = True,
          max_restarts: int = 3, max_seconds: float | None = None) -> dict:
    """Trains with ``workers`` self-play workers and ``reanalyze_workers`` reanalyze workers
    on Ray (an embedded local Ray unless ``address``); same arguments, run directory,
    checkpoints and summary as :func:`ez_robot.trainer.train`."""
    if workers < 1 or (reanalyze_workers is not None and reanalyze_workers < 0) or num_envs < 1:
        raise ValueError(f"need workers >= 1, reanalyze_workers >= 0 and num_envs >= 1, got {workers}, "
                         f"{reanalyze_workers} and {num_envs}")
    if resume is not None:
        check_resumable(config, resume)
        if replay_checkpoint and resume.get("replay"):  # before any worker starts
            ReplayFiles(Path(run_dir) / "checkpoints" / "replay").check(resume["replay"])
    set_threads(threads)
    started = init_ray(address)
    try:
        if reanalyze_workers is None:
            reanalyze_workers = default_reanalyze_workers()
        pipeline = _Pipeline(config, Path(run_dir), workers=workers, reanalyze_workers=reanalyze_workers,
                             local=address is None, gpus=gpus, device=device, num_envs=num_envs, threads=threads,
                             resume=resume, replay_checkpoint=replay_checkpoint, max_restarts=max_restarts)
        return pipeline.run(checkpoint_interval, eval_interval, eval_episodes, progress, max_seconds)
    finally:
        if started:
            ray.shutdown()


MAX_DEFAULT_REANALYZE_WORKERS = 8


def default_reanalyze_workers() -> int:
    """One reanalyze worker per CPU Ray has, at most 8: reanalyze searches the whole batch
    with the target network every training step and is most of a run's compute (93% of
    a single-process cartpole_swingup run), while self-play mostly waits on the learner."""
    cpus = int(ray.cluster_resources().get("CPU", 1))
    return max(1, min(cpus, MAX_DEFAULT_REANALYZE_WORKERS))


class _Pipeline:
    """The actors of one run, and the driver's loop over them."""

    def __init__(self, config: Config, run_dir: Path, *, workers, reanalyze_workers, local, gpus, device, num_envs,
                 threads, resume, replay_checkpoint, max_restarts):
        self.config, self.run_dir, self.threads, self.max_restarts = config, run_dir, threads, max_restarts
        probe = make_from_config(config.env, seed=config.seed, mode="train")
        self.obs_shape, self.num_actions = probe.observation_space.shape, int(probe.action_space.n)
        probe.close()
        self.total = total_train_steps(config)
        counters = dict(resume["counters"]) if resume else dict(Counters().__dict__)
        self.counters = Counters(**counters)
        counters.pop("recent_returns")
        self.resumed = resume is not None
        self.restarts = resume.get("restarts", 0) if resume else 0
        self.seconds: dict[str, float] = defaultdict(float)
        self.files = _RunFiles(run_dir, config, resume_from=resume)
        if gpus is None:
            gpus = torch.cuda.device_count() if resolve_device(device).type == "cuda" else 0
        self._start_actors(counters, resume, workers, reanalyze_workers, num_envs, local, gpus, replay_checkpoint)

    def _start_actors(self, counters, resume, workers, reanalyze_workers, num_envs, local, gpus, replay_checkpoint):
        config, t = self.config, self.config.train
        if resume is None:  # the run's first network, seeded as in the single-process trainer
            torch.manual_seed(config.seed)
            first = _cpu_weights(make_network(self.obs_shape, self.num_actions, config.model,
                                              value_prefix=t.value_prefix))
            resume_or_first, acting, target = {"model": first}, (0, first), (0, first)
        else:
            steps = counters["train_steps"]
            resume_or_first = resume
            acting = (steps // t.selfplay_update_interval * t.selfplay_update_interval,
                      resume.get("acting_model", resume["model"]))
            target = (steps // t.target_update_interval * t.target_update_interval, resume["target_model"])
        compute = workers + reanalyze_workers + 1
        cpus = {"num_cpus": min(1.0, (os.cpu_count() or 1) / compute) if local else 1.0}
        # the learner, each reanalyze worker and evaluation share the GPUs; self-play stays on CPU
        gpu = {"num_gpus": gpus / (reanalyze_workers + 2)} if gpus else {}
        if not local:  # a shared cluster may not have them free; an embedded Ray is sized to fit
            needed = {"CPU": compute * cpus["num_cpus"], "GPU": (reanalyze_workers + 1) * gpu.get("num_gpus", 0.0)}
            warning = resource_shortfall(needed, ray.available_resources())
            if warning:
                _log.warning(warning)
        dev = self.eval_device = "cuda" if gpus else "cpu"
        self.eval_gpu = gpu
        shape, actions, threads, restarts = self.obs_shape, self.num_actions, self.threads, self.max_restarts
        run = f"ez-robot-{uuid.uuid4().hex[:8]}"
        names = {"storage": f"{run}-storage", "replay": f"{run}-replay",
                 "reanalyzers": [f"{run}-reanalyze-{i}" for i in range(reanalyze_workers)]}
        # self-play may be two requests per worker ahead of the learner: enough to overlap
        # with it, and few enough that it never takes CPU from the learner for long
        lead = 2 * workers * num_envs * SelfPlayWorker.STEPS_PER_REQUEST
        self.storage = ray.remote(SharedStorage).options(name=names["storage"], num_cpus=0).remote(
            config, counters, {"acting": acting, "target": target}, lead, restarts=self.restarts)
        self.replay = ray.remote(ReplayWorker).options(name=names["replay"], num_cpus=0).remote(
            config, names["storage"], actions, config.seed + 2 + counters["train_steps"],
            str(self.run_dir / "checkpoints" / "replay") if replay_checkpoint else None,
            resume.get("replay") if resume else None)
        self.reanalyzers = [ray.remote(Reanalyzer).options(name=name, max_restarts=restarts, **cpus, **gpu).remote(
            i, config, names, shape, actions, dev, threads, seed=config.seed + 100 + i + counters["train_steps"])
            for i, name in enumerate(names["reanalyzers"])]
        self.learner = ray.remote(LearnerWorker).options(name=f"{run}-learner", **cpus, **gpu).remote(
            config, names, shape, actions, dev, threads, resume_or_first)
        self.selfplay = [ray.remote(SelfPlayWorker).options(name=f"{run}-selfplay-{i}", max_restarts=restarts,
                                                            **cpus).remote(
            i, config, names, num_envs, shape, actions, "cpu", threads, counters["agent_steps"])
            for i in range(workers)]

    def run(self, checkpoint_interval: int, eval_interval: int | None, eval_episodes: int | None,
            progress: bool, max_seconds: float | None) -> dict:
        budget, c = self.config.agent_steps_budget, self.counters
        eval_interval = eval_interval or max(budget // 10, 1)
        self.eval_episodes = eval_episodes or self.config.train.eval_episodes
        self.next_eval, self.evals, last_eval = (c.agent_steps // eval_interval + 1) * eval_interval, [], {}
        self.eval_counters, self.learner_steps = {}, c.train_steps
        if self.resumed:
            self.files.log("resume", c, trainer="ray", budget=self.config.train.budget,
                           replay_moves=ray.get(self.replay.size.remote()))
        self.selfplay_runs = {i: w.run.remote() for i, w in enumerate(self.selfplay)}
        self.selfplay_retries: dict[int, float] = {}
        self.chunk = self._next_chunk(checkpoint_interval)
        session, diverged = Session(c, budget, progress, max_seconds), False
        try:
            while self.busy() and session.tick(c):
                ray.wait([r for r in [self.chunk, *self.selfplay_runs.values(), *self.evals] if r is not None],
                         num_returns=1, timeout=0.5)
                self._learning(checkpoint_interval)   # --- learner chunks, train metrics, checkpoints ---
                self._watch_selfplay()                # --- dead or finished self-play workers ---
                self._log_events()                    # --- episodes, restarts, env failures ---
                self._evaluations(eval_interval)      # --- periodic evaluation, a remote task ---
            if not self.busy():
                last_eval = self._final_evaluation()
        except FloatingPointError as error:
            diverged = True  # keep the last good checkpoint: this state is not one
            self.files.log("diverged", c, error=str(error))
            raise
        finally:
            session.close()
            self._shutdown(save=not diverged)
        return session.summary(c, last_eval, self.seconds, finished=not self.busy(), restarts=self.restarts)

    def busy(self) -> bool:
        """Training steps or self-play left (or a dead self-play worker to run again)."""
        return self.chunk is not None or bool(self.selfplay_runs) or bool(self.selfplay_retries)

    def _next_chunk(self, checkpoint_interval: int):
        if self.counters.train_steps >= self.total:
            return None
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
            raise TrainingAborted(f"the learner failed: {error.cause!r}") from None
        except ray.exceptions.RayActorError as error:
            raise TrainingAborted(f"the learner process died ({str(error).splitlines()[0]}); resume the run "
                                  f"from its last checkpoint with `ez-robot train --resume {self.run_dir}`") from None
        c, previous = self.counters, self.counters.train_steps
        c.train_steps = result["train_steps"]
        self._add_seconds(result["seconds"])
        for train_steps, metrics in result["records"]:
            self.files.log("train", Counters(c.agent_steps, c.env_frames, train_steps), **metrics)
        if c.train_steps != previous and c.train_steps % checkpoint_interval == 0:
            self._save()
        self.chunk = self._next_chunk(checkpoint_interval)

    def _watch_selfplay(self) -> None:
        """Self-play workers that finished, died (Ray restarts them: run again) or failed."""
        for index, retry_at in list(self.selfplay_retries.items()):
            if time.time() >= retry_at:
                del self.selfplay_retries[index]
                self.selfplay_runs[index] = self.selfplay[index].run.remote()
        for index, ref in list(self.selfplay_runs.items()):
            if not ray.wait([ref], timeout=0)[0]:
                continue
            del self.selfplay_runs[index]
            try:
                ray.get(ref)  # it finished its share of the budget
            except ray.exceptions.ActorDiedError as error:
                raise TrainingAborted(f"self-play worker {index} died and Ray could not restart it (max_restarts "
                                      f"{self.max_restarts}): {str(error).splitlines()[0]}") from None
            except ray.exceptions.RayActorError:  # restarting: ask again in a moment
                self.selfplay_retries[index] = time.time() + 0.5
            except ray.exceptions.RayTaskError as error:
                if isinstance(error.cause, EnvironmentFailed):
                    raise EnvironmentFailed(f"self-play worker {index}: {error.cause}") from None
                raise TrainingAborted(f"self-play worker {index} failed: {error.cause!r}") from None

    def _log_events(self) -> None:
        news = ray.get(self.storage.drain.remote())
        c = self.counters
        c.agent_steps, c.env_frames, c.episodes = (news["counters"][k] for k in ("agent_steps", "env_frames",
                                                                                  "episodes"))
        self.learner_steps = news["counters"]["train_steps"]  # the learner's count now; c's is its last chunk's
        self.restarts = news["restarts"]
        self._add_seconds(news["seconds"])
        for kind, counters, values in news["events"]:
            self.files.log(kind, Counters(counters["agent_steps"], counters["env_frames"], counters["train_steps"]),
                           **values)
            if kind == "episode":
                c.recent_returns = (c.recent_returns + [values["episode_return"]])[-20:]

    def _evaluations(self, eval_interval: int) -> None:
        c = self.counters
        if c.agent_steps >= self.next_eval and c.agent_steps < self.config.agent_steps_budget:
            self.next_eval = (c.agent_steps // eval_interval + 1) * eval_interval
            self.evals.append(self._evaluate())
            self.eval_counters[self.evals[-1]] = Counters(c.agent_steps, c.env_frames, self.learner_steps)
        for ref in [r for r in self.evals if ray.wait([r], timeout=0)[0]]:
            self.evals.remove(ref)
            self._log_eval(ray.get(ref), self.eval_counters.pop(ref))

    def _evaluate(self):
        # no CPU reserved: the compute actors hold all of them, and an evaluation is short
        return _evaluate.options(num_cpus=0, **self.eval_gpu).remote(
            self.config, self.obs_shape, self.num_actions, self.learner.weights.remote(), self.eval_episodes,
            self.threads, self.eval_device)

    def _log_eval(self, result: dict, counters: Counters) -> dict:
        self.seconds["evaluation"] += result.pop("seconds")
        self.files.log("eval", counters, **result)
        return result

    def _final_evaluation(self) -> dict:
        for ref in self.evals:  # the periodic ones still running
            self._log_eval(ray.get(ref), self.eval_counters.pop(ref))
        self.evals = []
        c = self.counters
        return self._log_eval(ray.get(self._evaluate()), Counters(c.agent_steps, c.env_frames, c.train_steps))

    def _add_seconds(self, seconds: dict) -> None:
        for name, value in seconds.items():
            self.seconds[name] += value

    def _save(self) -> None:
        """A checkpoint: the learner's state between two chunks, the counters, the replay."""
        start = time.perf_counter()
        state = ray.get(self.learner.state.remote())
        counters = ray.get(self.storage.get_counters.remote())
        counters["train_steps"] = state["learner"]["train_steps"]
        replay = ray.get(self.replay.save.remote())
        state.update(metadata("ray"), config=config_to_dict(self.config), obs_shape=tuple(self.obs_shape),
                     num_actions=self.num_actions, counters={**counters, "recent_returns": self.counters.recent_returns},
                     restarts=self.restarts, replay=replay,  # a generator for the single-process trainer to resume with
                     numpy_rng=np.random.default_rng([self.config.seed, counters["train_steps"]]).bit_generator.state)
        self.files.checkpoint(state)
        if replay is not None:
            ray.get(self.replay.prune.remote(replay))
        self.seconds["checkpoint"] += time.perf_counter() - start

    def _shutdown(self, save: bool) -> None:
        """Stops self-play, checkpoints (at the end, on Ctrl-C, on errors), ends the actors."""
        try:
            ray.get(self.storage.stop.remote())
            if save:
                self._save()
        except ray.exceptions.RayError as error:  # a dead learner: the last periodic checkpoint stands
            _log.warning("no checkpoint at exit (%s); %s keeps the last periodic one", str(error).splitlines()[0],
                         self.run_dir / "checkpoints")
        finally:
            for actor in [*self.selfplay, *self.reanalyzers, self.learner, self.replay, self.storage]:
                ray.kill(actor)
            self.files.close()
