"""A plain-Python Gumbel tree with one switch per convention on which ez-robot's search and
EfficientZero V2's continuous search differ.  benchmarks/peers/ezv2_parity.py checks it
against both: with every switch at ez-robot's side it must reproduce ``ez_robot.mcts.search``,
with every switch at V2's side V2's own ``CyMCTS.search_continuous``; flipping one switch at a
time then measures what each convention alone does to the outputs.  tests/test_ezv2_tree.py
checks ``search.ezv2_tree`` against it at V2's side.

Written from the two searches' behaviour as the harness documents it (ez-robot: ctree/tree.cpp;
V2: their ez/mcts/ctree and ez/mcts/cy_mcts.py, read, not copied).  float64 throughout; the
network outputs are rounded to float32 first, as both trees receive them.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

MASKED = -2


@dataclass(frozen=True)
class Conventions:
    # --- driver (what the search is given) ---
    discount: float = 0.997
    lstm_horizon: int = 1                 # 1: every prediction is a per-step reward
    proposal_correction: bool = True      # prior beta_hat/beta*pi (ours) vs uniform (V2)
    candidate_bound: float = 1.0          # V2 clips candidates to +-0.999
    interior_candidates: int = 16         # V2: 2
    root_policy_samples: int = 4          # 16: no widened candidates (V2 at evaluation)
    include_mode: bool = False            # ours at evaluation: candidate 0 is tanh(mean)
    gumbel: bool = True                   # root Gumbel noise (V2's DMC search: never)
    # --- tree (False: ez-robot, True: EfficientZero V2) ---
    root_value_counts_prior: bool = False  # root value = mean over [v_net] + backups (V2)
    vmix_running_mean: bool = False        # v_mix from the node's running mean and own visit count (V2)
    interior_self_visit: bool = False      # interior score pi' - N(a) / (1 + N(node)), N(node) = 1 + sum N(b) (V2)
    minmax_path_returns: bool = False      # min-max fed r + g*G (sampled return), not r + g*mean (V2)
    minmax_root_entry: bool = False        # min-max also fed g * G at the root (V2: reward 0 + g * bootstrap)
    normalize_flat_raw: bool = False       # min-max with no spread returns q itself, clipped (V2)
    halving_at_phase_end: bool = False     # survivors re-ranked only at phase ends, visited in that order (V2)


OURS_TREE = dict(root_value_counts_prior=False, vmix_running_mean=False, interior_self_visit=False,
                 minmax_path_returns=False, minmax_root_entry=False, normalize_flat_raw=False,
                 halving_at_phase_end=False)
EZV2_TREE = {k: True for k in OURS_TREE}


def their_phase_ends(num_simulations: int, m: int) -> dict[int, int]:
    """V2's halving schedule (their MCTS base class): {simulation index after which the
    survivors are cut: survivors kept}."""
    out = {}
    current, used = m, 0
    nxt = max(math.floor(num_simulations / (math.log2(m) * m)), 1) * m
    for s in range(num_simulations):
        if s + 1 >= nxt:
            current //= 2
            extra = max(math.floor(num_simulations / (math.log2(m) * current)), 1) * current if current > 2 \
                else num_simulations - used
            used += extra
            nxt = min(nxt + extra, num_simulations)
            out[s] = current
    return out


def our_visit_sequence(m: int, n: int) -> list[int]:
    """ez-robot's considered_visit_sequence (tree.cpp)."""
    if m <= 1:
        return list(range(n))
    log2m = 0
    while (1 << log2m) < m:
        log2m += 1
    out, visits, survivors = [], 0, m
    while len(out) < n:
        rounds = max(1, n // (log2m * survivors))
        for _ in range(rounds):
            if len(out) >= n:
                break
            for _ in range(survivors):
                if len(out) >= n:
                    break
                out.append(visits)
            visits += 1
        survivors = max(2, survivors // 2)
    return out


class _Tree:
    def __init__(self, conv: Conventions, num_simulations: int, count: int, c_visit: float, c_scale: float,
                 epsilon: float, gumbel: np.ndarray, root_logits: np.ndarray, root_value: float):
        self.c, self.S, self.A = conv, num_simulations, count
        self.c_visit, self.c_scale, self.eps = c_visit, c_scale, epsilon
        self.g = np.asarray(gumbel, np.float64) if conv.gumbel else np.zeros(count)
        self.parent, self.depth, self.children = [], [], []
        self.prior, self.log_prior, self.visit, self.value_sum, self.vp, self.net_v = [], [], [], [], [], []
        self.lo, self.hi = math.inf, -math.inf
        self._new(-1, 0.0, root_value, root_logits)
        self.sims = 0
        valid = [a for a in range(count) if self.children[0][a] != MASKED]
        order = sorted(valid, key=lambda a: (-(self.g[a] + self.log_prior[0][a]), a))
        self.considered = set(order)          # m = K: every valid candidate
        self.selected = order                 # V2's ranked survivor list
        self.sequence = our_visit_sequence(len(order), num_simulations)
        self.phase_ends = their_phase_ends(num_simulations, len(order)) if len(order) > 1 else {}

    def _new(self, parent, vp, value, logits):
        logits = np.asarray(logits, np.float64)
        valid = np.isfinite(logits)
        top = logits[valid].max()
        p = np.where(valid, np.exp(np.where(valid, logits, 0.0) - top), 0.0)
        total = p.sum()
        self.parent.append(parent)
        self.depth.append(0 if parent < 0 else self.depth[parent] + 1)
        self.children.append(np.where(valid, -1, MASKED).astype(np.int64))
        self.prior.append(p / total)
        self.log_prior.append(np.where(valid, logits - top - math.log(total), -math.inf))
        self.visit.append(0)
        self.value_sum.append(0.0)
        self.vp.append(float(vp))
        self.net_v.append(float(value))
        return len(self.parent) - 1

    # --- values ---
    def reward(self, parent, child):
        d = self.depth[parent]
        if d > 0 and d % self.c.lstm_horizon == 0:
            return self.vp[child]
        return self.vp[child] - self.vp[parent]

    def q(self, node, a):
        ch = self.children[node][a]
        return self.reward(node, ch) + self.c.discount * self.value_sum[ch] / self.visit[ch]

    def self_count(self, node):          # V2's node visit count: the root starts at 1
        return self.visit[node] + (1 if node == 0 else 0)

    def running_mean(self, node):        # V2's node value: the root's list starts with v_net
        extra = self.net_v[0] if node == 0 else 0.0
        return (self.value_sum[node] + extra) / self.self_count(node)

    def root_value(self):
        if self.c.root_value_counts_prior:
            return self.running_mean(0)
        return self.value_sum[0] / self.visit[0] if self.visit[0] else self.net_v[0]

    def completed_q(self, node):
        ch = self.children[node]
        prior = self.prior[node]
        q = np.full(self.A, np.nan)
        vsum, vmax, psum, wq = 0, 0, 0.0, 0.0
        for a in range(self.A):
            if ch[a] < 0:
                continue
            q[a] = self.q(node, a)
            vsum += self.visit[ch[a]]
            vmax = max(vmax, self.visit[ch[a]])
            psum += prior[a]
            wq += prior[a] * q[a]
        if self.c.vmix_running_mean:
            if psum < 1e-6:
                vmix = self.running_mean(node)
            else:
                n = self.self_count(node)
                vmix = (self.running_mean(node) + n * wq / psum) / (1.0 + n)
        else:
            vmix = self.net_v[node]
            if vsum > 0 and psum > 0:
                vmix = (self.net_v[node] + vsum / psum * wq) / (1.0 + vsum)
        for a in range(self.A):
            if ch[a] == -1:
                q[a] = vmix
        return q, vsum, vmax

    def normalize(self, q):
        if self.c.normalize_flat_raw:
            delta = self.hi - self.lo
            x = q
            if delta > 0:
                x = (q - self.lo) / max(delta, self.eps)
        else:
            if self.hi < self.lo:
                return 0.0
            x = (q - self.lo) / max(self.hi - self.lo, self.eps)
        return min(1.0, max(0.0, x))

    def scores(self, node, with_noise):
        """log pi + sigma(normalized completed Q) (+ g at the root), -inf where masked."""
        q, vsum, vmax = self.completed_q(node)
        scale = (self.c_visit + vmax) * self.c_scale
        out = np.full(self.A, -math.inf)
        for a in range(self.A):
            if self.children[node][a] != MASKED:
                out[a] = self.log_prior[node][a] + scale * self.normalize(q[a]) + (self.g[a] if with_noise else 0.0)
        return out, vsum

    def improved_policy(self, node):
        s, vsum = self.scores(node, False)
        e = np.where(np.isfinite(s), np.exp(s - s.max()), 0.0)
        return e / e.sum(), vsum

    def child_visits(self, node, a):
        ch = self.children[node][a]
        return self.visit[ch] if ch >= 0 else 0

    # --- selection ---
    def select_root(self):
        if self.c.halving_at_phase_end:
            best, fewest = None, None
            for a in self.selected:  # the first survivor with the fewest visits
                n = self.child_visits(0, a)
                if fewest is None or n < fewest:
                    best, fewest = a, n
            return best
        wanted = self.sequence[self.sims]
        s, _ = self.scores(0, True)
        best, best_any = None, None
        for a in range(self.A):
            if a not in self.considered:
                continue
            if best_any is None or s[a] > s[best_any]:
                best_any = a
            if self.child_visits(0, a) == wanted and (best is None or s[a] > s[best]):
                best = a
        return best if best is not None else best_any

    def select_interior(self, node):
        pi, vsum = self.improved_policy(node)
        denom = 1.0 + (self.self_count(node) if self.c.interior_self_visit else vsum)
        best, best_score = 0, -math.inf
        for a in range(self.A):
            if self.children[node][a] == MASKED:
                continue
            score = pi[a] - self.child_visits(node, a) / denom
            if score > best_score:
                best, best_score = a, score
        return best

    def traverse(self):
        path, node = [0], 0
        while True:
            a = self.select_root() if node == 0 else self.select_interior(node)
            nxt = self.children[node][a]
            if nxt < 0:
                self._pending = (path, a)
                return node, a
            node = nxt
            path.append(node)

    def expand_and_backup(self, vp, value, logits):
        path, a = self._pending
        leaf = self._new(path[-1], vp, value, logits)
        self.children[path[-1]][a] = leaf
        path = path + [leaf]
        g = float(value)
        for i in range(len(path) - 1, -1, -1):
            n = path[i]
            self.value_sum[n] += g
            self.visit[n] += 1
            if i > 0:
                r = self.reward(path[i - 1], n)
                entry = r + self.c.discount * (g if self.c.minmax_path_returns else self.value_sum[n] / self.visit[n])
                self._update(entry)
                g = r + self.c.discount * g
            elif self.c.minmax_root_entry:
                self._update(self.c.discount * g)  # V2: the root's reward is 0
        if self.c.halving_at_phase_end and self.sims in self.phase_ends:
            s, _ = self.scores(0, True)
            ranked = sorted(range(len(self.selected)), key=lambda i: (-s[self.selected[i]], i))
            keep = max(self.phase_ends[self.sims], 1)  # V2's schedule can halve 1 survivor to 0: keep it
            self.selected = [self.selected[i] for i in ranked[:keep]]
        self.sims += 1

    def _update(self, v):
        self.lo, self.hi = min(self.lo, v), max(self.hi, v)

    def best_action(self):
        if self.c.halving_at_phase_end:
            return self.selected[0]
        s, _ = self.scores(0, True)
        most = max(self.child_visits(0, a) for a in self.considered)
        cands = [a for a in sorted(self.considered) if self.child_visits(0, a) == most]
        best = cands[0]
        for a in cands[1:]:
            if s[a] > s[best]:
                best = a
        return best


def ref_search(conv: Conventions, *, root_hidden, root_value, root_params, step, sample, gumbel,
               num_simulations=32, count=16, c_visit=50.0, c_scale=0.1, epsilon=0.01):
    """Runs B trees.  ``step(hidden [B, H], actions [B, D]) -> (next_hidden, reward, value, params)``;
    ``sample(params [B, P], root, count, policy_samples, include_mode, bound, correction) ->
    (actions [B, k, D] float32, logits [B, k])`` (the harness passes ez-robot's own
    sample_candidates with the shared noise).  Returns the same read-outs as the real searches."""
    f32 = lambda x: np.asarray(x, np.float32).astype(np.float64)
    batch = len(root_value)
    cands, logits = sample(root_params, root=True, count=count, policy_samples=conv.root_policy_samples,
                           include_mode=conv.include_mode, bound=conv.candidate_bound,
                           correction=conv.proposal_correction)
    trees = [_Tree(conv, num_simulations, count, c_visit, c_scale, epsilon, gumbel[b], logits[b],
                   float(np.float32(root_value[b]))) for b in range(batch)]
    hidden = {(b, 0): root_hidden[b] for b in range(batch)}
    actions = {(b, 0): cands[b] for b in range(batch)}
    interior = conv.interior_candidates
    for s in range(num_simulations):
        picks = [t.traverse() for t in trees]
        h = np.stack([hidden[(b, node)] for b, (node, _) in enumerate(picks)])
        act = np.stack([actions[(b, node)][a] for b, (node, a) in enumerate(picks)])
        nh, r, v, params = step(h, act)
        r, v = f32(r), f32(v)
        new_actions, new_logits = sample(np.asarray(params, np.float32), root=False, count=interior,
                                         policy_samples=None, include_mode=False, bound=conv.candidate_bound,
                                         correction=conv.proposal_correction)
        for b, t in enumerate(trees):
            row = np.full(count, -math.inf)
            row[:interior] = new_logits[b]
            t.expand_and_backup(r[b], v[b], row)
            leaf = len(t.parent) - 1
            hidden[(b, leaf)] = nh[b]
            padded = np.zeros((count, cands.shape[2]), np.float32)
            padded[:interior] = new_actions[b]
            actions[(b, leaf)] = padded
    out = dict(
        root_values=np.array([t.root_value() for t in trees]),
        policy=np.stack([t.improved_policy(0)[0] for t in trees]),
        completed_q=np.stack([t.completed_q(0)[0] for t in trees]),
        visits=np.array([[t.child_visits(0, a) for a in range(count)] for t in trees]),
        best=np.array([t.best_action() for t in trees]),
        candidates=cands,
    )
    return out


def with_tree(conv: Conventions, side: dict) -> Conventions:
    return dataclasses.replace(conv, **side)
