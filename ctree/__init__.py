"""The batched C++ MCTS tree (``ez_robot.ctree``).

Only :mod:`ez_robot.search` drives it; see ``tree.h`` for the algorithm.
"""
from ._tree import Tree, considered_visits

__all__ = ["Tree", "considered_visits"]
