"""Typed, frozen run configuration, loaded from the YAML presets in ``configs/``.

One dataclass per component, composed in :class:`Config`:

- :mod:`~ez_robot.config.sections`: ``env``, ``model``, ``replay`` and ``reanalyze``;
  :mod:`~ez_robot.config.train`: ``train``; ``search`` is :class:`ez_robot.search_config.SearchConfig`;
- :mod:`~ez_robot.config.composed`: :class:`Config`, the checks across sections;
- :mod:`~ez_robot.config.loading`: presets, recipes, ``--set`` overrides, budgets, saved runs;
- :mod:`~ez_robot.config.tasks`: what the config asks the task registry (:mod:`ez_robot.envs`).

Defaults are the paper's appendix table (Atari); the presets (``configs/<family>.yaml``)
hold what differs per task family and per task.  ``--set section.key=value`` overrides
any field; unknown keys and out-of-range values fail with a :class:`ConfigError` that
names them.
"""
from ez_robot.config.composed import SECTIONS, TOP_LEVEL, Config
from ez_robot.config.loading import (KWARGS_PREFIX, PRESET_DIR, RECIPE_DIR, config_from_dict, config_to_dict,
                                     eval_number, load_config, make_env, parse_budget, parse_override,
                                     recipe_overrides, search_config, with_search_overrides)
from ez_robot.config.sections import (ACTION_MODES, REANALYZE_MODES, STATE_BODIES, EnvConfig, ModelConfig,
                                      ReanalyzeConfig, ReplayConfig)
from ez_robot.config.tasks import resolved_action_mode, task_family
from ez_robot.config.train import TrainConfig
from ez_robot.errors import ConfigError
from ez_robot.search_config import SearchConfig

__all__ = ["ConfigError", "EnvConfig", "ModelConfig", "ReplayConfig", "TrainConfig", "ReanalyzeConfig", "Config",
           "SearchConfig", "load_config", "make_env", "resolved_action_mode", "search_config", "parse_budget",
           "parse_override", "eval_number", "config_to_dict", "config_from_dict", "with_search_overrides",
           "task_family", "recipe_overrides", "PRESET_DIR", "RECIPE_DIR", "SECTIONS", "TOP_LEVEL", "KWARGS_PREFIX",
           "ACTION_MODES", "STATE_BODIES", "REANALYZE_MODES"]
