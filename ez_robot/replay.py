"""Prioritized replay of trajectory segments.

A :class:`Segment` is a run of consecutive moves of one episode (400 by default) plus a
look-ahead tail of the moves that follow it, so that every move of the segment can
build its unroll and value targets without touching another segment.  Frames are stored
once: pixel observations keep only their newest frame per move (plus the frames stacked
before the first move), and stacks are rebuilt when a batch is sampled.

Priorities are kept per move (``alpha`` = 0.6); new moves enter at the current maximum
priority, and sampling returns importance-sampling weights (``beta`` annealed by the
caller from 0.4 to 1).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ez_robot.config import ReplayConfig

__all__ = ["Segment", "SearchResults", "SampleRef", "ReplayBuffer"]


@dataclass
class Segment:
    """Moves of one episode.  M = len(actions) moves, the first ``num_own`` of which are
    this segment's (sampled); the rest are the look-ahead tail, owned by the next segment."""

    frames: np.ndarray
    """[frame_stack - 1 + M + 1, *frame_shape]: frame j is the newest frame of observation
    j - (frame_stack - 1); observation j is frames[j : j + frame_stack] stacked on axis 0."""
    actions: np.ndarray
    """[M] int64 action taken at each move (joint mode), or [M, D] float32 action vectors
    in [-1, 1] (the sampled modes)."""
    rewards: np.ndarray
    """[M] float32 reward received after each move."""
    root_values: np.ndarray
    """[M + 1] float32 search root value at each observation, when it was collected
    (the last one 0 when the episode terminated there)."""
    policies: np.ndarray
    """[M, A] float32 search visit distribution at each move, when it was collected (the
    sampled modes: [M, K] the improved policy over that move's candidates)."""
    collected_at: np.ndarray
    """[num_own] int64 training step of the acting network that collected each move."""
    num_own: int
    """Moves that belong to this segment (the rest is tail)."""
    frame_stack: int = 1
    """Frames per observation."""
    episode_end: bool = False
    """The episode ends after the last move (observation M is its final one)."""
    terminated: bool = False
    """It ended by termination (no bootstrapping past it), not by truncation."""
    candidates: "np.ndarray | None" = field(default=None, compare=False, repr=False)
    """Sampled modes: [M, K, D] float32 the candidate actions ``policies`` is over; None
    in joint mode."""
    search: "SearchResults | None" = field(default=None, compare=False, repr=False)
    """The latest target-network search of every observation (buffer reanalyze); not
    stored with the segment's files: a resumed run searches again."""

    def __post_init__(self):
        moves = len(self.actions)
        checks = {
            "frames": (len(self.frames), self.frame_stack + moves),
            "rewards": (len(self.rewards), moves),
            "root_values": (len(self.root_values), moves + 1),
            "policies": (len(self.policies), moves),
            "collected_at": (len(self.collected_at), self.num_own),
        }
        if self.candidates is not None:
            checks["candidates"] = (len(self.candidates), moves)
        for name, (got, want) in checks.items():
            if got != want:
                raise ValueError(f"Segment.{name} has length {got}, expected {want} for {moves} moves")
        if not 1 <= self.num_own <= moves:
            raise ValueError(f"Segment.num_own must be in [1, {moves}], got {self.num_own}")
        if self.terminated and not self.episode_end:
            raise ValueError("Segment.terminated needs episode_end")

    @property
    def num_moves(self) -> int:
        return len(self.actions)

    def observation(self, index: int) -> np.ndarray:
        """Observation ``index`` in [0, M], frames stacked on axis 0."""
        frames = self.frames[index:index + self.frame_stack]
        return frames.reshape((-1,) + frames.shape[2:]) if self.frame_stack > 1 else frames[0]


@dataclass(frozen=True)
class SearchResults:
    """A target-network search of all observations 0..M of a segment."""

    values: np.ndarray
    """[M + 1] float32 root value of each observation."""
    policies: np.ndarray
    """[M, A] float32 visit distribution (temperature 1) at each observation with a move
    (sampled modes: [M, K] the improved policy over ``candidates``)."""
    version: int
    """Training step at which the target network that searched was taken."""
    round: int = -1
    """The sweep round it belongs to (a training step: when the round began); the sweep
    searches again what is older than the current round."""
    candidates: "np.ndarray | None" = None
    """Sampled modes: [M, K, D] float32 the candidates of each search."""


@dataclass(frozen=True)
class SampleRef:
    """Which moves a batch holds, and their importance-sampling weights."""

    segments: list
    """[B] Segment objects."""
    segment_ids: np.ndarray
    """[B] int64 ids, for priority updates."""
    positions: np.ndarray
    """[B] int64 move index inside each segment."""
    weights: np.ndarray
    """[B] float32 importance-sampling weights, max-normalized to 1."""


@dataclass
class ReplayBuffer:
    config: ReplayConfig
    segments: list = field(default_factory=list)
    _priorities: list = field(default_factory=list)
    _first_id: int = 0
    _max_priority: float = 1.0
    swept_round: int = -1
    """Buffer reanalyze: the latest sweep round every stored segment has results of (that
    round is complete); -1 before any."""
    _num_moves: int = 0

    def __len__(self) -> int:
        """Moves that can be sampled."""
        return self._num_moves

    def add(self, segment: Segment) -> int:
        """Stores a segment at the current max priority; returns its id.  Evicts the oldest
        segments beyond ``capacity`` moves."""
        self.segments.append(segment)
        self._priorities.append(np.full(segment.num_own, self._max_priority, np.float64))
        self._num_moves += segment.num_own
        while self._num_moves > self.config.capacity and len(self.segments) > 1:
            self._num_moves -= self.segments.pop(0).num_own
            self._priorities.pop(0)
            self._first_id += 1
        return self._first_id + len(self.segments) - 1

    def ready(self) -> bool:
        return self._num_moves >= self.config.min_replay_size

    def sample(self, batch_size: int, beta: float, rng: np.random.Generator) -> SampleRef:
        """Samples moves with P(i) = p_i^alpha / sum_j p_j^alpha; their weights are
        (N P(i))^-beta over the batch's largest, at least ``replay.min_weight``."""
        if not self._num_moves:
            raise RuntimeError("cannot sample from an empty replay buffer")
        lengths = np.array([len(p) for p in self._priorities])
        scaled = np.concatenate(self._priorities) ** self.config.priority_alpha
        probs = scaled / scaled.sum()
        flat = rng.choice(len(probs), size=batch_size, p=probs)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        which = np.searchsorted(starts, flat, side="right") - 1
        weights = (len(probs) * probs[flat]) ** (-beta)
        return SampleRef(
            segments=[self.segments[i] for i in which],
            segment_ids=(which + self._first_id).astype(np.int64),
            positions=(flat - starts[which]).astype(np.int64),
            weights=np.maximum(weights / weights.max(), self.config.min_weight).astype(np.float32),
        )

    def update_priorities(self, segment_ids: np.ndarray, positions: np.ndarray, priorities: np.ndarray) -> None:
        """Sets new priorities (e.g. value L1 errors); ids already evicted are skipped."""
        priorities = np.maximum(np.asarray(priorities, np.float64), 1e-6)
        for sid, pos, p in zip(segment_ids, positions, priorities):
            i = int(sid) - self._first_id
            if 0 <= i < len(self.segments):
                self._priorities[i][pos] = p
        self._max_priority = max(self._max_priority, float(priorities.max()))

    def stalest(self, count: int, older_than: int) -> list[tuple[int, "Segment"]]:
        """Up to ``count`` (id, segment) pairs whose search results are from a sweep round
        before ``older_than`` (or missing), the oldest results first and, among equals,
        the newest segments first: new data is searched before old data is searched again."""
        rounds = np.array([s.search.round if s.search is not None else -1 for s in self.segments])
        stale = np.flatnonzero(rounds < older_than)
        order = stale[np.lexsort((-stale, rounds[stale]))][:count]
        return [(self._first_id + int(i), self.segments[i]) for i in order]

    def next_to_search(self, older_than: int, skip=()) -> "tuple[int, Segment] | None":
        """The stalest segment (:meth:`stalest`) whose id is not in ``skip`` (segments
        another sweeper is searching), or None.  When none is stale at all, the sweep up
        to ``older_than`` is complete and :attr:`swept_round` says so."""
        stale = self.stalest(len(skip) + 1, older_than)
        if not stale:
            self.swept_round = max(self.swept_round, older_than)
        return next(((i, segment) for i, segment in stale if i not in skip), None)

    def store_search(self, segment_id: int, results: SearchResults) -> bool:
        """Keeps a segment's search results; False if it was evicted meanwhile."""
        i = segment_id - self._first_id
        if not 0 <= i < len(self.segments):
            return False
        self.segments[i].search = results
        return True

    def observations_stored(self) -> int:
        """Observations a full sweep searches (every segment's M + 1, tails included)."""
        return sum(s.num_moves + 1 for s in self.segments)

    def state_dict(self) -> dict:
        """Priorities and ids (the segments themselves are stored by
        :class:`ez_robot.checkpoint.ReplayFiles`, each once)."""
        return {"first_id": self._first_id, "priorities": [p.copy() for p in self._priorities],
                "max_priority": self._max_priority}

    @classmethod
    def from_state_dict(cls, config: ReplayConfig, state: dict, segments: list) -> "ReplayBuffer":
        """The buffer :meth:`state_dict` described, holding ``segments`` (oldest first)."""
        priorities = [np.array(p, np.float64) for p in state["priorities"]]
        if len(priorities) != len(segments):
            raise ValueError(f"{len(segments)} segments for {len(priorities)} priority arrays")
        return cls(config, segments=list(segments), _priorities=priorities, _first_id=int(state["first_id"]),
                   _max_priority=float(state["max_priority"]), _num_moves=sum(s.num_own for s in segments))

    def priorities(self) -> np.ndarray:
        """p_i of every stored move, in storage order (tests, diagnostics)."""
        return np.concatenate(self._priorities) if self._priorities else np.zeros(0)

    def probabilities(self) -> np.ndarray:
        """P(i) of every stored move, in storage order (tests, diagnostics)."""
        scaled = self.priorities() ** self.config.priority_alpha
        return scaled / scaled.sum()
