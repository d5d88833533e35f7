"""A small, slow, pure-Python EfficientZero MCTS: the oracle the C++ tree must match.

One tree at a time, one object per node, written straight from the paper's appendix
("MCTS Details").  Arithmetic is in Python floats (double) in the same order as the C++
tree so the two agree exactly, not just approximately.
"""
from __future__ import annotations

import math

import numpy as np


class Node:
    def __init__(self, value_prefix: float, depth: int, hidden, logits, noise=None, noise_fraction=0.0):
        self.value_prefix = value_prefix
        self.depth = depth
        self.hidden = hidden
        self.visit_count = 0
        self.value_sum = 0.0
        self.children: dict[int, Node] = {}
        logits = [float(x) for x in logits]
        top = max(logits)
        exps = [math.exp(x - top) for x in logits]
        total = 0.0
        for e in exps:
            total += e
        self.prior = [e / total for e in exps]
        if noise is not None:
            self.prior = [(1.0 - noise_fraction) * p + noise_fraction * float(n) for p, n in zip(self.prior, noise)]

    def value(self) -> float:
        return self.value_sum / self.visit_count


def reference_search(hidden, value_prefix, value, logits, recurrent_fn, *, num_simulations, c1=1.25,
                     c2=19652.0, discount=0.997, lstm_horizon=5, min_max_epsilon=0.01,
                     noise=None, noise_fraction=0.0):
    """Search one root.  ``hidden`` is a tuple of arrays with a leading batch axis of 1;
    ``recurrent_fn`` is the same batched function the real search gets.
    Returns (visit_counts [A], root_value)."""
    num_actions = len(logits)

    def is_reset(node):  # the value prefix restarts below every lstm_horizon-th depth
        return node.depth > 0 and node.depth % lstm_horizon == 0

    def reward(parent, child):
        return child.value_prefix if is_reset(parent) else child.value_prefix - parent.value_prefix

    def q(parent, child):
        return reward(parent, child) + discount * child.value()

    lo, hi = math.inf, -math.inf

    def normalize(x):
        if hi < lo:
            return 0.0
        return min(1.0, max(0.0, (x - lo) / max(hi - lo, min_max_epsilon)))

    root = Node(float(value_prefix), 0, hidden, logits, noise, noise_fraction)
    for _ in range(num_simulations):
        # --- selection ---
        node, path, q_hat = root, [root], 0.0
        while True:
            visited = [q(node, node.children[a]) for a in range(num_actions) if a in node.children]
            if node is root:
                q_hat = 0.0
            else:
                total = 0.0
                for x in visited:
                    total += x
                q_hat = (q_hat + total) / (1.0 + len(visited))
            n = node.visit_count + (1.0 if node is root else 0.0)
            pb_c = (c1 + math.log((n + c2 + 1.0) / c2)) * math.sqrt(n)
            best, best_action = -math.inf, 0
            for a in range(num_actions):
                child = node.children.get(a)
                score = normalize(q(node, child) if child else q_hat)
                score += node.prior[a] * pb_c / (1.0 + (child.visit_count if child else 0))
                if score > best:
                    best, best_action = score, a
            if best_action not in node.children:
                break
            node = node.children[best_action]
            path.append(node)

        # --- expansion ---
        next_hidden, vp, v, step_logits = recurrent_fn(
            node.hidden, np.array([best_action], dtype=np.int32), np.array([is_reset(node)]))
        leaf = Node(float(np.asarray(vp)[0]), node.depth + 1, next_hidden, np.asarray(step_logits)[0])
        node.children[best_action] = leaf
        path.append(leaf)

        # --- backup ---
        bootstrap = float(np.asarray(v)[0])
        for i in range(len(path) - 1, -1, -1):
            path[i].value_sum += bootstrap
            path[i].visit_count += 1
            if i > 0:
                r = reward(path[i - 1], path[i])
                q_now = r + discount * path[i].value()
                lo, hi = min(lo, q_now), max(hi, q_now)
                bootstrap = r + discount * bootstrap

    counts = np.array([root.children[a].visit_count if a in root.children else 0 for a in range(num_actions)])
    root_value = root.value() if root.visit_count else float(value)
    return counts, root_value
