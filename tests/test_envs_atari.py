"""The Atari 100k preset: shapes, determinism, train vs eval, the frame cap, pickling."""
import pickle

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from ez_robot.config import make_env
from ez_robot.envs.atari import atari_games, make_atari


def test_games_listed():
    games = atari_games()
    assert "Pong" in games and "MsPacman" in games and len(games) > 50


def test_check_env_and_spaces():
    env = make_env("atari:Pong", seed=0)
    check_env(env.unwrapped, skip_render_check=True)
    check_env(env, skip_render_check=True)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (12, 96, 96) and obs.dtype == np.uint8 and env.observation_space.contains(obs)
    assert env.action_space.n == 6  # Pong's minimal action set


def test_stack_is_channel_first_oldest_first():
    env = make_atari("Breakout", seed=0, mode="eval", noop_max=0)
    obs, _ = env.reset(seed=0)
    for _ in range(12):
        obs, *_ = env.step(1)  # FIRE launches the ball
    frames = obs.reshape(4, 3, 96, 96)
    assert not np.array_equal(frames[0], frames[3])  # the stack holds four different moments


def test_same_seed_same_observations():
    a, b = make_env("atari:Pong", seed=5), make_env("atari:Pong", seed=5)
    np.testing.assert_array_equal(a.reset(seed=5)[0], b.reset(seed=5)[0])
    for action in [0, 2, 3, 2, 1]:
        np.testing.assert_array_equal(a.step(action)[0], b.step(action)[0])


def _play_until_life_lost(mode):
    env = make_atari("Breakout", seed=0, mode=mode)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    lives = None
    for _ in range(3000):
        _, _, terminated, truncated, info = env.step(int(rng.integers(env.action_space.n)))
        if lives is not None and info["lives"] < lives:
            return terminated
        lives = info["lives"]
        assert not terminated
    pytest.fail("no life lost in 3000 steps")


def test_life_loss_is_terminal_only_in_training():
    assert _play_until_life_lost("train") is True
    assert _play_until_life_lost("eval") is False


def test_reward_clipping_only_in_training():
    def rewards(mode):
        env = make_atari("SpaceInvaders", seed=0, mode=mode)
        env.reset(seed=0)
        rng = np.random.default_rng(1)
        seen = []
        for _ in range(600):
            _, reward, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
            seen.append(reward)
            if terminated or truncated:
                env.reset()
        return np.array(seen)

    raw, clipped = rewards("eval"), rewards("train")
    assert raw.max() > 1  # Space Invaders pays 5-30 points per invader
    assert set(np.unique(clipped)) <= {-1.0, 0.0, 1.0} and clipped.max() == 1.0


def test_episode_cap_truncates():
    env = make_atari("Pong", seed=0, mode="eval", max_episode_frames=400)
    env.reset(seed=0)
    for step in range(200):
        _, _, terminated, truncated, _ = env.step(0)
        if terminated or truncated:
            break
    assert truncated and not terminated and step < 100  # 400 frames at frame skip 4, no-ops included


def test_pickles():
    env = make_env("atari:Pong", seed=0)
    clone = pickle.loads(pickle.dumps(env))
    obs, _ = clone.reset(seed=3)
    assert obs.shape == (12, 96, 96)
    clone.step(1)


def test_errors():
    with pytest.raises(ValueError, match="unknown Atari game 'Pongg'; did you mean: Pong"):
        make_atari("Pongg")
    with pytest.raises(ValueError, match="mode must be 'train' or 'eval'"):
        make_atari("Pong", mode="play")
    with pytest.raises(ValueError, match="frame_size must be >= 8"):
        make_atari("Pong", frame_size=4)


def test_without_ale_py_atari_tasks_are_absent_and_named_with_the_extra(monkeypatch):
    """A training install without the Atari extra lists no Atari task, and naming one says
    which extra to install (not a ModuleNotFoundError)."""
    from ez_robot import envs
    from ez_robot.envs import atari
    from ez_robot.errors import ConfigError

    monkeypatch.setattr(atari, "ale_installed", lambda: False)
    names = envs.task_names()
    assert "cartpole_swingup" in names and not [n for n in names if n.startswith("atari:")]
    with pytest.raises(ConfigError, match=r"ez-robot\[atari\]"):
        envs.validate_task("atari:Pong")
