"""The run's config: the sections composed, the budget in both units, the checks that
span sections, and the cautions training prints before it starts."""
from __future__ import annotations

from dataclasses import dataclass, field

from ez_robot.config.sections import EnvConfig, ModelConfig, ReanalyzeConfig, ReplayConfig
from ez_robot.config.tasks import resolved_action_mode, task_family
from ez_robot.config.train import TrainConfig
from ez_robot.errors import ConfigError
from ez_robot.search_config import SearchConfig

__all__ = ["Config", "SECTIONS", "TOP_LEVEL"]


@dataclass(frozen=True)
class Config:
    """Every setting of a run, one frozen section per component; a run saves it as
    ``config.yaml`` (:func:`ez_robot.config.config_to_dict`)."""

    env: EnvConfig = field(default_factory=EnvConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    reanalyze: ReanalyzeConfig = field(default_factory=ReanalyzeConfig)
    seed: int = 0
    """Seed of every random generator in the run."""
    preset: str = ""
    """The preset file the config was built from (informational)."""

    def __post_init__(self):
        if self.agent_steps_budget < self.replay.min_replay_size:
            raise ConfigError(
                f"the budget ({self.train.budget} {self.env.budget_unit} = {self.agent_steps_budget} agent steps) "
                f"is below replay.min_replay_size ({self.replay.min_replay_size} moves): training would never "
                f"start; raise --budget or lower replay.min_replay_size")
        if self.train.model_gradient_coef > 0 and self.env.action_mode != "auto":  # auto: resolved before the run
            if resolved_action_mode(self.env) != "gaussian":
                raise ConfigError(f"train.model_gradient_coef={self.train.model_gradient_coef:g} differentiates the "
                                  f"model through a reparameterized Gaussian action; env.action_mode is "
                                  f"{self.env.action_mode}: --set env.action_mode=gaussian, or leave the coefficient at 0")

    @property
    def cautions(self) -> list[str]:
        """Settings that are each valid but work against each other; training prints them
        before it starts."""
        notes = []
        offset = self.env.reward_offset
        if offset >= 0:
            return notes
        # the mode as training resolves it: a Config built in code may still say auto
        if self.search.root_unvisited_q == "zero" and resolved_action_mode(self.env) == "joint":
            notes.append(f"env.reward_offset={offset:g} makes returns negative, and "
                         "search.root_unvisited_q=zero then scores every unvisited root action above the visited "
                         "ones: the root search goes breadth-first (each action once before any twice). "
                         "Add --set search.root_unvisited_q=mean")
        if task_family(self.env.task, self.env.obs) not in ("dmc_state", "dmc_pixels"):
            notes.append(f"env.reward_offset={offset:g} on {self.env.task}: where an episode can end "
                         "before its time limit (a fall, a lost game), negative rewards make ending it sooner pay. "
                         "Keep it for fixed-length episodes only, else --set env.reward_offset=0")
        return notes

    @property
    def agent_steps_budget(self) -> int:
        """The budget converted to agent decisions."""
        if self.env.budget_unit == "agent_steps":
            return self.train.budget
        return -(-self.train.budget // self.env.action_repeat)  # ceil: never stop short of the budget

    @property
    def env_frames_budget(self) -> int:
        return self.agent_steps_budget * self.env.action_repeat


SECTIONS = {"env": EnvConfig, "model": ModelConfig, "search": SearchConfig, "replay": ReplayConfig,
            "reanalyze": ReanalyzeConfig,
            "train": TrainConfig}
TOP_LEVEL = ("seed",)
