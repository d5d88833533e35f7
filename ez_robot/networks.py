"""EfficientZero's networks: representation H, dynamics G, value-prefix R, prediction
(value V, policy P), and the SimSiam projector/predictor of the consistency loss.

Two bodies share one interface:
- pixels ([C, H, W] uint8): the paper's appendix architecture, a ResNet down to 6x6x64;
- states ([D] float32): an MLP counterpart (sizes in :class:`ModelConfig`, see
  :func:`make_network` for why).

``initial_inference`` and ``recurrent_inference`` are the only entry points the search,
the trainer and the exporter use.  Observation scaling (uint8 / 255) happens inside the
network so that an exported graph takes raw observations.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from ez_robot.config import ModelConfig
from ez_robot.errors import ConfigError
from ez_robot.action_modes import ActionSpec

__all__ = ["EfficientZeroNet", "ObservationNormalizer", "InitialOutput", "RecurrentOutput", "make_network", "value_transform",
           "inverse_value_transform", "scalar_to_support", "support_to_scalar", "scale_gradient"]

EPS = 0.001  # epsilon of the invertible value transform (MuZero appendix)


# --- categorical supports -------------------------------------------------------------

def value_transform(x: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x: squashes large returns for the support."""
    return torch.sign(x) * (torch.sqrt(torch.abs(x) + 1) - 1) + eps * x


def inverse_value_transform(y: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """Closed-form inverse of :func:`value_transform`."""
    root = (torch.sqrt(1 + 4 * eps * (torch.abs(y) + 1 + eps)) - 1) / (2 * eps)
    return torch.sign(y) * (root ** 2 - 1)


def scalar_to_support(x: torch.Tensor, support_size: int, scale: int = 1) -> torch.Tensor:
    """[...] scalars -> [..., 2 S scale + 1] two-hot distributions over the bins
    -S, -S + 1/scale, ..., S whose mean is h(x) (clipped to the support)."""
    half = support_size * scale
    y = value_transform(x)
    y = (y * scale if scale != 1 else y).clamp(-half, half)
    low = y.floor()
    upper_weight = y - low
    out = torch.zeros(x.shape + (2 * half + 1,), dtype=y.dtype, device=y.device)
    low_index = (low + half).long()
    out.scatter_(-1, low_index.unsqueeze(-1), (1 - upper_weight).unsqueeze(-1))
    high_index = (low_index + 1).clamp(max=2 * half)
    # at the top edge upper_weight is 0, so adding into the clamped index changes nothing
    out.scatter_add_(-1, high_index.unsqueeze(-1), upper_weight.unsqueeze(-1))
    return out


def support_bins(support: tuple[int, int]) -> int:
    """Bins of a (size, bins per unit of h) support: -size..size in steps of 1 / scale."""
    size, scale = support
    return 2 * size * scale + 1


def support_to_scalar(logits: torch.Tensor, support_size: int, scale: int = 1) -> torch.Tensor:
    """[..., 2 S scale + 1] logits -> [...] scalars: softmax mean over the bins -S..S
    (1/scale apart), then h^-1."""
    half = support_size * scale
    bins = torch.arange(-half, half + 1, dtype=logits.dtype, device=logits.device)
    if scale != 1:
        bins = bins / scale
    # h^-1 divides a difference of nearly equal square roots by 2 eps = 0.002: in float32
    # that loses ~1e-4 of absolute precision, so it runs in float64 (on [...] scalars only).
    # (MPS has no float64; it keeps float32.)
    mean = (torch.softmax(logits, dim=-1) * bins).sum(-1)
    wide = torch.float32 if mean.device.type == "mps" else torch.float64
    return inverse_value_transform(mean.to(wide)).to(logits.dtype)


def scale_gradient(x: torch.Tensor, scale: float) -> torch.Tensor:
    """Identity forward; the backward gradient is multiplied by ``scale``."""
    return x * scale + x.detach() * (1 - scale)


# --- building blocks ------------------------------------------------------------------

def _conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


class _ResidualBlock(nn.Module):
    def __init__(self, channels: int, out_channels: int | None = None, stride: int = 1):
        super().__init__()
        out_channels = out_channels or channels
        self.conv1, self.bn1 = _conv3x3(channels, out_channels, stride), nn.BatchNorm2d(out_channels)
        self.conv2, self.bn2 = _conv3x3(out_channels, out_channels), nn.BatchNorm2d(out_channels)
        self.skip = None if stride == 1 and out_channels == channels else \
            nn.Sequential(_conv3x3(channels, out_channels, stride), nn.BatchNorm2d(out_channels))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.skip is None else self.skip(x)))


def _mlp(sizes: list[int], *, last_bn: bool = False, zero_last: bool = False, norm=nn.BatchNorm1d) -> nn.Sequential:
    """Linear layers with a normalization (BN by default) + ReLU between them."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers += [norm(b), nn.ReLU()]
        elif last_bn:
            layers.append(norm(b))
    if zero_last:  # stable start: heads predict 0 value and a uniform policy
        last = [m for m in layers if isinstance(m, nn.Linear)][-1]
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)
    return nn.Sequential(*layers)


class _ConvHead(nn.Module):
    """1x1 conv to reduced planes (BN, ReLU), flatten, MLP."""

    def __init__(self, channels: int, reduced: int, spatial: int, hidden: int, out: int, residual: bool):
        super().__init__()
        self.block = _ResidualBlock(channels) if residual else None
        self.conv, self.bn = nn.Conv2d(channels, reduced, 1), nn.BatchNorm2d(reduced)
        self.mlp = _mlp([reduced * spatial, hidden, out], zero_last=True)

    def forward(self, x):
        if self.block is not None:
            x = self.block(x)
        return self.mlp(F.relu(self.bn(self.conv(x))).flatten(1))


class _PreNormBlock(nn.Module):
    """x + W2 relu(W1 LN(x)): a residual block with its normalization in front (Xiong et
    al., 2020), so the identity path carries the state through unchanged in scale."""

    def __init__(self, width: int, hidden: int, inputs: int | None = None):
        super().__init__()
        inputs = inputs or width
        self.norm, self.inner, self.outer = nn.LayerNorm(inputs), nn.Linear(inputs, hidden), nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor, update_of: torch.Tensor | None = None) -> torch.Tensor:
        """``update_of``: the state the update adds to, when the block reads more than it
        (the dynamics' first block reads the state and the action embedding)."""
        return (x if update_of is None else update_of) + self.outer(F.relu(self.inner(self.norm(x))))


class _ResidualDynamics(nn.Module):
    """EfficientZero V2's state dynamics: the action through a 64-wide embedding (linear,
    LayerNorm, ReLU), one pre-norm block that reads state and embedding and updates the
    state, then ``blocks - 1`` pre-norm blocks on the state alone."""

    EMBEDDING = 64

    def __init__(self, latent: int, hidden: int, action_inputs: int, blocks: int):
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(action_inputs, self.EMBEDDING), nn.LayerNorm(self.EMBEDDING), nn.ReLU())
        self.first = _PreNormBlock(latent, hidden, inputs=latent + self.EMBEDDING)
        self.blocks = nn.Sequential(*[_PreNormBlock(latent, hidden) for _ in range(blocks - 1)])

    def forward(self, hidden: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        state = self.first(torch.cat([hidden, self.embed(action)], dim=1), update_of=hidden)
        return self.blocks(state)


class InitialOutput(NamedTuple):
    hidden: torch.Tensor          # [B, *hidden_shape]
    value_logits: torch.Tensor    # [B, 2S + 1]
    policy_logits: torch.Tensor   # [B, P] policy-head outputs (joint: the A logits)


class RecurrentOutput(NamedTuple):
    hidden: torch.Tensor                    # [B, *hidden_shape]
    lstm_state: tuple                       # (h, c), each [B, lstm_hidden]
    value_prefix_logits: torch.Tensor       # [B, 2S + 1] (per-step reward without the LSTM)
    value_logits: torch.Tensor              # [B, 2S + 1]
    policy_logits: torch.Tensor             # [B, P]


class ObservationNormalizer(nn.Module):
    """Running mean and variance of state observations, applied as (x - mean) / std
    clipped to +-``clip``.  The statistics are buffers: they travel with the weights (to
    self-play, the target network, checkpoints and the exported graph, which so takes raw
    sensor values).  :meth:`update` folds in a batch (Chan et al.'s parallel formula, in
    float64); until the first update the normalizer is the identity."""

    def __init__(self, dims: int, clip: float = 10.0, eps: float = 1e-8):
        super().__init__()
        self.clip, self.eps = clip, eps
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("running_mean", torch.zeros(dims, dtype=torch.float64))
        self.register_buffer("running_m2", torch.zeros(dims, dtype=torch.float64))
        self.register_buffer("shift", torch.zeros(dims))  # float32 copies the forward pass reads
        self.register_buffer("inv_std", torch.ones(dims))
        self.register_buffer("limit", torch.tensor(float("inf")))  # the clip, from the first update on

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Folds the rows of ``x`` [N, D] into the statistics."""
        x = x.detach().reshape(-1, self.shift.numel()).to(torch.float64)
        n = x.shape[0]
        if n == 0:
            return
        batch_mean = x.mean(0)
        batch_m2 = ((x - batch_mean) ** 2).sum(0)
        total = self.count + n
        delta = batch_mean - self.running_mean
        self.running_mean += delta * (n / total)
        self.running_m2 += batch_m2 + delta ** 2 * (self.count * n / total)
        self.count.copy_(total)
        self.shift.copy_(self.running_mean.float())
        self.inv_std.copy_((self.running_m2 / total + self.eps).rsqrt().float())
        self.limit.fill_(self.clip)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.minimum(torch.maximum((x - self.shift) * self.inv_std, -self.limit), self.limit)


# --- the network -------------------------------------------------------------------

class EfficientZeroNet(nn.Module):
    """``action``: an :class:`ActionSpec` (or the number of joint discrete actions).  The
    policy head has ``action.policy_size`` outputs; the dynamics takes an action index
    (joint) or an action vector in [-1, 1]^D (the sampled modes)."""

    def __init__(self, obs_shape: tuple, action: ActionSpec | int, config: ModelConfig, *, value_prefix: bool = True):
        super().__init__()
        self.action_spec = action if isinstance(action, ActionSpec) else ActionSpec("joint", num_actions=int(action))
        self.obs_shape = tuple(obs_shape)
        self.num_actions = self.action_spec.num_actions  # joint: A (0 in the sampled modes)
        self.policy_size = self.action_spec.policy_size
        # what the dynamics reads of an action: A one-hot entries (states) or one plane
        # (pixels) for an index; the D values of a vector
        self.action_inputs = self.action_spec.dims if self.action_spec.sampled else \
            (1 if len(obs_shape) == 3 else self.num_actions)
        self.support_size = config.support_size
        # (size, bins per unit of h) of the value support
        self.value_support = (config.support_size, config.value_support_scale)
        # (size, bins per unit of h) of the value-prefix (or reward) support
        self.reward_support = (config.reward_support_size or config.support_size, config.reward_support_scale)
        self.lstm_hidden = config.lstm_hidden
        self.value_prefix = value_prefix
        self.pixels = len(obs_shape) == 3
        self.normalizer: ObservationNormalizer | None = None  # states, with model.normalize_obs
        bins = support_bins(self.value_support)
        if self.pixels:
            self._build_pixels(config, bins)
        else:
            self._build_states(config, bins)
        flat = int(torch.tensor(self.hidden_shape).prod())
        # SimSiam: projector (3 layers) on every hidden state, predictor (2 layers) on the
        # dynamics branch only; the branch from the real observation is the stop-gradient target.
        self.projector = _mlp([flat, config.projection_hidden, config.projection_hidden, config.projection_out],
                              last_bn=True)
        self.predictor = _mlp([config.projection_out, config.projection_hidden, config.projection_out])

    def _build_pixels(self, c: ModelConfig, bins: int) -> None:
        if c.state_body != "mlp":
            raise ConfigError(f"model.state_body={c.state_body!r} is for state observations; pixels use the "
                              "paper's ResNet (leave model.state_body at 'mlp')")
        if c.head_layers != 1:
            raise ConfigError(f"model.head_layers={c.head_layers} is for state observations; the pixel heads are "
                              "the paper's (leave model.head_layers at 1)")
        self.residual_body = False
        channels, height, width = self.obs_shape
        ch = c.num_channels
        self.representation = nn.Sequential(
            nn.Conv2d(channels, ch // 2, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(ch // 2), nn.ReLU(),
            _ResidualBlock(ch // 2),
            _ResidualBlock(ch // 2, ch, stride=2),
            _ResidualBlock(ch),
            nn.AvgPool2d(3, stride=2, padding=1),
            _ResidualBlock(ch),
            nn.AvgPool2d(3, stride=2, padding=1),
            _ResidualBlock(ch),
        )
        with torch.no_grad():
            self.hidden_shape = tuple(self.representation(torch.zeros(2, *self.obs_shape)).shape[1:])
        spatial = self.hidden_shape[1] * self.hidden_shape[2]
        # Dynamics: the paper's text says stride 2, but the residual link adds the input
        # state, so the convolution must keep the 6x6 resolution: stride 1.
        self.dynamics_conv = _conv3x3(ch + self.action_inputs, ch)
        self.dynamics_bn = nn.BatchNorm2d(ch)
        self.dynamics_block = _ResidualBlock(ch)
        self.reward_conv = nn.Sequential(nn.Conv2d(ch, c.reduced_channels, 1), nn.BatchNorm2d(c.reduced_channels),
                                         nn.ReLU(), nn.Flatten())
        reward_in = c.reduced_channels * spatial
        self.value_head = _ConvHead(ch, c.reduced_channels, spatial, c.head_hidden, bins, residual=True)
        self.policy_head = _ConvHead(ch, c.reduced_channels, spatial, c.head_hidden, self.policy_size, residual=True)
        self._build_reward(reward_in, c)

    def _build_states(self, c: ModelConfig, bins: int) -> None:
        (dims,) = self.obs_shape
        self.hidden_shape = (c.latent_dim,)
        # LayerNorm, not BatchNorm, in the state body: BN's batch statistics wipe out the
        # action input whenever a batch takes one action (every search expansion of a
        # bandit-like root does), and its running statistics average over unroll depths
        # whose hidden states differ, so eval-mode predictions drifted from training.  On
        # a 4-state MDP the BN model mixed up rewards of the two actions after 300 steps;
        # LayerNorm has no train/eval difference.  (The pixel ResNet keeps the paper's BN.)
        ln = nn.LayerNorm
        self.normalizer = ObservationNormalizer(dims) if c.normalize_obs else None
        self.residual_body = c.state_body == "residual"
        if self.residual_body:
            self.representation = nn.Sequential(
                nn.Linear(dims, c.latent_dim), ln(c.latent_dim), nn.Tanh(),
                *[_PreNormBlock(c.latent_dim, c.mlp_hidden) for _ in range(c.residual_blocks)])
            self.dynamics_residual = _ResidualDynamics(c.latent_dim, c.mlp_hidden, self.action_inputs,
                                                       c.residual_blocks)
        else:
            self.representation = nn.Sequential(_mlp([dims, c.mlp_hidden, c.latent_dim], last_bn=True, norm=ln),
                                                nn.ReLU())
            self.dynamics_mlp = _mlp([c.latent_dim + self.action_inputs, c.mlp_hidden, c.latent_dim], last_bn=True,
                                     norm=ln)
        self.reward_conv = nn.Identity()
        hidden = [c.head_hidden] * c.head_layers
        self.value_head = _mlp([c.latent_dim, *hidden, bins], zero_last=True, norm=ln)
        self.policy_head = _mlp([c.latent_dim, *hidden, self.policy_size], zero_last=True, norm=ln)
        self._build_reward(c.latent_dim, c, norm=ln)

    def _build_reward(self, features: int, c: ModelConfig, norm=nn.BatchNorm1d) -> None:
        bins = support_bins(self.reward_support)
        hidden = [c.head_hidden] * c.head_layers  # 1 for pixels (refused otherwise)
        if self.value_prefix:
            self.lstm = nn.LSTMCell(features, c.lstm_hidden)
            self.reward_bn = norm(c.lstm_hidden)
            self.reward_head = _mlp([c.lstm_hidden, *hidden, bins], zero_last=True, norm=norm)
        else:  # ablation: a per-step reward from the next state, no recurrence
            self.reward_head = _mlp([features, c.lstm_hidden, *hidden, bins], zero_last=True, norm=norm)

    # --- entry points ---

    def initial_lstm_state(self, batch: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
        zeros = torch.zeros(batch, self.lstm_hidden, device=device)
        return zeros, zeros.clone()

    def represent(self, obs: torch.Tensor) -> torch.Tensor:
        """H: observations (uint8 pixels or float states) -> hidden state."""
        x = obs.float() / 255.0 if self.pixels else obs.float()
        if self.normalizer is not None:
            x = self.normalizer(x)
        return self.representation(x)

    def predict(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(value_logits, policy_logits) of a hidden state."""
        return self.value_head(hidden), self.policy_head(hidden)

    def initial_inference(self, obs: torch.Tensor) -> InitialOutput:
        hidden = self.represent(obs)
        return InitialOutput(hidden, *self.predict(hidden))

    def recurrent_inference(self, hidden: torch.Tensor, lstm_state: tuple, action: torch.Tensor) -> RecurrentOutput:
        next_hidden = self.dynamics(hidden, action)
        features = self.reward_conv(next_hidden)
        if self.value_prefix:
            h, c = self.lstm(features, lstm_state)
            value_prefix_logits = self.reward_head(F.relu(self.reward_bn(h)))
            lstm_state = (h, c)
        else:
            value_prefix_logits = self.reward_head(features)
        value_logits, policy_logits = self.predict(next_hidden)
        return RecurrentOutput(next_hidden, lstm_state, value_prefix_logits, value_logits, policy_logits)

    def dynamics(self, hidden: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """G: (state, action) -> next state, with the extra residual link to the input state.
        ``action``: [B] indices (joint) or [B, D] vectors (sampled modes)."""
        sampled = self.action_spec.sampled
        if self.pixels:
            values = action.float() if sampled else (action.float() / self.num_actions)[:, None]
            planes = values[:, :, None, None].expand(-1, -1, *hidden.shape[2:])
            x = self.dynamics_bn(self.dynamics_conv(torch.cat([hidden, planes], dim=1)))
            return self.dynamics_block(F.relu(x + hidden))
        encoded = action.float() if sampled else F.one_hot(action.long(), self.num_actions).float()
        if self.residual_body:
            return self.dynamics_residual(hidden, encoded)
        x = self.dynamics_mlp(torch.cat([hidden, encoded], dim=1))
        return F.relu(x + hidden)

    def project(self, hidden: torch.Tensor, with_predictor: bool) -> torch.Tensor:
        """SimSiam projection of hidden states [B, *hidden_shape] -> [B, projection_out]."""
        z = self.projector(hidden.flatten(1))
        return self.predictor(z) if with_predictor else z


def make_network(obs_shape: tuple, action: ActionSpec | int, config: ModelConfig, *, value_prefix: bool = True
                 ) -> EfficientZeroNet:
    """Pixel observations ([C, H, W]) get the paper's ResNet; states ([D]) the MLP, or with
    ``model.state_body=residual`` EfficientZero V2's pre-norm residual body.

    The MLP sizes (``mlp_hidden`` 256, ``latent_dim`` 128 by default; the DMC-state preset
    may lower them) keep one dynamics step cheap enough for 50-simulation searches of
    thousands of roots on a CPU during reanalyze, while giving proprioceptive tasks (5-24
    features) a latent several times wider than their input.
    """
    if len(obs_shape) not in (1, 3):
        raise ValueError(f"observations must be [D] states or [C, H, W] pixels, got shape {tuple(obs_shape)}")
    return EfficientZeroNet(obs_shape, action, config, value_prefix=value_prefix)
