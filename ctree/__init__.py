"""The batched C++ MCTS tree (``ez_robot.ctree``), and the candidate draws of a sampled
search.

Only :mod:`ez_robot.mcts` and :mod:`ez_robot.action_modes` drive them; see ``tree.h`` for
the search and ``candidates.h`` for the draws.
"""
from ._tree import (Tree, child_rows, considered_visits, duplicate_counts, ezv2_halving, factorized_candidates,
                    gaussian_candidates)

__all__ = ["Tree", "considered_visits", "ezv2_halving", "child_rows", "gaussian_candidates", "factorized_candidates",
           "duplicate_counts"]
