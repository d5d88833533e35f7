"""The Python API's decision cost: ``ez_robot.load(RUN).act(observation)``, one greedy
search per call, on each network backend.

    python benchmarks/agent_bench.py RUN [--decisions 200] [--backends onnxruntime torch]

Observations are drawn (seeded) from the run's own observation space, raw as the env
gives them (a Dict is flattened by the agent); the search's cost does not depend on
their values.  Prints p50 / p90 / p99 per decision and how often the two backends chose
the same action on the same observations.
"""
import argparse
import time

import numpy as np

import ez_robot
from ez_robot.inference import make_inference


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run")
    parser.add_argument("--decisions", type=int, default=200)
    parser.add_argument("--backends", nargs="+", default=["onnxruntime", "torch"], choices=["onnxruntime", "torch"])
    args = parser.parse_args()

    agent = ez_robot.load(args.run)
    space = agent.observation_space
    space.seed(0)
    observations = [space.sample() for _ in range(args.decisions)]
    print(f"{agent!r}: {agent.config.search.num_simulations} simulations, {args.decisions} decisions")
    actions = {}
    for backend in args.backends:
        agent._inference = make_inference(agent.net, "cpu", backend)
        agent._rng = np.random.default_rng(0)
        agent.act(observations[0])  # first call: graph and allocator warm-up
        agent._rng = np.random.default_rng(0)
        times, chosen = [], []
        for obs in observations:
            start = time.perf_counter()
            chosen.append(np.asarray(agent.act(obs)))
            times.append(time.perf_counter() - start)
        actions[backend] = np.stack(chosen)
        p50, p90, p99 = 1000 * np.percentile(times, [50, 90, 99])
        print(f"{backend:12s} p50 {p50:6.2f} ms   p90 {p90:6.2f} ms   p99 {p99:6.2f} ms")
    if len(actions) == 2:
        a, b = actions.values()
        same = np.all(np.isclose(a.reshape(len(a), -1), b.reshape(len(b), -1)), axis=1).mean()
        print(f"same action on both backends: {same:.1%}")


if __name__ == "__main__":
    main()
