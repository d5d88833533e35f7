"""The two Ray actors of a run that hold data and no network: :class:`SharedStorage`
(counters, throttle, weights, events) and :class:`ReplayWorker` (the replay buffer, and
sampling with its CPU context).  See :mod:`ez_robot.ray_workers` for how a run's workers
fit together.

Nothing here imports torch, directly or through what it imports (a test holds it to that):
these two processes import their code in about a CPU-second and hold ~100 MB, where a worker
with a network takes ~3 CPU-s and ~300 MB.  The weights the storage hands on are numpy arrays
for the same reason; the workers with networks convert them (:mod:`ez_robot.ray_workers`).
"""
from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import ray

from ez_robot.batch import Batch, sample_batch
from ez_robot.checkpoint import ReplayFiles
from ez_robot.config import Config
from ez_robot.replay import ReplayBuffer
from ez_robot.schedules import Counters, total_train_steps, train_steps_due

__all__ = ["SharedStorage", "ReplayWorker", "StepsPacing", "actor_by_name"]

CLAIM_SECONDS = 60.0  # a segment handed to a sweeping worker is not handed out again for this long


def actor_by_name(name: str):
    """A run's actor by name.  Workers find each other by name rather than receiving
    handles as constructor arguments, which Ray cannot guarantee across restarts."""
    return ray.get_actor(name)


# --- pacing -----------------------------------------------------------------------------

class StepsPacing:
    """``train.pacing=steps``: self-play and the learner in lockstep, ``lead`` agent steps
    apart.  The learner may take training step t + 1 only once self-play has played
    :meth:`ceiling` (t) agent steps, and self-play is granted no more than that while the
    learner is at t.  So a training step always samples a replay that holds the same
    decisions, and the decisions granted while the learner is at t are played with the
    acting network and the temperature of step t, however fast either side runs (the
    single-process trainer is this with no lead: it alternates)."""

    def __init__(self, config: Config, lead: int):
        self.config, self.lead = config, lead
        self.budget, self.total = config.agent_steps_budget, total_train_steps(config)

    def due(self, played: int, all_flushed: bool = True) -> int:
        """Training steps the learner may have done once self-play played ``played`` agent
        steps (all of them once the budget is played and every worker's unfinished
        episodes are in replay)."""
        if played >= self.budget and all_flushed:
            return self.total
        return max(0, train_steps_due(self.config, min(played, self.budget - 1) - self.lead))

    def ceiling(self, train_steps: int) -> int:
        """The agent steps self-play may have been granted while the learner is at
        ``train_steps``: the fewest after which it may take its next step."""
        ratio = self.config.train.train_steps_per_agent_step
        played = self.lead + math.ceil((train_steps + 1) / ratio)
        while played > 0 and self.due(played - 1) > train_steps:
            played -= 1
        while self.due(played) <= train_steps and played < self.budget:
            played += 1
        return played


# --- shared storage ---------------------------------------------------------------------

class SharedStorage:
    """Counters, the throttle between self-play and learning, the acting and target
    weights, worker starts, and the events the driver logs."""

    def __init__(self, config: Config, counters: Counters, weights: dict, lead: int, restarts: int = 0,
                 selfplay_workers: int = 1):
        self.config, self.counters, self.weights = config, counters, weights  # {kind: (version, numpy state)}
        self.budget = config.agent_steps_budget
        self.lead = lead  # agent steps self-play may run ahead of the learner's ratio
        self.replay_moves, self.stopping, self.restarts = 0, False, restarts
        self.pacing = StepsPacing(config, lead) if config.train.pacing == "steps" else None
        self.selfplay_workers = selfplay_workers
        self.flushed: set[int] = set()  # steps pacing: self-play workers whose last moves are in replay
        self.starts: dict[str, int] = defaultdict(int)
        self.unreported: dict[int, int] = defaultdict(int)  # self-play worker -> agent steps granted, not reported
        self.events: list = []
        self.seconds: dict[str, float] = defaultdict(float)

    @property
    def played(self) -> int:
        """Agent steps played and reported: the granted ones, less those still playing."""
        return self.counters.agent_steps - sum(self.unreported.values())

    def request_steps(self, wanted: int, num_envs: int, *, worker: int) -> dict:
        """Grants self-play worker ``worker`` up to ``wanted`` agent steps (whole decisions
        of ``num_envs``)."""
        c, ratio = self.counters, self.config.train.train_steps_per_agent_step
        ceiling = self.budget
        if self.replay_moves >= self.config.replay.min_replay_size:  # the learner has started
            ceiling = min(ceiling, self.pacing.ceiling(c.train_steps) if self.pacing
                          else int(c.train_steps / ratio) + self.lead)
        granted = min(wanted, ceiling - c.agent_steps)
        granted = num_envs * -(-granted // num_envs) if granted > 0 and not self.stopping else 0
        c.agent_steps += granted
        c.env_frames += granted * self.config.env.action_repeat
        self.unreported[worker] += granted
        return {"granted": granted, "train_steps": c.train_steps, "acting_version": self.weights["acting"][0],
                "selfplay_done": c.agent_steps >= self.budget, "stop": self.stopping}

    def report(self, steps: int, episodes: list, env_errors: list[str], seconds: dict, *, worker: int,
               moves: int = 0, flushed: bool = False) -> None:
        """What self-play worker ``worker`` played: ``steps`` agent steps, the episodes that
        ended (``{"episode_return", "length"}`` each: plain data, which needs no torch).
        Steps pacing: the ``moves`` it stored in replay with them (already there), and
        whether its unfinished episodes went there too (``flushed``: it is done)."""
        self.unreported[worker] -= steps
        if self.pacing is not None:  # counted with the decisions, in their order
            self.replay_moves += moves
            if flushed:
                self.flushed.add(worker)
        for episode in episodes:
            self.counters.add_episode(episode["episode_return"])
            self.events.append(("episode", self.counters.at(),
                                {"episode_return": episode["episode_return"], "length": episode["length"]}))
        for error in env_errors:
            self.events.append(("env_failure", self.counters.at(), {"error": error}))
        self.add_seconds(seconds)

    def add_seconds(self, seconds: dict) -> None:
        for name, value in seconds.items():
            self.seconds[name] += value

    def set_weights(self, kind: str, version: int, state: dict) -> None:
        self.weights[kind] = (version, state)

    def get_weights(self, kind: str) -> tuple[int, dict]:
        return self.weights[kind]

    def sweep_status(self) -> dict:
        """What a sweeping reanalyze worker needs each round: the target version, stop."""
        return {"target_version": self.weights["target"][0], "train_steps": self.counters.train_steps,
                "stop": self.stopping}

    def set_train_steps(self, train_steps: int) -> None:
        self.counters.train_steps = train_steps

    def set_replay_moves(self, moves: int) -> None:
        """The replay's size as the replay actor sees it: at the start, then (free pacing)
        after each segment it stores."""
        self.replay_moves = moves

    def progress(self) -> dict:
        """Counters, the agent steps self-play has played, and the training steps the
        learner may have done on them (``due``)."""
        played = self.played
        if self.pacing is None:
            due = train_steps_due(self.config, played)
        else:
            due = self.pacing.due(played, all_flushed=len(self.flushed) >= self.selfplay_workers)
        return {"counters": self.counters.at(), "played": played, "due": due}

    def saved_counters(self) -> Counters:
        """The counters a checkpoint keeps: decisions granted and not yet reported are left out
        (a resumed run never plays them; it is granted them again)."""
        pending = self.counters.agent_steps - self.played
        return self.counters.at(agent_steps=self.counters.agent_steps - pending,
                                env_frames=self.counters.env_frames - pending * self.config.env.action_repeat)

    def worker_started(self, kind: str, index: int) -> int:
        """Counts a worker's (re)starts; returns how many times it started before."""
        key = f"{kind}-{index}"
        generation = self.starts[key]
        self.starts[key] += 1
        if generation:
            self.restarts += 1
            event = {"worker": key, "restarts": self.restarts}
            if kind == "selfplay":  # what it was granted and died before reporting is granted again
                event["lost_steps"] = lost = self.unreported.pop(index, 0)
                self.counters.agent_steps -= lost
                self.counters.env_frames -= lost * self.config.env.action_repeat
            self.events.append(("restart", self.counters.at(), event))
        return generation

    def drain(self) -> dict:
        events, self.events = self.events, []
        seconds, self.seconds = dict(self.seconds), defaultdict(float)
        return {"counters": self.counters.at(), "events": events, "restarts": self.restarts, "seconds": seconds,
                "saved": self.saved_counters()}

    def stop(self) -> None:
        self.stopping = True


# --- replay -----------------------------------------------------------------------------

@dataclass
class _Sample:
    context: Batch            # with the bootstrap observations reanalyze may need
    segment_ids: np.ndarray   # [B] int64
    positions: np.ndarray     # [B] int64
    weights: np.ndarray       # [B] float32 importance-sampling weights


class ReplayWorker:
    """The replay buffer, and the CPU half of reanalyze (sampling and context)."""

    def __init__(self, config: Config, storage: str, action, seed: int, replay_dir: str | None,
                 replay_state: dict | None):
        self.config, self.storage, self.action = config, actor_by_name(storage), action
        self.rng = np.random.default_rng(seed)
        self.files = ReplayFiles(replay_dir) if replay_dir else None
        self.replay = self.files.load(config.replay, replay_state) if self.files and replay_state \
            else ReplayBuffer(config.replay)
        self.claims: dict[int, float] = {}  # segments a reanalyze worker is searching, since when
        # steps pacing: self-play reports the moves it stored, in the order of its decisions
        self.free_pacing = config.train.pacing == "free"
        ray.get(self.storage.set_replay_moves.remote(len(self.replay)))

    def add(self, segments: list) -> None:
        for segment in segments:
            self.replay.add(segment)
        if self.free_pacing:
            self.storage.set_replay_moves.remote(len(self.replay))

    def sample(self, train_steps: int, target_version: int, swept: int | None = None) -> _Sample | None:
        """A batch and its context, or None while the replay is still filling (or, with
        ``swept``, until every stored segment has search results of sweep round ``swept``
        or later, so that no position of the batch needs a search of its own)."""
        if not self.replay.ready() or (swept is not None and self.replay.stalest(1, swept)):
            return None
        ref, context = sample_batch(self.replay, self.config, train_steps, self.action, self.rng,
                                    target_version=target_version)
        return _Sample(context, ref.segment_ids, ref.positions, ref.weights)

    def update_priorities(self, segment_ids, positions, priorities) -> None:
        self.replay.update_priorities(segment_ids, positions, priorities)

    def next_to_search(self, older_than: int):
        """Buffer reanalyze: the stalest segment no other worker is searching, as (id,
        segment), or None when every one has results of round ``older_than`` or later or is
        being searched (the replay marks the round complete once none is stale)."""
        now = time.time()
        self.claims = {i: since for i, since in self.claims.items() if now - since < CLAIM_SECONDS}
        item = self.replay.next_to_search(older_than, skip=self.claims)
        if item is not None:
            self.claims[item[0]] = now
        return item

    def store_search(self, segment_id: int, results) -> None:
        self.claims.pop(segment_id, None)
        self.replay.store_search(segment_id, results)

    def observations_stored(self) -> int:
        return self.replay.observations_stored()

    def save(self) -> dict | None:
        return self.files.save(self.replay) if self.files else None

    def prune(self, state: dict) -> None:
        self.files.prune(state)

    def size(self) -> int:
        return len(self.replay)
