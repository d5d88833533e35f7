"""Synthetic replay contents for the benchmarks: segments shaped like real ones
(random frames, actions and policies), so a benchmark needs no self-play first."""
import numpy as np

from ez_robot.replay import Segment


def segment(rng, *, moves, frame_shape, frame_stack, num_actions, dtype, collected_at=0, tail=10, sampled=None):
    """A 400-move segment (+ tail) of the given frame shape.  ``sampled=(C, D)``: a sampled-mode
    segment (action vectors in [-1, 1], policies over C candidate vectors of D dimensions)."""
    total = moves + tail
    if dtype == np.uint8:
        frames = rng.integers(0, 256, (frame_stack + total, *frame_shape), dtype=np.uint8)
    else:
        frames = rng.normal(size=(frame_stack + total, *frame_shape)).astype(np.float32)
    if sampled is None:
        actions, candidates, num_policy = rng.integers(0, num_actions, total), None, num_actions
    else:
        num_policy, dims = sampled
        actions = rng.uniform(-1, 1, (total, dims)).astype(np.float32)
        candidates = rng.uniform(-1, 1, (total, num_policy, dims)).astype(np.float32)
    policies = rng.dirichlet(np.ones(num_policy), size=total).astype(np.float32)
    return Segment(frames=frames, actions=actions, rewards=rng.normal(size=total).astype(np.float32),
                   root_values=rng.normal(size=total + 1).astype(np.float32), policies=policies,
                   collected_at=np.full(moves, collected_at), num_own=moves, frame_stack=frame_stack,
                   candidates=candidates)
