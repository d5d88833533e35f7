"""benchmarks/cartpole_episodes.py splits cartpole_swingup's reward into dm_control's
factors; their product must be the reward the task pays, or the diagnosis is wrong."""
import numpy as np

from ez_robot.envs.dmc import DMControlEnv
from tests.scripts import load_script

script = load_script("benchmarks/cartpole_episodes.py")


def test_the_reward_factors_multiply_to_the_task_reward():
    factors_of = script.reward_factors
    env = DMControlEnv("cartpole", "swingup", seed=3, action_repeat=1)
    env.reset(seed=3)
    rng = np.random.default_rng(0)
    checked = set()
    for step in range(200):
        force = float(rng.choice([-1.0, -0.5, 0.0, 0.5, 1.0]))
        _, reward, _, _, _ = env.step(np.array([force], np.float32))
        factors = factors_of(env._env.physics, force)
        assert np.all((factors > 0) & (factors <= 1))
        assert abs(np.prod(factors) - reward) < 1e-9, step
        checked.add(force)
    env.close()
    assert checked == {-1.0, -0.5, 0.0, 0.5, 1.0}
