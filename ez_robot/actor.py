"""Self-play: N environments stepped together, one batched search per decision.

Moves are cut into :class:`Segment` s of ``segment_length`` moves, each carrying a
look-ahead tail of ``tail_length`` following moves (unroll + td steps) so its targets
never reach into another segment.  An episode's last segment has no tail.

An env wrapped in :class:`ez_robot.envs.guard.RemakeOnError` reports a step that raised
as ``info["env_error"]``: the actor drops that episode's moves not yet cut into a
segment (the segments already cut are whole) and starts a new episode.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ez_robot.mcts import visit_policy
from ez_robot.search_config import SearchConfig
from ez_robot.envs.guard import ENV_ERROR
from ez_robot.envs.wrappers import TASK_REWARD
from ez_robot.inference import run_search
from ez_robot.torch_inference import TorchInference
from ez_robot.replay import Segment

__all__ = ["Actor", "EpisodeStats", "Played"]


@dataclass
class EpisodeStats:
    episode_return: float
    """The task's own return: training rewards before ``env.reward_scale`` and ``env.reward_offset``."""
    length: int
    env_frames: int


class Played(NamedTuple):
    """What one decision in every env produced."""

    segments: list
    """Finished :class:`Segment` s, for replay."""
    episodes: list
    """:class:`EpisodeStats` of the episodes that ended."""
    env_errors: list
    """Errors of envs that raised (their unfinished episodes were dropped)."""


@dataclass
class _Trajectory:
    frame_stack: int
    frames: list = field(default_factory=list)
    actions: list = field(default_factory=list)
    rewards: list = field(default_factory=list)
    root_values: list = field(default_factory=list)
    policies: list = field(default_factory=list)
    candidates: list = field(default_factory=list)  # sampled modes: [K, D] per move
    collected_at: list = field(default_factory=list)
    episode_return: float = 0.0
    length: int = 0
    env_frames: int = 0

    def start(self, obs: np.ndarray) -> None:
        # a stacked pixel observation holds frame_stack frames on its channel axis
        self.frames = list(np.split(obs, self.frame_stack, axis=0)) if self.frame_stack > 1 else [obs]

    def newest_frame(self, obs: np.ndarray) -> np.ndarray:
        return np.split(obs, self.frame_stack, axis=0)[-1] if self.frame_stack > 1 else obs

    def segment(self, num_own: int, last_value: float, *, episode_end=False, terminated=False) -> Segment:
        moves = num_own if episode_end else len(self.actions)
        return Segment(
            frames=np.stack(self.frames[:self.frame_stack + moves]),
            actions=np.array(self.actions[:moves], np.float32 if self.candidates else np.int64),
            rewards=np.array(self.rewards[:moves], np.float32),
            root_values=np.array(self.root_values[:moves] + [last_value], np.float32),
            policies=np.stack(self.policies[:moves]).astype(np.float32),
            collected_at=np.array(self.collected_at[:num_own], np.int64),
            num_own=num_own, frame_stack=self.frame_stack, episode_end=episode_end, terminated=terminated,
            candidates=np.stack(self.candidates[:moves]).astype(np.float32) if self.candidates else None)

    def drop(self, moves: int) -> None:
        del self.frames[:moves], self.actions[:moves], self.rewards[:moves]
        del self.root_values[:moves], self.policies[:moves], self.collected_at[:moves], self.candidates[:moves]


class Actor:
    def __init__(self, envs: list, inference: TorchInference, search_config: SearchConfig, *, segment_length: int,
                 tail_length: int, frame_stack: int, seed: int):
        self.envs = envs
        self.inference = inference
        self.search_config = search_config
        self.segment_length = segment_length
        self.tail_length = tail_length
        self.rng = np.random.default_rng(seed)
        self.trajectories = [_Trajectory(frame_stack) for _ in envs]
        self.observations = []
        for i, (env, traj) in enumerate(zip(envs, self.trajectories)):
            obs, _ = env.reset(seed=seed + i)
            traj.start(obs)
            self.observations.append(obs)

    def step(self, train_step: int, temperature: float) -> Played:
        """One decision in every env."""
        config = self.search_config.replace(temperature=temperature)
        out = run_search(self.inference, np.stack(self.observations), config, self.rng)
        # the stored target: the T = 1 visit distribution (joint), the improved policy (sampled)
        policies = visit_policy(out.visit_counts, 1.0) if out.candidates is None else out.policy
        segments, episodes, finals, errors = [], [], [], []
        for i, (env, traj) in enumerate(zip(self.envs, self.trajectories)):
            traj.root_values.append(float(out.root_values[i]))
            if len(traj.actions) == self.segment_length + self.tail_length:
                # the value at the tail's last observation is known now: cut a segment
                segments.append(traj.segment(self.segment_length, traj.root_values[-1]))
                traj.drop(self.segment_length)
            action = int(out.actions[i]) if out.candidates is None else out.actions[i]
            obs, reward, terminated, truncated, info = env.step(action)
            if ENV_ERROR in info:  # the env was made again: this episode's uncut moves are lost
                errors.append(info[ENV_ERROR])
                self._restart(i)
                continue
            traj.actions.append(action)
            traj.rewards.append(float(reward))
            traj.policies.append(policies[i])
            if out.candidates is not None:
                traj.candidates.append(out.candidates[i])
            traj.collected_at.append(train_step)
            traj.frames.append(traj.newest_frame(obs))
            traj.episode_return += float(info.get(TASK_REWARD, reward))  # the task's units, as evaluations
            traj.length += 1
            traj.env_frames += int(info.get("env_frames", 1))
            self.observations[i] = obs
            if terminated or truncated:
                finals.append((i, obs, bool(terminated)))
        if finals:
            # a truncated episode bootstraps from its final observation: value it once
            final_values = self.inference.root(np.stack([obs for _, obs, _ in finals])).value
            for (i, _, terminated), value in zip(finals, final_values):
                traj = self.trajectories[i]
                moves = len(traj.actions)
                segments.append(traj.segment(moves, 0.0 if terminated else float(value), episode_end=True,
                                             terminated=terminated))
                episodes.append(EpisodeStats(traj.episode_return, traj.length, traj.env_frames))
                self._restart(i)
        return Played(segments, episodes, errors)

    def _restart(self, i: int) -> None:
        """A new episode in env ``i``."""
        self.trajectories[i] = _Trajectory(self.trajectories[i].frame_stack)
        obs, _ = self.envs[i].reset()
        self.trajectories[i].start(obs)
        self.observations[i] = obs

    def state_dict(self) -> dict:
        """The generator of its searches (the envs' own state is not kept: a resumed run
        starts new episodes)."""
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]

    def flush(self) -> list[Segment]:
        """The moves of unfinished episodes as segments cut at the current observation
        (bootstrapping from its value, like a truncation), so that nothing collected is
        lost when self-play stops mid-episode.  The episodes go on from there."""
        live = [i for i, traj in enumerate(self.trajectories) if traj.actions]
        if not live:
            return []
        values = self.inference.root(np.stack([self.observations[i] for i in live])).value
        segments = []
        for i, value in zip(live, values):
            traj = self.trajectories[i]
            segments.append(traj.segment(len(traj.actions), float(value), episode_end=True, terminated=False))
            fresh = _Trajectory(traj.frame_stack, episode_return=traj.episode_return, length=traj.length,
                                env_frames=traj.env_frames)
            fresh.start(self.observations[i])
            self.trajectories[i] = fresh
        return segments
