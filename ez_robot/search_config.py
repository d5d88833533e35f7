"""The search's settings (``SearchConfig``), apart from the search itself
(:mod:`ez_robot.mcts`): the config loader, the exporter's bundle and the onboard runtime
read them without the search's machinery."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ez_robot.checks import check, is_finite_number, is_int, one_of

__all__ = ["SearchConfig", "MAX_SIMULATIONS", "ROOT_UNVISITED_Q"]

MAX_SIMULATIONS = 100_000
"""Most simulations one search may run: the tree and the hidden-state pool are allocated
for all of them up front (MuZero's largest setting, Go, used 800)."""
ROOT_UNVISITED_Q = ("zero", "mean")
"""The values of ``SearchConfig.root_unvisited_q``."""


@dataclass(frozen=True)
class SearchConfig:
    """MCTS settings; defaults are the paper's appendix (Atari discount shown in the docs)."""

    num_simulations: int = 50
    """Simulations per search (N_sim)."""
    c1: float = 1.25
    """pUCT exploration constant."""
    c2: float = 19652.0
    """pUCT visit-count scale."""
    discount: float = 0.997**4
    """Discount per agent step (the paper: 0.997^4 for Atari, with frame skip 4)."""
    lstm_horizon: int = 5
    """The value-prefix LSTM restarts every this many search depths (zeta)."""
    dirichlet_alpha: float = 0.3
    """Dirichlet concentration of the root noise (xi)."""
    dirichlet_fraction: float = 0.25
    """Share of the root prior replaced by noise (rho); 0 turns noise off."""
    add_noise: bool = True
    """Root noise on (self-play, reanalyze) or off (evaluation)."""
    temperature: float = 1.0
    """Visit-count temperature T of the output policy; 0 means greedy."""
    min_max_epsilon: float = 0.01
    """Soft min-max threshold for Q normalization."""
    num_candidates: int = 16
    """Sampled action modes: candidate actions drawn at each expanded node (K)."""
    interior_candidates: int = 0
    """Sampled modes: candidates drawn at each node below the root; 0 means ``num_candidates``
    (the EfficientZero V2 paper: 16 everywhere).  V2's released code draws 2 there, which
    narrows the tree below the root and lets 32 simulations look deeper."""
    root_policy_samples: int = 4
    """Sampled modes: root candidates drawn from the policy; the others come from the
    policy widened by ``wide_scale`` (below the root all come from the policy)."""
    wide_scale: float = 3.0
    """Sampled modes: std multiplier (gaussian) or temperature (factorized) of the widened
    root proposal."""
    proposal_correction: bool = True
    """Sampled modes: the prior over candidates is beta_hat / beta * pi (Sampled MuZero);
    off: beta_hat alone (uniform over distinct candidates, as EfficientZero V2)."""
    candidate_bound: float = 1.0
    """Gaussian mode: candidates are clipped to [-bound, bound]; 1 clips nothing beyond tanh.
    EfficientZero V2 clips to 0.999, where atanh (3.8) stays within the soft-clamped mean's
    reach (5): a policy can then fit a candidate at the bounds with its mean, where one drawn
    from the widened proposal (atanh up to 7.25 in float32) pulls its std up instead."""
    gumbel_noise: bool = True
    """Sampled modes, searches with ``add_noise`` (self-play, reanalyze): Gumbel noise g at
    the root, as the Gumbel search and the EfficientZero V2 paper have it; off, g = 0 and
    the widened candidates are the only exploration (EfficientZero V2's released code on
    DMC).  Evaluation never draws it."""
    ezv2_tree: bool = False
    """Sampled modes: the tree follows EfficientZero V2's released code where it differs from
    the Gumbel paper and ours (root value, v_mix, interior selection, min-max statistics,
    the halving order; ``ctree/tree.h`` lists them)."""
    played_policy: bool = False
    """Sampled modes: ``policy`` is the played candidate's one-hot (train.policy_target=played)."""
    c_visit: float = 50.0
    """Sampled modes (Gumbel search): sigma(q) = (c_visit + max_b N(b)) c_scale q."""
    c_scale: float = 0.1
    """Sampled modes (Gumbel search): see c_visit."""
    root_unvisited_q: str = "zero"
    """Joint mode (pUCT): the Q an unvisited root child is scored with.  "zero" is the
    paper's appendix (0, the worst value where returns are >= 0, as in Atari and DMC);
    "mean" is the mean Q of the root's visited children, which follows the returns'
    offset: with negative rewards, "zero" makes every unvisited child look best and the
    search breadth-first (the ``dmc_state`` preset's joint mode learns costs, and sets
    "mean")."""

    def __post_init__(self):
        ints = ("num_simulations", "num_candidates", "root_policy_samples", "interior_candidates")
        reals = ("c1", "c2", "discount", "dirichlet_alpha", "dirichlet_fraction", "temperature", "min_max_epsilon",
                 "wide_scale", "c_visit", "c_scale", "candidate_bound")
        # the types first: the ranges below compare them
        check("search", self, [(name, is_int(getattr(self, name)), "an int") for name in ints])
        check("search", self, [(name, is_finite_number(getattr(self, name)), "a finite number") for name in reals])
        check("search", self, [
            ("root_unvisited_q", self.root_unvisited_q in ROOT_UNVISITED_Q, one_of(ROOT_UNVISITED_Q)),
            ("num_simulations", 0 <= self.num_simulations <= MAX_SIMULATIONS, f"in [0, {MAX_SIMULATIONS}]"),
            ("c1", self.c1 > 0, "> 0"),
            ("c2", self.c2 > 0, "> 0"),
            ("discount", 0.0 <= self.discount <= 1.0, "in [0, 1]"),
            ("lstm_horizon", self.lstm_horizon >= 1, ">= 1"),
            ("dirichlet_alpha", self.dirichlet_alpha > 0, "> 0"),
            ("dirichlet_fraction", 0.0 <= self.dirichlet_fraction <= 1.0, "in [0, 1]"),
            ("temperature", self.temperature >= 0, ">= 0"),
            ("min_max_epsilon", self.min_max_epsilon > 0, "> 0"),
            ("num_candidates", 1 <= self.num_candidates <= 1024, "in [1, 1024]"),
            ("root_policy_samples", 0 <= self.root_policy_samples <= self.num_candidates,
             f"in [0, num_candidates = {self.num_candidates}]"),
            ("interior_candidates", 0 <= self.interior_candidates <= self.num_candidates,
             f"in [0, num_candidates = {self.num_candidates}] (0: num_candidates)"),
            ("wide_scale", self.wide_scale > 0, "> 0"),
            ("candidate_bound", 0.0 < self.candidate_bound <= 1.0, "in (0, 1]"),
            ("c_visit", self.c_visit >= 0, ">= 0"),
            ("c_scale", self.c_scale > 0, "> 0"),
        ])

    def replace(self, **changes) -> "SearchConfig":
        return dataclasses.replace(self, **changes)
