"""What a run has done (:class:`Counters`) and what is due next: training steps per
decision, temperature, importance-sampling beta, evaluations.

Both trainers read their schedules here, so that they train, explore and evaluate on the
same timetable.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from ez_robot.config import Config

__all__ = ["Counters", "TRAIN_LOG_INTERVAL", "RECENT_EPISODES", "paced_train_steps", "total_train_steps",
           "train_steps_due", "temperature_at", "priority_beta", "eval_seed", "default_eval_interval", "eval_interval_for",
           "next_eval_after", "replay_shortfall", "finished"]

TRAIN_LOG_INTERVAL = 50
"""Training steps between two ``train`` records (losses) in metrics.jsonl."""
RECENT_EPISODES = 20
"""Episodes in the moving average the progress bar shows."""
_EVAL_SEED_OFFSET = 10_000  # evaluation episodes never replay a training episode's seed


@dataclass
class Counters:
    """How far a run has come; saved in every checkpoint."""

    agent_steps: int = 0
    env_frames: int = 0
    train_steps: int = 0
    episodes: int = 0
    recent_returns: list = field(default_factory=list)
    """Returns of the last :data:`RECENT_EPISODES` training episodes."""
    next_eval: int = 0
    """Agent steps of the next periodic evaluation not yet logged (0: none scheduled yet).
    A run resumed from a checkpoint taken before an evaluation was logged redoes it."""
    final_eval: int = -1
    """Agent steps at which the run's final evaluation was logged (-1: none yet).  A run
    checkpointed at the end of its budget but stopped before that evaluation was logged
    takes it when resumed."""
    eval_interval: int = 0
    """Agent steps between periodic evaluations, fixed when the run starts (0: not yet, or
    a checkpoint older than this field), so that a run extended to a larger budget goes on
    evaluating as often as before."""

    def add_episode(self, episode_return: float) -> None:
        self.episodes += 1
        self.recent_returns = (self.recent_returns + [float(episode_return)])[-RECENT_EPISODES:]

    def at(self, **changes) -> "Counters":
        """A copy with some counts changed (the counters a record is logged with)."""
        return dataclasses.replace(self, recent_returns=list(self.recent_returns), **changes)

    def state_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_state_dict(cls, state: dict) -> "Counters":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in state.items() if key in names})


def paced_train_steps(config: Config) -> int:
    """The learner's steps paced to self-play (the ratio times the budget's decisions)."""
    return max(1, math.ceil(config.agent_steps_budget * config.train.train_steps_per_agent_step))


def total_train_steps(config: Config) -> int:
    """The learner's steps in the whole run: those paced to self-play, then the offline ones."""
    return paced_train_steps(config) + config.train.offline_train_steps


def train_steps_due(config: Config, agent_steps: int) -> int:
    """Training steps the learner may have done after ``agent_steps`` decisions: the
    config's ratio, and all of them once self-play has spent the budget."""
    total = total_train_steps(config)
    if agent_steps >= config.agent_steps_budget:
        return total
    return min(int(agent_steps * config.train.train_steps_per_agent_step), total)


def temperature_at(train_steps: int, total: int) -> float:
    """Visit-count temperature 1 -> 0.5 -> 0.25 at 50% and 75% of training (appendix);
    ``total`` is the training paced to self-play (:func:`paced_train_steps`)."""
    progress = train_steps / max(total, 1)
    return 1.0 if progress < 0.5 else 0.5 if progress < 0.75 else 0.25


def priority_beta(config: Config, train_steps: int, total: int) -> float:
    """Importance-sampling exponent, annealed linearly from beta_start to beta_end."""
    r = config.replay
    return r.priority_beta_start + (r.priority_beta_end - r.priority_beta_start) * min(train_steps / total, 1.0)


def eval_seed(config: Config) -> int:
    """Seed of the first evaluation episode during training (then +1 each)."""
    return _EVAL_SEED_OFFSET + config.seed


def default_eval_interval(config: Config) -> int:
    """Agent steps between periodic evaluations: a tenth of the budget."""
    return max(config.agent_steps_budget // 10, 1)


def eval_interval_for(config: Config, counters: Counters, asked: int | None = None) -> int:
    """The evaluation interval of a run: ``asked`` when given, else the one the run started
    with (a larger budget on resume keeps it), else a tenth of the budget.  Recorded in
    ``counters`` for the checkpoints."""
    counters.eval_interval = asked or counters.eval_interval or default_eval_interval(config)
    return counters.eval_interval


def next_eval_after(counters: Counters, interval: int) -> int:
    """The next evaluation point: the one a resumed run left unlogged, else the first
    multiple of ``interval`` past the agent steps done."""
    if counters.next_eval > 0:
        return counters.next_eval
    return (counters.agent_steps // interval + 1) * interval


def finished(config: Config, counters: Counters) -> bool:
    """The budget is spent, the learner has done its training steps, and the final
    evaluation after them is logged: nothing left for a resumed run with this config."""
    return (counters.agent_steps >= config.agent_steps_budget and counters.train_steps >= total_train_steps(config)
            and counters.final_eval >= counters.agent_steps)


def replay_shortfall(config: Config, counters: Counters, replay_moves: int) -> str | None:
    """Why the learner could never reach its training steps: the replay holds fewer moves
    than ``min_replay_size`` and self-play has too few agent steps left to add them
    (``None`` when training can go on).  A run resumed without its replay, with a budget
    only a little larger, is the usual case."""
    if counters.train_steps >= total_train_steps(config):
        return None
    missing = config.replay.min_replay_size - replay_moves
    left = max(config.agent_steps_budget - counters.agent_steps, 0)
    if missing <= 0 or left >= missing:
        return None
    needed = counters.agent_steps + missing
    unit_needed = needed * (config.env.action_repeat if config.env.budget_unit == "env_frames" else 1)
    return (f"training cannot reach its {total_train_steps(config)} steps: the replay buffer holds {replay_moves} "
            f"moves, training samples only once it holds replay.min_replay_size = {config.replay.min_replay_size}, "
            f"and self-play has {left} agent steps left in the budget to add the {missing} missing; give --budget "
            f"{unit_needed} or more ({config.env.budget_unit}), or a smaller --set replay.min_replay_size")
