"""Atari games under the Atari 100k protocol, every setting explicit.

- ALE with no sticky actions (``repeat_action_probability=0``; ALE v5 defaults to 0.25)
  and the minimal action set;
- the base env steps single frames (``frameskip=1``) so that Gymnasium's
  ``AtariPreprocessing`` does the skipping: 4 frames per action, max-pooled over the
  last two (flicker), up to 30 no-op actions at reset, RGB resized to 96x96;
- 4 observations stacked and laid out channel-first: [12, 96, 96] uint8, oldest first;
- an episode cap of 108,000 frames (27,000 agent steps), reported as ``truncated``;
- ``mode="train"``: a lost life ends the episode (``terminated``) and rewards are clipped
  to their sign; ``mode="eval"``: raw game scores and whole games.

:class:`AtariSuite` is the registry's suite of these games (``atari:<Game>``).
"""
from __future__ import annotations

import difflib
import functools
import importlib.util
from typing import Any

import gymnasium as gym
import numpy as np

from ez_robot.envs.suite import Suite
from ez_robot.errors import ConfigError

__all__ = ["atari_games", "make_atari", "AtariSuite"]

PREFIX = "atari:"


def ale_installed() -> bool:
    """ale-py comes with the ``atari`` extra; a training install without it has no Atari."""
    return importlib.util.find_spec("ale_py") is not None


@functools.cache
def atari_games() -> tuple[str, ...]:
    """CamelCase names of the single-player games ale-py ships ROMs for (``Pong``,
    ``MsPacman``); the few multiplayer-only ROMs have no ``ALE/<Name>-v5`` env."""
    import ale_py
    import ale_py.roms

    gym.register_envs(ale_py)
    names = ("".join(part.capitalize() for part in rom.split("_")) for rom in ale_py.roms.get_all_rom_ids())
    return tuple(sorted(n for n in names if f"ALE/{n}-v5" in gym.registry))


class _ChannelFirstStack(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """[stack, H, W, 3] -> [3 * stack, H, W], the layout the networks take."""

    def __init__(self, env: gym.Env):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ObservationWrapper.__init__(self, env)
        stack, height, width, channels = env.observation_space.shape
        self.observation_space = gym.spaces.Box(0, 255, (stack * channels, height, width), np.uint8)

    def observation(self, observation):
        stack, height, width, channels = observation.shape
        return np.ascontiguousarray(np.asarray(observation).transpose(0, 3, 1, 2).reshape(
            stack * channels, height, width))


def _reward_sign(reward: float) -> float:  # module level, so the env pickles
    return float(np.sign(reward))


def _check_game(game: str) -> None:
    games = atari_games()
    if game in games:
        return
    lower = {g.lower(): g for g in games}
    close = [lower[c] for c in difflib.get_close_matches(game.lower(), list(lower), n=3, cutoff=0.6)]
    hint = f"; did you mean: {', '.join(close)}?" if close else ""
    raise ValueError(f"unknown Atari game {game!r}{hint}")


def make_atari(game: str, *, seed: int | None = None, mode: str = "train", frame_size: int = 96,
               frame_stack: int = 4, frame_skip: int = 4, noop_max: int = 30,
               max_episode_frames: int = 108_000) -> gym.Env:
    """The Atari 100k env for ``game`` (a name from :func:`atari_games`)."""
    import ale_py

    if mode not in ("train", "eval"):
        raise ValueError(f"mode must be 'train' or 'eval', got {mode!r}")
    for name, value, low in [("frame_size", frame_size, 8), ("frame_stack", frame_stack, 1),
                             ("frame_skip", frame_skip, 1), ("noop_max", noop_max, 0),
                             ("max_episode_frames", max_episode_frames, 1)]:
        if value < low:
            raise ValueError(f"{name} must be >= {low}, got {value}")
    _check_game(game)
    gym.register_envs(ale_py)
    env = gym.make(f"ALE/{game}-v5", frameskip=1, repeat_action_probability=0.0, full_action_space=False,
                   max_num_frames_per_episode=max_episode_frames)
    env = gym.wrappers.AtariPreprocessing(env, noop_max=noop_max, frame_skip=frame_skip, screen_size=frame_size,
                                          terminal_on_life_loss=(mode == "train"), grayscale_obs=False,
                                          scale_obs=False)
    env = gym.wrappers.FrameStackObservation(env, frame_stack)
    env = _ChannelFirstStack(env)
    if mode == "train":
        env = gym.wrappers.TransformReward(env, _reward_sign)
    env.action_space.seed(seed)
    return env


class AtariSuite(Suite):
    """``atari:<Game>``: every game ale-py ships (``atari:Pong``, ``atari:MsPacman``),
    always from pixels (preset ``atari``)."""

    kind = "atari"

    def claims(self, task: str) -> bool:
        return task.startswith(PREFIX)

    def task_names(self) -> list[str]:
        return [f"{PREFIX}{game}" for game in atari_games()] if ale_installed() else []

    def knows(self, task: str) -> bool:
        if not ale_installed():
            raise ConfigError(f"{task} needs ale-py, which the Atari extra installs: pip install 'ez-robot[atari]' "
                              "(from a checkout: pip install -e '.[atari]')")
        return task.removeprefix(PREFIX) in atari_games()

    def preset_family(self, task: str, obs: str) -> str:
        return "atari"

    def make(self, env_config: Any, *, seed: int | None, mode: str) -> gym.Env:
        return make_atari(env_config.task.removeprefix(PREFIX), seed=seed, mode=mode,
                          frame_size=env_config.frame_size, frame_stack=env_config.frame_stack,
                          frame_skip=env_config.action_repeat, noop_max=env_config.noop_max,
                          max_episode_frames=env_config.max_episode_frames)

    def action_dims(self, task: str, kwargs: dict) -> int | None:
        return None  # the minimal action set: Discrete

    def made(self, env: gym.Env) -> bool:
        return hasattr(env.unwrapped, "ale")

    def control_period(self, env: gym.Env, env_config: Any) -> float | None:
        return env_config.action_repeat / 60.0  # the ALE runs 60 frames per second

    def render_frame(self, env: gym.Env) -> np.ndarray:
        return env.unwrapped.ale.getScreenRGB()  # the game screen, not the agent's downscaled frames
