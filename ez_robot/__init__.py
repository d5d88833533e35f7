"""ez-robot: EfficientZero agents for DeepMind Control and Atari, deployable on robots."""
from ez_robot.mcts import RootOutput, SearchOutput, search, visit_policy
from ez_robot.search_config import SearchConfig
from ez_robot.action_modes import ActionSpec
from ez_robot import api
from ez_robot.api import Agent, evaluate, export_bundle, load, train
from ez_robot._version import __version__

__all__ = ["train", "load", "Agent", "evaluate", "export_bundle", "api", "ActionSpec", "RootOutput", "SearchConfig", "SearchOutput", "search", "visit_policy", "__version__"]
