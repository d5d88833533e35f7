"""Tree search benchmark: wall time of one batched search, tree + Python glue only.

The network is replaced by random arrays made before the timed region, so the figures
are the cost of the C++ tree, the binding and the driver in ez_robot.search (hidden
state pool included, 64 floats per state as in the peers' measurement).

    python benchmarks/search_bench.py            # full grid, B in {1,8,64,256}, A in {6,18,125}
    python benchmarks/search_bench.py --quick    # a smaller grid
    python benchmarks/search_bench.py --sampled  # also Gumbel search over K sampled candidates
    python benchmarks/search_bench.py --first-round  # a real network: the root's first
        # round in one call against one call per simulation (walker_walk, onnxruntime)
"""
import argparse
import statistics
import time

import numpy as np

from ez_robot import mcts as search_module
from ez_robot import RootOutput, SearchConfig, search
from ez_robot.action_modes import ActionSpec

HIDDEN = 64


class RandomNetwork:
    """recurrent_fn that hands out pre-made random outputs, one slice per simulation."""

    def __init__(self, batch, num_actions, num_simulations, seed=0):
        rng = np.random.default_rng(seed)
        self.hidden = rng.standard_normal((num_simulations, batch, HIDDEN)).astype(np.float32)
        self.value_prefix = rng.uniform(-1, 1, (num_simulations, batch)).astype(np.float32)
        self.value = rng.uniform(-1, 1, (num_simulations, batch)).astype(np.float32)
        self.logits = rng.standard_normal((num_simulations, batch, num_actions)).astype(np.float32)
        self.root = RootOutput(rng.standard_normal((batch, HIDDEN)).astype(np.float32), np.zeros(batch, np.float32),
                               np.zeros(batch, np.float32), rng.standard_normal((batch, num_actions)).astype(np.float32))
        self.step = 0

    def __call__(self, hidden, actions, reset_mask):
        s, k = self.step, len(actions) // self.hidden.shape[1]  # k simulations in one call (the first round)
        self.step += k
        if k == 1:
            return self.hidden[s], self.value_prefix[s], self.value[s], self.logits[s]
        rows = len(actions)
        return (self.hidden[s:s + k].reshape(rows, HIDDEN), self.value_prefix[s:s + k].reshape(rows),
                self.value[s:s + k].reshape(rows), self.logits[s:s + k].reshape(rows, -1))


class TimedTree:
    """Wraps the C++ tree and adds up the time spent inside its calls."""

    seconds = 0.0

    def __init__(self, *args, **kwargs):
        self._tree = search_module._TREE_CLASS(*args, **kwargs)

    def __getattr__(self, name):
        method = getattr(self._tree, name)
        if not callable(method):
            return method

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                TimedTree.seconds += time.perf_counter() - start
        return timed


def measure(batch, num_actions, num_simulations, repeats, action_spec=None, root_unvisited_q="zero"):
    """Joint mode over A = num_actions, or (action_spec) Gumbel search over K = num_actions
    candidates, which includes drawing them at every expanded node."""
    config = SearchConfig(num_simulations=num_simulations, root_unvisited_q=root_unvisited_q)
    outputs = num_actions
    if action_spec is not None:
        config, outputs = config.replace(num_candidates=num_actions), action_spec.policy_size
    walls = []
    for r in range(repeats):
        net = RandomNetwork(batch, outputs, num_simulations, seed=r)
        rng = np.random.default_rng(r)
        start = time.perf_counter()
        search(net.root, net, config, rng, action_spec=action_spec)
        walls.append(time.perf_counter() - start)
    # Share of time inside the C++ calls, from separate instrumented runs.
    shares = []
    search_module.Tree = TimedTree
    try:
        for r in range(max(3, repeats // 2)):
            net = RandomNetwork(batch, outputs, num_simulations, seed=r)
            TimedTree.seconds = 0.0
            start = time.perf_counter()
            search(net.root, net, config, np.random.default_rng(r), action_spec=action_spec)
            shares.append(TimedTree.seconds / (time.perf_counter() - start))
    finally:
        search_module.Tree = search_module._TREE_CLASS
    wall = statistics.median(walls)
    return wall, batch * num_simulations / wall, statistics.median(shares)


def first_round(batches, repeats):
    """Sampled search (walker_walk, gaussian, 32 simulations, K = 16) with its network on
    onnxruntime (one thread, as training's ``train.inference=onnxruntime``): the root's
    16 first visits in one network call (the default) against one call per simulation,
    alternating, median wall time of ``repeats`` searches each."""
    import torch

    from ez_robot.config import load_config, search_config
    from ez_robot.builders import EnvSpec
    from ez_robot.envs import make_from_config
    from ez_robot.inference import OnnxInference
    from ez_robot.networks import make_network

    torch.set_num_threads(1)
    config = load_config("walker_walk", obs="state", overrides=["env.action_mode=gaussian"])
    env = make_from_config(config.env)
    env_spec = EnvSpec.of(env, config.env)
    env.close()
    net = make_network(env_spec.obs_shape, env_spec.action, config.model,
                       value_prefix=config.train.value_prefix).eval()
    inference, spec = OnnxInference(net), net.action_spec
    search_cfg = search_config(config)
    print(f"\nfirst round together vs one by one: walker_walk gaussian, {search_cfg.num_simulations} simulations, "
          f"K = {search_cfg.num_candidates}, onnxruntime, median of {repeats}")
    print("| B | together (ms) | one by one (ms) | one by one / together |")
    print("|---|---|---|---|")
    for batch in batches:
        observations = np.random.default_rng(batch).standard_normal((batch, *net.obs_shape)).astype(np.float32)
        times = {True: [], False: []}
        for r in range(repeats):
            for together in (True, False):
                rng = np.random.default_rng(r)
                start = time.perf_counter()
                search(inference.root(observations), inference.recurrent_fn, search_cfg, rng, action_spec=spec,
                       first_visits_together=together)
                times[together].append(time.perf_counter() - start)
        a, b = statistics.median(times[True]) * 1e3, statistics.median(times[False]) * 1e3
        print(f"| {batch} | {a:.2f} | {b:.2f} | {b / a:.2f}x |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="B in {1, 64}, A in {18}, fewer repeats")
    parser.add_argument("--simulations", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--root-unvisited-q", choices=["zero", "mean"], default="zero",
                        help="pUCT score of unvisited root children (search.root_unvisited_q)")
    parser.add_argument("--sampled", action="store_true",
                        help="also time Gumbel search over K = 16 sampled candidates (gaussian, D = 6)")
    parser.add_argument("--first-round", action="store_true",
                        help="only the first-round comparison with a real network (B in {1, 8, 64, 256})")
    args = parser.parse_args()
    if args.first_round:
        first_round([1, 8, 64, 256], args.repeats)
        return
    batches, actions = ([1, 64], [18]) if args.quick else ([1, 8, 64, 256], [6, 18, 125])
    repeats = 3 if args.quick else args.repeats
    search_module._TREE_CLASS = search_module.Tree
    print(f"search benchmark: {args.simulations} simulations, hidden {HIDDEN} floats, median of {repeats}, "
          f"root_unvisited_q={args.root_unvisited_q}")
    print("| B x A | wall ms | simulations/s | time in C++ |")
    print("|---|---|---|---|")
    for num_actions in actions:
        for batch in batches:
            wall, rate, share = measure(batch, num_actions, args.simulations, repeats,
                                        root_unvisited_q=args.root_unvisited_q)
            print(f"| {batch} x {num_actions} | {wall * 1e3:.2f} | {rate / 1e3:.0f}k | {share:.0%} |", flush=True)
    if args.sampled:
        spec = ActionSpec("gaussian", dims=6)
        for batch in batches:
            wall, rate, share = measure(batch, 16, args.simulations, repeats, action_spec=spec)
            print(f"| {batch} x K=16 (Gumbel, gaussian D=6) | {wall * 1e3:.2f} | {rate / 1e3:.0f}k | {share:.0%} |",
                  flush=True)


if __name__ == "__main__":
    main()
