"""A small, slow, pure-Python EfficientZero MCTS: the oracle the C++ tree must match.

One tree at a time, one object per node, written straight from the papers: pUCT from
EfficientZero's appendix ("MCTS Details"), Gumbel search from "Policy improvement by
planning with Gumbel" (Danihelka et al., ICLR 2022).  Arithmetic is in Python floats
(double) in the same order as the C++ tree so the two agree exactly, not just
approximately.  A logit of -inf marks a child that does not exist.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


class Node:
    def __init__(self, value_prefix: float, depth: int, hidden, logits, noise=None, noise_fraction=0.0,
                 network_value=0.0):
        self.value_prefix = value_prefix
        self.depth = depth
        self.hidden = hidden
        self.network_value = network_value
        self.visit_count = 0
        self.value_sum = 0.0
        self.children: dict[int, Node] = {}
        logits = [float(x) for x in logits]
        self.valid = [x != -math.inf for x in logits]
        top = max(logits)
        exps = [math.exp(x - top) for x in logits]
        total = 0.0
        for e in exps:
            total += e
        log_total = math.log(total)
        self.prior = [e / total for e in exps]
        self.log_prior = [(x - top) - log_total for x in logits]
        if noise is not None:  # a masked child keeps prior 0
            self.prior = [(1.0 - noise_fraction) * p + noise_fraction * float(n) if ok else p
                          for p, n, ok in zip(self.prior, noise, self.valid)]

    def value(self) -> float:
        return self.value_sum / self.visit_count


class _Search:
    """What both modes share: rewards from value prefixes, soft min-max Q normalization,
    expansion and backup."""

    def __init__(self, recurrent_fn, discount, lstm_horizon, min_max_epsilon):
        self.recurrent_fn = recurrent_fn
        self.discount = discount
        self.lstm_horizon = lstm_horizon
        self.min_max_epsilon = min_max_epsilon
        self.lo, self.hi = math.inf, -math.inf

    def is_reset(self, node):  # the value prefix restarts below every lstm_horizon-th depth
        return node.depth > 0 and node.depth % self.lstm_horizon == 0

    def reward(self, parent, child):
        return child.value_prefix if self.is_reset(parent) else child.value_prefix - parent.value_prefix

    def q(self, parent, child):
        return self.reward(parent, child) + self.discount * child.value()

    def normalize(self, x):
        if self.hi < self.lo:
            return 0.0
        return min(1.0, max(0.0, (x - self.lo) / max(self.hi - self.lo, self.min_max_epsilon)))

    def expand_and_backup(self, path, action):
        node = path[-1]
        next_hidden, vp, v, step_logits = self.recurrent_fn(
            node.hidden, np.array([action], dtype=np.int32), np.array([self.is_reset(node)]))
        value = float(np.asarray(v)[0])
        leaf = Node(float(np.asarray(vp)[0]), node.depth + 1, next_hidden, np.asarray(step_logits)[0],
                    network_value=value)
        node.children[action] = leaf
        path.append(leaf)
        bootstrap = value
        for i in range(len(path) - 1, -1, -1):
            path[i].value_sum += bootstrap
            path[i].visit_count += 1
            if i > 0:
                r = self.reward(path[i - 1], path[i])
                q_now = r + self.discount * path[i].value()
                self.lo, self.hi = min(self.lo, q_now), max(self.hi, q_now)
                bootstrap = r + self.discount * bootstrap


def reference_search(hidden, value_prefix, value, logits, recurrent_fn, *, num_simulations, c1=1.25,
                     c2=19652.0, discount=0.997, lstm_horizon=5, min_max_epsilon=0.01,
                     noise=None, noise_fraction=0.0, root_mean_q=False):
    """pUCT search of one root.  ``hidden`` is a tuple of arrays with a leading batch axis
    of 1; ``recurrent_fn`` is the same batched function the real search gets.
    ``root_mean_q``: unvisited root children are scored with the mean Q of the visited
    ones (0 while none is) instead of 0.
    Returns (visit_counts [A], root_value)."""
    num_actions = len(logits)
    tree = _Search(recurrent_fn, discount, lstm_horizon, min_max_epsilon)
    root = Node(float(value_prefix), 0, hidden, logits, noise, noise_fraction, float(value))
    for _ in range(num_simulations):
        # --- selection ---
        node, path, q_hat = root, [root], 0.0
        while True:
            visited = [tree.q(node, node.children[a]) for a in range(num_actions) if a in node.children]
            if node is root:
                q_hat = sum(visited) / len(visited) if root_mean_q and visited else 0.0
            else:
                total = 0.0
                for x in visited:
                    total += x
                q_hat = (q_hat + total) / (1.0 + len(visited))
            n = node.visit_count + (1.0 if node is root else 0.0)
            pb_c = (c1 + math.log((n + c2 + 1.0) / c2)) * math.sqrt(n)
            best, best_action = -math.inf, 0
            for a in range(num_actions):
                if not node.valid[a]:
                    continue
                child = node.children.get(a)
                score = tree.normalize(tree.q(node, child) if child else q_hat)
                score += node.prior[a] * pb_c / (1.0 + (child.visit_count if child else 0))
                if score > best:
                    best, best_action = score, a
            if best_action not in node.children:
                break
            node = node.children[best_action]
            path.append(node)
        tree.expand_and_backup(path, best_action)

    counts = np.array([root.children[a].visit_count if a in root.children else 0 for a in range(num_actions)])
    root_value = root.value() if root.visit_count else float(value)
    return counts, root_value


def considered_visit_sequence(num_considered: int, num_simulations: int) -> list[int]:
    """Sequential halving as a list: the visit count of the root child picked at each
    simulation, from m = num_considered candidates and n = num_simulations."""
    if num_considered <= 1:
        return list(range(num_simulations))
    log2m = math.ceil(math.log2(num_considered))
    sequence, visits, survivors = [], [0] * num_considered, num_considered
    while len(sequence) < num_simulations:
        rounds = max(1, math.floor(num_simulations / (log2m * survivors)))
        for _ in range(rounds):
            sequence += visits[:survivors]
            visits[:survivors] = [v + 1 for v in visits[:survivors]]
        survivors = max(2, survivors // 2)
    return sequence[:num_simulations]


@dataclass
class GumbelResult:
    visit_counts: np.ndarray      # [K] int
    root_value: float
    improved_policy: np.ndarray   # [K] float64
    completed_q: np.ndarray       # [K] float64, NaN where masked
    best_action: int              # with the Gumbel term
    best_action_without_noise: int
    considered: np.ndarray        # [K] bool


def reference_gumbel_search(hidden, value_prefix, value, logits, recurrent_fn, *, num_simulations, stop_after=None,
                            discount=0.997, lstm_horizon=5, min_max_epsilon=0.01, c_visit=50.0, c_scale=0.1,
                            max_considered=16, gumbel=None) -> GumbelResult:
    """Gumbel search of one root over its K = len(logits) children.  ``gumbel`` is the
    root's Gumbel noise g [K] (None: g = 0).  The considered-visits sequence is built for
    ``num_simulations``; the search stops after ``stop_after`` of them (a deadline)."""
    num_actions = len(logits)
    tree = _Search(recurrent_fn, discount, lstm_horizon, min_max_epsilon)
    root = Node(float(value_prefix), 0, hidden, logits, network_value=float(value))
    g = [0.0] * num_actions if gumbel is None else [float(x) for x in gumbel]

    def visits(node, a):
        return node.children[a].visit_count if a in node.children else 0

    def completed_q(node):
        """Q(s, a) of visited children, v_mix of unvisited ones; with sum_b N(b), max_b N(b)."""
        q = [math.nan] * num_actions
        visits_sum, visits_max, prior_sum, weighted_q = 0, 0, 0.0, 0.0
        for a in range(num_actions):
            if a not in node.children:
                continue
            child = node.children[a]
            visits_sum += child.visit_count
            visits_max = max(visits_max, child.visit_count)
            q[a] = tree.q(node, child)
            prior_sum += node.prior[a]
            weighted_q += node.prior[a] * q[a]
        v_mix = node.network_value
        if visits_sum > 0 and prior_sum > 0.0:
            v_mix = (node.network_value + visits_sum / prior_sum * weighted_q) / (1.0 + visits_sum)
        for a in range(num_actions):
            if a not in node.children and node.valid[a]:
                q[a] = v_mix
        return q, visits_sum, visits_max

    def sigma(q, visits_max):
        return (c_visit + visits_max) * c_scale * tree.normalize(q)

    def improved_policy(node):
        q, visits_sum, visits_max = completed_q(node)
        logits_new = [node.log_prior[a] + sigma(q[a], visits_max) if node.valid[a] else -math.inf
                      for a in range(num_actions)]
        top = max(logits_new)
        exps = [math.exp(x - top) if node.valid[a] else 0.0 for a, x in enumerate(logits_new)]
        total = 0.0
        for e in exps:
            total += e
        return [e / total for e in exps], visits_sum

    valid = [a for a in range(num_actions) if root.valid[a]]
    m = min(max_considered, len(valid))
    considered = sorted(valid, key=lambda a: (-(g[a] + root.log_prior[a]), a))[:m]
    considered = [a for a in range(num_actions) if a in considered]
    sequence = considered_visit_sequence(m, num_simulations)

    for simulation in range(num_simulations if stop_after is None else stop_after):
        # --- selection: sequential halving at the root, the improved policy below ---
        q, _, visits_max = completed_q(root)
        best, best_action = -math.inf, None
        for a in considered:
            score = g[a] + root.log_prior[a] + sigma(q[a], visits_max)
            if visits(root, a) == sequence[simulation] and score > best:
                best, best_action = score, a
        assert best_action is not None, "the sequence named a visit count no candidate has"
        node, path, action = root, [root], best_action
        while action in node.children:
            node = node.children[action]
            path.append(node)
            pi, visits_sum = improved_policy(node)
            best = -math.inf
            for a in range(num_actions):
                if node.valid[a]:
                    score = pi[a] - visits(node, a) / (1.0 + visits_sum)
                    if score > best:
                        best, action = score, a
        tree.expand_and_backup(path, action)

    # --- read-outs ---
    q, _, visits_max = completed_q(root)
    most = max(visits(root, a) for a in considered)

    def best_of_survivors(with_noise):
        best, choice = -math.inf, None
        for a in considered:
            if visits(root, a) == most:
                score = (g[a] + root.log_prior[a] if with_noise else root.log_prior[a]) + sigma(q[a], visits_max)
                if score > best:
                    best, choice = score, a
        return choice

    return GumbelResult(
        visit_counts=np.array([visits(root, a) for a in range(num_actions)]),
        root_value=root.value() if root.visit_count else float(value),
        improved_policy=np.array(improved_policy(root)[0]),
        completed_q=np.array(q),
        best_action=best_of_survivors(True),
        best_action_without_noise=best_of_survivors(False),
        considered=np.array([a in considered for a in range(num_actions)]),
    )
