"""Deterministic random models for search tests.

Every operation is elementwise along the batch, so stepping B rows at once gives
bit-for-bit the same numbers as stepping each row alone (the reference search does the
latter).  The hidden state is a tuple (latent [B, H], value-prefix accumulator [B]); the
accumulator plays the role of the LSTM state and is zeroed where ``reset_mask`` is set.
"""
import numpy as np

from ez_robot import RootOutput


class ElementwiseModel:
    def __init__(self, num_actions: int, seed: int, reward_scale=0.5, value_scale=2.0, logit_scale=3.0):
        rng = np.random.default_rng(seed)
        self.num_actions = num_actions
        self.width = num_actions + 2
        self.weight = rng.normal(0.0, 1.5, (num_actions, self.width)).astype(np.float32)
        self.bias = rng.normal(0.0, 0.5, (num_actions, self.width)).astype(np.float32)
        self.scales = np.float32(reward_scale), np.float32(value_scale), np.float32(logit_scale)

    def root(self, batch: int, seed: int) -> RootOutput:
        rng = np.random.default_rng(seed)
        latent = rng.normal(0.0, 1.0, (batch, self.width)).astype(np.float32)
        return RootOutput(
            hidden=(latent, np.zeros(batch, np.float32)),
            value_prefix=np.zeros(batch, np.float32),
            value=(latent[:, 1] * self.scales[1]).astype(np.float32),
            policy_logits=(latent[:, 2:] * self.scales[2]).astype(np.float32),
        )

    def __call__(self, hidden, actions, reset_mask):
        latent, prefix = hidden
        prefix = np.where(reset_mask, np.float32(0.0), prefix).astype(np.float32)
        latent = np.tanh(latent * self.weight[actions] + self.bias[actions]).astype(np.float32)
        reward_scale, value_scale, logit_scale = self.scales
        value_prefix = (prefix + latent[:, 0] * reward_scale).astype(np.float32)
        value = (latent[:, 1] * value_scale).astype(np.float32)
        logits = (latent[:, 2:] * logit_scale).astype(np.float32)
        return (latent, value_prefix), value_prefix, value, logits


class PermutedModel:
    """The same model with its actions relabelled: action i here is action perm[i] there."""

    def __init__(self, model: ElementwiseModel, perm: np.ndarray):
        self.model, self.perm = model, perm

    def root(self, batch, seed):
        root = self.model.root(batch, seed)
        return RootOutput(root.hidden, root.value_prefix, root.value, root.policy_logits[:, self.perm])

    def __call__(self, hidden, actions, reset_mask):
        next_hidden, value_prefix, value, logits = self.model(hidden, self.perm[actions], reset_mask)
        return next_hidden, value_prefix, value, logits[:, self.perm]


class ToyInference:
    """An :class:`ElementwiseModel` behind the interface reanalyze and self-play use
    (``root(observations)`` and ``recurrent_fn``): the root latent is an elementwise
    function of each observation's sum, so every row is computed alone, bit for bit."""

    def __init__(self, num_actions: int, seed: int = 0):
        from ez_robot.action_modes import ActionSpec

        self.action_spec = ActionSpec("joint", num_actions=num_actions)
        self.model = ElementwiseModel(num_actions, seed)
        rng = np.random.default_rng(seed + 1)
        self.scale = rng.normal(0.0, 1.0, self.model.width).astype(np.float32)

    def root(self, observations) -> RootOutput:
        total = np.asarray(observations, np.float32).reshape(len(observations), -1).sum(axis=1, keepdims=True)
        latent = np.tanh(total * self.scale[None, :]).astype(np.float32)
        batch = len(latent)
        return RootOutput(hidden=(latent, np.zeros(batch, np.float32)), value_prefix=np.zeros(batch, np.float32),
                          value=(latent[:, 1] * self.model.scales[1]).astype(np.float32),
                          policy_logits=(latent[:, 2:] * self.model.scales[2]).astype(np.float32))

    def recurrent_fn(self, hidden, actions, reset_mask):
        return self.model(hidden, actions, reset_mask)
