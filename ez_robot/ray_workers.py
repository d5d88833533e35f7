"""The Ray workers of a run: the objects of :mod:`ez_robot.builders` (actor, replay,
learner) placed on Ray actors, and the shared storage between them::

    SelfPlayWorker x N --segments--> ReplayWorker <--priorities-- LearnerWorker
      (Actor: its envs,                (ReplayBuffer;               (Learner; asks 2 batches
       one batched search)              sample + CPU context)        ahead per reanalyzer)
            ^                                 |                           ^      |
            | acting weights (every 100)      v                           |      | target
       SharedStorage  <---counters---  Reanalyzer x M  --prepared batch---+      | weights
      (counters, throttle,              (target-network search,                  | (every 200)
       acting weights, events)           reanalyze())  <-------------------------+

- The learner keeps two ``prepare`` calls queued on every reanalyze worker (Ray runs an
  actor's calls in order), so a batch is ready when it asks; with no reanalyze worker it
  reanalyzes in its own process.
- The replay actor prepares the context (CPU) itself: it holds the segments, and shipping
  a batch's context is far cheaper than shipping the segments it comes from.
- Self-play and learning keep the single-process ratio: the learner trains up to
  ``train_steps_per_agent_step`` x the agent steps self-play has *played*, and self-play
  runs at most ``lead`` decisions ahead of the learner.  With ``train.pacing=steps``
  (:class:`ez_robot.ray_storage.StepsPacing`) they move in lockstep, the learner samples
  each step's batch when self-play has stopped at its lead, and a batch waits for the
  sweep of the current target network.
- Workers find each other by name; a worker that Ray restarts pulls the latest weights.
- The storage and the replay actor hold no network and live in :mod:`ez_robot.ray_storage`,
  which never imports torch; this module holds the workers with networks.
"""
from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, replace

import numpy as np
import ray
import torch

from ez_robot import step_trace
from ez_robot._timing import Stopwatch, TimedInference
from ez_robot.batch import Batch
from ez_robot.builders import EnvSpec, make_actor, make_envs, make_learner, make_model
from ez_robot.config import Config
from ez_robot.device import resolve_device, set_threads
from ez_robot.errors import TrainingAborted
from ez_robot.evaluation import evaluate
from ez_robot.inference import make_inference
from ez_robot.reanalyze import Sweeper, reanalyze, reanalyze_search_config, search_segments, sweep_round
from ez_robot.ray_storage import actor_by_name
from ez_robot.schedules import TRAIN_LOG_INTERVAL, paced_train_steps, temperature_at
from ez_robot.targets import Targets

__all__ = ["Reanalyzer", "LearnerWorker", "SelfPlayWorker", "evaluate_weights", "STEPS_PER_REQUEST", "shippable"]

STEPS_PER_REQUEST = 8
"""Decisions a self-play worker plays per request to the storage."""
BATCHES_AHEAD_PER_REANALYZER = 2  # double buffering


def shippable(state: dict) -> dict:
    """A network's CPU state dict as numpy arrays: what :class:`SharedStorage` keeps and
    hands on, so that its process never imports torch."""
    return {name: value.numpy() for name, value in state.items()}


def _loadable(weights: dict) -> dict:
    """The storage's numpy weights as tensors for ``load_state_dict`` (copies: arrays that
    come through Ray's object store are read-only)."""
    return {name: torch.from_numpy(np.array(value)) for name, value in weights.items()}


# --- reanalyze --------------------------------------------------------------------------

@dataclass
class _Prepared:
    """A batch ready for a learner step."""
    context: Batch
    targets: Targets
    weights: np.ndarray
    segment_ids: np.ndarray
    positions: np.ndarray
    seconds: dict
    target_version: int = -1  # of the network that reanalyzed it


class Reanalyzer:
    """Fresh target-network searches for sampled batches (the device half of reanalyze)."""

    def __init__(self, index: int, config: Config, names: dict, spec: EnvSpec, device: str, threads: int, seed: int,
                 remote: bool = True):
        self.storage, self.replay = actor_by_name(names["storage"]), actor_by_name(names["replay"])
        if remote:
            set_threads(threads)
            ray.get(self.storage.worker_started.remote("reanalyze", index))
        self.config, self.stopwatch = config, Stopwatch()
        self.rng = np.random.default_rng(seed)
        self.steps = config.train.pacing == "steps"
        self.dev = resolve_device(device)
        self.search_config = reanalyze_search_config(config)
        self.net = make_model(config, spec).to(self.dev).eval()
        self.inference = TimedInference(make_inference(self.net, self.dev, config.train.inference), self.stopwatch,
                                        "reanalyze.inference")
        self.target_version = -1

    def prepare(self, train_steps: int, target_version: int) -> _Prepared | None:
        """One batch: sample + context (replay actor), then reanalyze with the target network."""
        if target_version != self.target_version:
            self._load_target()
        with self.stopwatch("sample"):
            sample = ray.get(self.replay.sample.remote(train_steps, target_version))
        if sample is None:
            return None
        t = self.config.train
        with self.stopwatch("reanalyze"):
            targets = reanalyze(sample.context, self.inference, self.search_config, self.rng,
                                policy_ratio=t.reanalyze_policy_ratio)
        context = replace(sample.context, bootstrap_observations=None)  # the learner needs none of them
        return _Prepared(context, targets, sample.weights, sample.segment_ids, sample.positions, self.stopwatch.take(),
                         self.target_version)

    def _load_target(self) -> None:
        self.target_version, weights = ray.get(self.storage.get_weights.remote("target"))
        self.net.load_state_dict(_loadable(weights))
        self.inference.refresh()

    def sweep(self) -> int:
        """Buffer reanalyze: searches the stalest segments with the target network until
        the run stops (each once per target version); returns how many it searched."""
        searched = 0
        while True:
            status = ray.get(self.storage.sweep_status.remote())
            if status["stop"]:
                return searched
            if status["target_version"] != self.target_version:
                self._load_target()
            current = sweep_round(self.config, self.target_version, status["train_steps"])
            item = ray.get(self.replay.next_to_search.remote(current))
            if item is None:  # everything is current: wait for the next target network
                time.sleep(0.1)
                continue
            segment_id, segment = item
            # steps pacing: a segment's search is the same whichever worker makes it, whenever
            # (its own stream: the seed, the segment and the sweep round, apart from self-play's)
            rng = np.random.default_rng([self.config.seed, segment_id, current + 2**32]) if self.steps else self.rng
            with self.stopwatch("reanalyze.sweep"):
                (results,) = search_segments([segment], self.inference, self.search_config, rng,
                                             self.target_version, round=current)
            self.replay.store_search.remote(segment_id, results)
            searched += 1
            self.storage.add_seconds.remote(self.stopwatch.take())


# --- learner ----------------------------------------------------------------------------

class LearnerWorker:
    """The learner and its networks; trains in chunks the driver asks for, and publishes
    the acting and target weights to the storage when the learner refreshes them."""

    def __init__(self, config: Config, names: dict, spec: EnvSpec, device: str, threads: int, weights: dict,
                 resume: dict | None):
        set_threads(threads)
        # batches arrive through the object store, read-only; the learner only reads them
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        self.config = config
        self.storage, self.replay = actor_by_name(names["storage"]), actor_by_name(names["replay"])
        self.reanalyzers = [actor_by_name(name) for name in names["reanalyzers"]]
        self.dev, self.stopwatch = resolve_device(device), Stopwatch()
        self.learner = make_learner(config, spec, self.dev, weights=weights)
        if resume is not None:
            self.learner.load_state_dict(resume)
        self.published = dict(self.learner.versions)
        self.buffer = config.reanalyze.mode == "buffer"
        # batch reanalyze without reanalyze workers: the learner prepares its batches itself
        self.local = None if self.reanalyzers or self.buffer else Reanalyzer(
            0, config, names, spec, device, threads, seed=config.seed + 1, remote=False)
        self.pending: dict = {}  # request -> index of the reanalyze worker that prepares it
        self.due = 0
        self.steps = config.train.pacing == "steps"
        self.swept_at = self.train_steps  # the sweep's last turn (the single-process trainer's: after a step)
        if self.buffer:  # batches come straight from replay and are completed with our own target network
            self.rng, self.search_config = np.random.default_rng(config.seed + 1), reanalyze_search_config(config)
            self.target_inference = TimedInference(make_inference(self.learner.target_net, self.dev,
                                                                  config.train.inference),
                                                   self.stopwatch, "reanalyze.inference")
            self.sample_ahead = None  # (request, target version it was asked with)
            # without reanalyze workers the sweep runs here, paced between training steps
            self.sweeper = None if self.reanalyzers else Sweeper(config, self.target_inference,
                                                                 self.search_config, self.rng)

    @property
    def train_steps(self) -> int:
        return self.learner.train_steps

    def train(self, stop_at: int, max_seconds: float) -> dict:
        """Training steps until ``stop_at``, the ratio to self-play, or ``max_seconds``."""
        records, start = [], time.perf_counter()
        stop_at = min(stop_at, self.learner.total_train_steps)
        while self.train_steps < stop_at and time.perf_counter() - start < max_seconds:
            if self.train_steps >= self._due():
                with self.stopwatch("learner.due_wait"):  # self-play is behind
                    time.sleep(0.02)
                continue
            if self.steps and self.swept_at < self.train_steps:  # the replay stands still now: sweep it
                self._sweep()
            prepared = self._next_batch()
            if prepared is None:  # the replay is still filling
                continue
            acting = self.learner.versions["acting"]
            with self.stopwatch("learner"):
                metrics, priorities = self.learner.step(prepared.context, prepared.targets, prepared.weights)
            if step_trace.enabled():
                step_trace.write(prepared.context, prepared.targets, metrics["lr"], acting,
                                 ray.get(self.storage.progress.remote())["played"])
            self.replay.update_priorities.remote(prepared.segment_ids, prepared.positions, priorities)
            self._publish()  # before the step count: a sweep that sees the count has the target of it
            self.storage.set_train_steps.remote(self.train_steps)
            if not self.steps:
                self._sweep()
            if self.train_steps % TRAIN_LOG_INTERVAL == 0:
                records.append((self.train_steps, metrics))
        return {"train_steps": self.train_steps, "records": records, "seconds": self.stopwatch.take()}

    def _sweep(self) -> None:
        """Buffer reanalyze without reanalyze workers: this training step's share of the
        sweep, here (free pacing: after the step, while self-play goes on; steps: before
        the next one, once self-play has stopped at its lead and the replay stands still)."""
        if self.buffer and self.sweeper is not None:
            with self.stopwatch("reanalyze.sweep"):
                self.sweeper.step(_RemoteReplay(self.replay), self.learner.versions["target"], self.train_steps)
        self.swept_at = self.train_steps

    def _publish(self) -> None:
        """Acting and target weights the learner refreshed, to the storage (before the
        next step, so that no worker acts or reanalyzes with older ones)."""
        for kind, version in self.learner.versions.items():
            if version != self.published[kind]:
                ray.get(self.storage.set_weights.remote(kind, version, shippable(self.learner.weights(kind))))
                self.published[kind] = version
                if kind == "target" and self.buffer:  # our own copy for the batches' missing searches
                    self.target_inference.refresh()

    def _due(self) -> int:
        """Training steps allowed now: the ratio to the agent steps self-play has played
        (the storage's pacing)."""
        if self.train_steps >= self.due:
            self.due = ray.get(self.storage.progress.remote())["due"]
        return self.due

    def _next_batch(self) -> _Prepared | None:
        if self.buffer:
            prepared = self._from_replay()
        elif self.local is not None:
            prepared = self.local.prepare(self.train_steps, self.published["target"])
        else:
            prepared = self._from_reanalyzers()
        if prepared is None:
            time.sleep(0.05)
            return None
        for name, seconds in prepared.seconds.items():
            self.stopwatch.add(name, seconds)
        return prepared

    def _from_replay(self) -> _Prepared | None:
        """Buffer reanalyze: a sample whose stored search results the replay filled in,
        completed here (searching only what they lack); with free pacing the next one is
        asked for ahead."""
        version = self.learner.versions["target"]
        if self.steps:  # this step's sample, of the replay as it stands now, once the sweep is current
            swept = sweep_round(self.config, version, self.train_steps) \
                if self.reanalyzers and self.config.reanalyze.staleness == 0 else None
            with self.stopwatch("sample"):
                sample = ray.get(self.replay.sample.remote(self.train_steps, version, swept))
            if sample is None:
                return None
            return self._complete(sample)
        if self.sample_ahead is None or self.sample_ahead[1] != version:  # none, or judged by an older target
            self.sample_ahead = (self.replay.sample.remote(self.train_steps, version), version)
        with self.stopwatch("sample"):
            sample = ray.get(self.sample_ahead[0])
        self.sample_ahead = (self.replay.sample.remote(self.train_steps + 1, version), version)
        if sample is None:
            return None
        return self._complete(sample)

    def _complete(self, sample) -> _Prepared:
        """A buffer batch's targets: the stored searches, and ours for what they lack."""
        t = self.config.train
        with self.stopwatch("reanalyze"):
            targets = reanalyze(sample.context, self.target_inference, self.search_config, self.rng,
                                policy_ratio=t.reanalyze_policy_ratio)
        return _Prepared(sample.context, targets, sample.weights, sample.segment_ids, sample.positions, {})

    def _from_reanalyzers(self) -> _Prepared | None:
        """The first ready of the batches asked for ahead; asks for the next ones."""
        # each worker keeps its own two requests: refilling by position instead would drift
        # every request onto one worker and leave the others idle
        for index, worker in enumerate(self.reanalyzers):
            for _ in range(BATCHES_AHEAD_PER_REANALYZER - list(self.pending.values()).count(index)):
                self.pending[worker.prepare.remote(self.train_steps, self.published["target"])] = index
        with self.stopwatch("learner.batch_wait"):
            ready, _ = ray.wait(list(self.pending), num_returns=1)
        del self.pending[ready[0]]
        try:
            prepared = ray.get(ready[0])
            if self.steps and prepared is not None and prepared.target_version != self.published["target"]:
                return None  # reanalyzed by an older target network than this step's
            return prepared
        except ray.exceptions.ActorDiedError as error:
            raise TrainingAborted(f"a reanalyze worker died and Ray could not restart it: "
                                  f"{str(error).splitlines()[0]}") from None
        except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError):
            return None  # Ray is restarting the worker; the next request waits for it

    def weights(self) -> dict:
        return self.learner.weights()

    def state_dict(self) -> dict:
        return self.learner.state_dict()


class _RemoteReplay:
    """The replay actor, seen by a :class:`ez_robot.reanalyze.Sweeper` as a replay buffer."""

    def __init__(self, actor):
        self.actor = actor

    def observations_stored(self) -> int:
        return ray.get(self.actor.observations_stored.remote())

    def next_to_search(self, older_than: int):
        return ray.get(self.actor.next_to_search.remote(older_than))

    def store_search(self, segment_id: int, results) -> None:
        self.actor.store_search.remote(segment_id, results)


# --- self-play --------------------------------------------------------------------------

class SelfPlayWorker:
    """An :class:`Actor` over ``num_envs`` envs; pulls the acting weights when they change."""

    def __init__(self, index: int, config: Config, names: dict, num_envs: int, spec: EnvSpec, threads: int,
                 start_steps: int):
        set_threads(threads)
        self.storage, self.replay = actor_by_name(names["storage"]), actor_by_name(names["replay"])
        generation = ray.get(self.storage.worker_started.remote("selfplay", index))
        self.config, self.num_envs = config, num_envs
        self.index, self.stopwatch, self.paced = index, Stopwatch(), paced_train_steps(config)
        self.steps = config.train.pacing == "steps"
        seed = int(np.random.SeedSequence([config.seed, index, generation, start_steps]).generate_state(1)[0] >> 1)
        self.net = make_model(config, spec).eval()
        self.version = -1
        self.inference = TimedInference(make_inference(self.net, "cpu", config.train.inference), self.stopwatch,
                                        "selfplay.inference")
        self.actor = make_actor(config, spec, make_envs(config, seed, num_envs), self.inference, seed)
        self.pending_add = None  # the last segments sent to the replay

    def run(self) -> int:
        """Self-play until the budget is spent or the run stops; returns the decisions made.
        Steps pacing: what a report counts is in replay before the report is sent, and the
        grant that spends the budget sends the unfinished episodes with it."""
        decisions = 0
        while True:
            with self.stopwatch("selfplay.request"):
                grant = ray.get(self.storage.request_steps.remote(STEPS_PER_REQUEST * self.num_envs, self.num_envs,
                                                                  worker=self.index))
            if grant["stop"]:
                return decisions
            if grant["granted"] == 0:
                if grant["selfplay_done"]:  # unfinished episodes go to replay too, before this returns
                    moves = self._store(self.actor.flush(), wait=True)
                    ray.get(self.storage.report.remote(0, [], [], {}, worker=self.index, moves=moves, flushed=True))
                    return decisions
                with self.stopwatch("selfplay.throttle_wait"):  # the learner is behind: a step takes ~0.1-2 s
                    time.sleep(0.02 if self.steps else 0.1)
                continue
            if grant["acting_version"] != self.version:
                self.version, weights = ray.get(self.storage.get_weights.remote("acting"))
                self.net.load_state_dict(_loadable(weights))
                self.inference.refresh()
            steps = grant["granted"] // self.num_envs
            episodes, errors, moves = self._play(steps, grant["train_steps"])
            flushed = self.steps and grant["selfplay_done"]
            if flushed:
                moves += self._store(self.actor.flush())
            if self.steps and self.pending_add is not None:
                ray.get(self.pending_add)  # the replay has them before the learner can count them
            decisions += steps
            self.storage.report.remote(grant["granted"], episodes, errors, self.stopwatch.take(), worker=self.index,
                                       moves=moves, flushed=flushed)

    def _play(self, decisions: int, train_steps: int) -> tuple[list, list[str], int]:
        """``decisions`` decisions; returns the episodes ended, env errors, moves stored."""
        episodes, errors, moves = [], [], 0
        temperature = temperature_at(train_steps, self.paced)
        for _ in range(decisions):
            with self.stopwatch("selfplay"):
                played = self.actor.step(train_steps, temperature)
            moves += self._store(played.segments)
            episodes += [{"episode_return": e.episode_return, "length": e.length} for e in played.episodes]
            errors += played.env_errors
        return episodes, errors, moves

    def _store(self, segments: list, wait: bool = False) -> int:
        """Sends segments to the replay; returns their moves."""
        if segments:
            self.pending_add = self.replay.add.remote(segments)
            if wait:
                ray.get(self.pending_add)
        return sum(segment.num_own for segment in segments)

    def pid(self) -> int:
        return os.getpid()


@ray.remote
def evaluate_weights(config: Config, spec: EnvSpec, weights: dict, episodes: int, threads: int, device: str) -> dict:
    """The periodic evaluation, as a task, on the learner's weights of the moment."""
    set_threads(threads)
    dev = resolve_device(device)
    net = make_model(config, spec)
    net.load_state_dict(weights)
    return evaluate(net.to(dev).eval(), config, dev, episodes)
