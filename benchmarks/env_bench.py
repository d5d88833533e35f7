"""Environment benchmark: agent steps per second on one core, wrappers included.

    python benchmarks/env_bench.py [--steps 2000]

Random actions; one process, torch not involved.  The raw rows step dm_control and ALE
without our wrappers, so the difference is what the wrappers cost.
"""
import argparse
import os
import time

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402

from ez_robot.config import make_env  # noqa: E402


def rate(env, steps: int, seed: int = 0) -> float:
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    n = env.action_space.n
    start = time.perf_counter()
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(int(rng.integers(n)))
        if terminated or truncated:
            env.reset()
    return steps / (time.perf_counter() - start)


def raw_dmc_rate(steps: int) -> float:
    from dm_control import suite

    env = suite.load("cartpole", "swingup", task_kwargs={"random": 0})
    spec = env.action_spec()
    env.reset()
    start = time.perf_counter()
    for _ in range(steps):
        if env.step(np.random.uniform(spec.minimum, spec.maximum)).last():
            env.reset()
    return steps / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    try:
        os.sched_setaffinity(0, {0})  # one core, as the table says
    except (AttributeError, OSError):
        pass
    print("| env | agent steps/s | simulator steps/s |")
    print("|---|---|---|")
    raw = raw_dmc_rate(args.steps * 4)
    print(f"| raw dm_control cartpole swingup (no wrapper) | - | {raw:,.0f} |", flush=True)
    for task, obs, steps in [("cartpole_swingup", "state", args.steps), ("cartpole_swingup", "pixels", args.steps // 4),
                             ("atari:Pong", "pixels", args.steps)]:
        env = make_env(task, seed=0, obs=obs)
        repeat = env.get_wrapper_attr("action_repeat") if not task.startswith("atari:") else 4
        r = rate(env, steps)
        print(f"| {task} ({obs}, action repeat {repeat}) | {r:,.0f} | {r * repeat:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
