"""The example robot examples/arm/reach_arm.py: API checks, determinism and task sanity."""
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from tests.scripts import load_script

arm = load_script("examples/arm/reach_arm.py", "example_reach_arm")


def _success_rate(policy, episodes=20, **kwargs):
    env = arm.make_arm(**kwargs)
    wins = 0
    for seed in range(episodes):
        env.reset(seed=1000 + seed)
        truncated, info = False, {}
        while not truncated:
            _, _, terminated, truncated, info = env.step(policy(env))
            assert not terminated
        wins += bool(info["is_success"])
    return wins / episodes


@pytest.mark.parametrize("actuation", arm.ACTUATIONS)
@pytest.mark.parametrize("joints", [1, 3, 8])
def test_check_env_passes(joints, actuation):
    env = arm.make_arm(joints=joints, actuation=actuation)
    check_env(env.unwrapped, skip_render_check=True)


def test_check_env_with_rendering():
    env = arm.make_arm(render_mode="rgb_array")
    try:
        check_env(env.unwrapped)
        env.reset(seed=0)
        frame = env.render()
        assert frame.shape == (240, 320, 3) and frame.dtype == np.uint8
        assert frame.std() > 0  # not a blank image
    finally:
        env.close()


def test_spaces_and_control_period():
    env = arm.make_arm(joints=4)
    assert env.action_space.shape == (4,)
    assert list(env.observation_space.spaces) == ["fingertip", "joints", "lag", "target", "to_target", "velocities"]
    shapes = {k: s.shape for k, s in env.observation_space.spaces.items()}
    assert shapes == {"fingertip": (2,), "joints": (8,), "lag": (4,), "target": (2,), "to_target": (2,),
                      "velocities": (4,)}
    obs, _ = env.reset(seed=0)
    assert list(obs) == list(env.observation_space.spaces)
    torque = arm.make_arm(joints=4, actuation="torque", to_target=False)
    assert list(torque.observation_space.spaces) == ["fingertip", "joints", "target", "velocities"]
    assert env.unwrapped.control_period == pytest.approx(0.04)
    assert arm.ReachArm(frame_skip=2).control_period == pytest.approx(0.02)


def test_to_target_is_the_offset_from_fingertip_to_target():
    env = arm.make_arm()
    check_env(env.unwrapped, skip_render_check=True)
    obs, _ = env.reset(seed=3)
    for _ in range(3):
        np.testing.assert_allclose(obs["to_target"], obs["target"] - obs["fingertip"], atol=1e-6)
        assert np.linalg.norm(obs["to_target"]) == pytest.approx(env.unwrapped.distance(), abs=1e-6)
        obs, *_ = env.step(env.action_space.sample())


def test_reset_is_deterministic_given_the_seed():
    a, b = arm.make_arm(), arm.make_arm()
    obs_a, _ = a.reset(seed=7)
    obs_b, _ = b.reset(seed=7)
    for key in obs_a:
        np.testing.assert_array_equal(obs_a[key], obs_b[key])
    np.testing.assert_array_equal(a.target, b.target)
    targets = {tuple(a.reset(seed=s)[0]["target"]) for s in range(10)}
    assert len(targets) == 10
    for s in range(50):  # targets lie in the reachable half annulus in front of the base
        target = a.reset(seed=s)[0]["target"]
        assert arm.TARGET_MIN_RADIUS - 1e-6 <= np.linalg.norm(target) <= arm.TARGET_MAX_RADIUS + 1e-6
        assert target[0] >= 0
        home = [0.0, arm.INITIAL_CURL / 2, arm.INITIAL_CURL / 2]  # base along +x, the curl shared by two joints
        assert np.all(np.abs(a.data.qpos - home) <= arm.HOME_JITTER + 1e-9)


def test_truncates_after_max_steps_and_never_terminates():
    env = arm.make_arm(max_steps=13)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for t in range(1, 14):
        _, reward, terminated, truncated, info = env.step(rng.uniform(-2, 2, 3))  # out of bounds: clipped
        assert not terminated
        assert truncated == (t == 13)
        assert np.isfinite(reward) and set(info) >= {"distance", "is_success"}
        assert reward <= arm.SUCCESS_BONUS * info["is_success"] - info["distance"]


@pytest.mark.parametrize("actuation", arm.ACTUATIONS)
def test_scripted_controller_solves_the_task_and_doing_nothing_does_not(actuation):
    assert _success_rate(arm.scripted_action, actuation=actuation) >= 0.9
    assert _success_rate(lambda env: np.zeros(env.action_space.shape, np.float32), actuation=actuation) <= 0.3


def test_scripted_controller_quantized_to_five_levels_still_solves_the_position_task():
    levels = np.linspace(-1.0, 1.0, 5)  # what the joint and factorized modes' 5 bins can say

    def quantized(env):
        action = arm.scripted_action(env)
        return levels[np.abs(action[:, None] - levels).argmin(axis=1)]

    assert _success_rate(quantized) >= 0.9


@pytest.mark.parametrize("action_cost", [arm.ACTION_COST, 0.1])
def test_reward_is_the_bonus_on_the_target_minus_distance_and_effort(action_cost):
    env = arm.make_arm(action_cost=action_cost)
    env.reset(seed=3)
    _, reward, _, _, info = env.step(np.zeros(3, np.float32))
    assert not info["is_success"] and reward == pytest.approx(-info["distance"])
    env.unwrapped.model.site_pos[env.unwrapped._target_id, :2] = env.unwrapped.fingertip  # target under the tip
    action = np.array([0.1, 0.0, 0.0], np.float32)
    _, reward, _, _, info = env.step(action)
    assert info["is_success"]
    assert reward == pytest.approx(arm.SUCCESS_BONUS - info["distance"] - action_cost * float(np.sum(action ** 2)))


def test_position_servo_follows_its_set_point_and_holds():
    env = arm.make_arm()
    env.reset(seed=0)
    start = env.unwrapped.data.qpos.copy()
    for _ in range(3):
        env.step(np.ones(3, np.float32))
    for _ in range(3):
        obs, *_ = env.step(np.zeros(3, np.float32))
    moved = env.unwrapped.data.qpos - start
    np.testing.assert_allclose(moved, 3 * arm.MAX_STEP, atol=0.01)  # three full moves
    assert np.abs(obs["lag"]).max() < 0.01 and np.abs(obs["velocities"]).max() < 0.1


@pytest.mark.parametrize("kwargs,match", [
    ({"joints": 0}, "joints"), ({"joints": 9}, "joints"), ({"joints": 2.5}, "joints"),
    ({"max_steps": 0}, "max_steps"), ({"success_radius": -0.1}, "success_radius"),
    ({"render_mode": "human"}, "render_mode"), ({"actuation": "velocity"}, "actuation"),
    ({"action_cost": -0.1}, "action_cost"), ({"action_cost": float("inf")}, "action_cost"),
    ({"action_cost": "0.1"}, "action_cost"), ({"to_target": "yes"}, "to_target"),
])
def test_bad_arguments_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        arm.make_arm(**kwargs)


def test_bad_frame_skip_raises():
    with pytest.raises(ValueError, match="frame_skip"):
        arm.ReachArm(frame_skip=0)
