"""The config sections of the env, the model, the replay buffer and reanalyze.

Each is a frozen dataclass whose fields are the keys a user writes (``env.action_repeat``,
``model.latent_dim``); each field's docstring says what it does.  Defaults are the
paper's appendix table (Atari); the presets in ``configs/`` hold what differs per task
family.  Every section checks its values with :func:`ez_robot.checks.check`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ez_robot.checks import check, is_finite_number, one_of

__all__ = ["EnvConfig", "ModelConfig", "ReplayConfig", "ReanalyzeConfig", "ACTION_MODES", "STATE_BODIES",
           "REANALYZE_MODES"]

ACTION_MODES = ("auto", "joint", "factorized", "gaussian")
STATE_BODIES = ("mlp", "residual")
REANALYZE_MODES = ("batch", "buffer")


@dataclass(frozen=True)
class EnvConfig:
    task: str = "cartpole_swingup"
    """Task name: <domain>_<task> (DMControl), atari:<Game>, gym:<id>, or a factory of your
    own: package.module:factory or path/to/file.py:factory."""
    kwargs: dict = field(default_factory=dict)
    """Keyword arguments of a gym:<id> or factory task's env (--set env.kwargs.NAME=VALUE)."""
    obs: str = "state"
    """Observation kind: state or pixels (Atari is always pixels)."""
    action_repeat: int = 4
    """Simulator steps per agent decision (Atari: the frame skip)."""
    action_mode: str = "auto"
    """Continuous actions: joint (one of bins^dims joint discrete actions, the paper's DMC
    setting), factorized (each dimension its own categorical over factorized_bins values),
    gaussian (a tanh-squashed Gaussian), or auto: joint where bins^dims <=
    max_discrete_actions, else gaussian.  Discrete action spaces are always joint."""
    bins: int = 5
    """Joint mode: evenly spaced values per action dimension, both bounds included."""
    max_discrete_actions: int = 1024
    """Joint mode: refuse a discretization with more than this many joint actions (bins^dims)."""
    factorized_bins: int = 11
    """Factorized mode: evenly spaced values per action dimension, both bounds included."""
    frame_size: int = 96
    """Pixels: side of the square observation."""
    frame_stack: int = 4
    """Pixels: frames stacked on the channel axis."""
    noop_max: int = 30
    """Atari: up to this many no-op actions at reset."""
    max_episode_frames: int = 108_000
    """Atari: episode cap in emulator frames."""
    reward_scale: float = 1.0
    """Training rewards multiplied by this (self-play and value targets; evaluation and eval
    returns stay in the task's units).  For tasks whose rewards are small next to the value
    support's resolution, e.g. a few hundredths per step."""
    reward_offset: float = 0.0
    """Added to every simulator step's training reward, before ``reward_scale`` (per
    decision where the env does not report its steps: Atari).  DMControl's rewards lie in
    [0, 1] per step, and -1 turns them into costs in [-1, 0]: a good policy's values then sit
    near 0, where the value support is finest.  On fixed-length tasks (DMControl) this
    leaves the best policy unchanged; where an episode can end early (a robot that falls)
    negative rewards make ending it sooner pay, so leave it 0 there.  The ``dmc_state``
    preset sets -1 in the joint mode, with ``search.root_unvisited_q=mean``."""
    budget_unit: str = "agent_steps"
    """What --budget counts: agent_steps (Atari 100k) or env_frames (DMC 100k: simulator steps)."""
    max_failures_in_a_row: int = 5
    """An env that raises is made again and its episode dropped (self-play) or played again
    (evaluation); one more failure than this, with no episode finished between them, stops
    the run with a checkpoint and the env's error."""

    def __post_init__(self):
        check("env", self, [("kwargs", isinstance(self.kwargs, dict) and all(isinstance(k, str) for k in self.kwargs),
                             "a mapping of keyword names to values")])
        check("env", self, [
            ("obs", self.obs in ("state", "pixels"), one_of(("state", "pixels"))),
            ("action_repeat", self.action_repeat >= 1, ">= 1"),
            ("action_mode", self.action_mode in ACTION_MODES, one_of(ACTION_MODES)),
            ("bins", self.bins >= 2, ">= 2"),
            ("max_discrete_actions", self.max_discrete_actions >= 2, ">= 2"),
            ("factorized_bins", 2 <= self.factorized_bins <= 1001, "in [2, 1001]"),
            ("frame_size", 8 <= self.frame_size <= 512, "in [8, 512]"),
            ("frame_stack", self.frame_stack >= 1, ">= 1"),
            ("noop_max", self.noop_max >= 0, ">= 0"),
            ("reward_scale", self.reward_scale > 0, "> 0"),
            ("reward_offset", is_finite_number(self.reward_offset), "a finite number"),
            ("max_episode_frames", self.max_episode_frames >= 1, ">= 1"),
            ("budget_unit", self.budget_unit in ("agent_steps", "env_frames"), one_of(("agent_steps", "env_frames"))),
            ("max_failures_in_a_row", self.max_failures_in_a_row >= 0, ">= 0"),
        ])


@dataclass(frozen=True)
class ModelConfig:
    num_channels: int = 64
    """Pixels: planes of the latent state (6x6x64 for 96x96 inputs)."""
    reduced_channels: int = 16
    """Pixels: planes of the 1x1 convolution in front of each head."""
    head_hidden: int = 32
    """Hidden width of the value, value-prefix and policy heads."""
    head_layers: int = 1
    """States: hidden layers of ``head_hidden`` in the value, policy and reward heads (the
    paper's heads: 1; EfficientZero V2's state model: 2 of 256)."""
    latent_dim: int = 128
    """States: width of the latent vector of the MLP model."""
    mlp_hidden: int = 256
    """States: hidden width of the MLP representation and dynamics."""
    lstm_hidden: int = 512
    """Hidden size of the value-prefix LSTM."""
    support_size: int = 300
    """Categorical value and value-prefix supports span [-support_size, support_size] (601 bins)."""
    value_support_scale: int = 1
    """Value support bins per unit of h(x) (1: the paper's integer bins; 2: bins 0.5 apart,
    2 support_size scale + 1 of them).  EfficientZero V2's value bins are ~0.67 apart."""
    reward_support_size: int = 0
    """The value-prefix (reward) support's half-width in h(x) units; 0: support_size."""
    reward_support_scale: int = 1
    """Value-prefix support bins per unit of h(x) (1: the paper's integer bins).  A finer
    support resolves the small differences of consecutive predicted prefixes that the
    search reads as per-step rewards."""
    projection_hidden: int = 512
    """SimSiam projector hidden width."""
    projection_out: int = 1024
    """SimSiam projector and predictor output width."""
    state_body: str = "mlp"
    """States: the representation and dynamics networks.  ``mlp``: two layers each, a ReLU
    latent and the dynamics' residual link to its input state (the presets' body);
    ``residual`` (EfficientZero V2's state model, an experiment): a tanh-bounded latent
    refined by ``residual_blocks`` pre-norm residual blocks, and a dynamics that embeds
    the action (64 wide) and adds pre-norm residual updates to the state."""
    residual_blocks: int = 2
    """States, ``state_body=residual``: pre-norm residual blocks in the representation and
    in the dynamics (EfficientZero V2: 2)."""
    normalize_obs: bool = False
    """States: normalize observations by a running mean and std (kept in the network, so
    checkpoints and exported graphs take raw sensor values); updated from the data the
    learner trains on."""

    def __post_init__(self):
        positive = ("num_channels", "reduced_channels", "head_hidden", "head_layers", "latent_dim", "mlp_hidden",
                    "lstm_hidden", "support_size", "projection_hidden", "projection_out", "reward_support_scale",
                    "value_support_scale", "residual_blocks")
        check("model", self, [
            *((name, getattr(self, name) >= 1, ">= 1") for name in positive),
            ("reward_support_size", self.reward_support_size >= 0, ">= 0 (0: support_size)"),
            ("state_body", self.state_body in STATE_BODIES, one_of(STATE_BODIES)),
        ])


@dataclass(frozen=True)
class ReplayConfig:
    segment_length: int = 400
    """Moves per stored trajectory segment."""
    capacity: int = 100_000
    """Transitions kept (the whole 100k run by default)."""
    priority_alpha: float = 0.6
    """Priority exponent alpha."""
    priority_beta_start: float = 0.4
    """Importance-sampling exponent beta at the start, annealed to priority_beta_end."""
    priority_beta_end: float = 1.0
    """Importance-sampling exponent at the end of training."""
    min_replay_size: int = 2000
    """Transitions stored before sampling starts."""
    min_weight: float = 0.0
    """Lower clip of the max-normalized importance-sampling weights (0: none, the paper's;
    EfficientZero V2's released code clips them to [0.1, 1], so that no sampled move is
    all but left out of the loss)."""

    def __post_init__(self):
        check("replay", self, [
            ("min_weight", 0.0 <= self.min_weight <= 1.0, "in [0, 1]"),
            ("segment_length", self.segment_length >= 1, ">= 1"),
            ("capacity", self.capacity >= 1, ">= 1"),
            ("priority_alpha", 0.0 <= self.priority_alpha <= 1.0, "in [0, 1]"),
            ("priority_beta_start", 0.0 <= self.priority_beta_start <= 1.0, "in [0, 1]"),
            ("priority_beta_end", 0.0 <= self.priority_beta_end <= 1.0, "in [0, 1]"),
            ("min_replay_size", self.min_replay_size >= 1, ">= 1"),
        ])




@dataclass(frozen=True)
class ReanalyzeConfig:
    mode: str = "buffer"
    """batch: the paper's reanalyze, every training step searches its batch's bootstrap and
    policy observations with the target network (~3,000 roots for batch 256); buffer: a
    sweep searches every stored position once per target-network version and stores the
    results in replay, and a batch reads them (searching only what is missing or stale)."""
    staleness: int = 0
    """buffer: how many target-network updates a stored result may lag behind the current
    target network and still be used; older results are searched again in the batch.
    0: the current target network's, swept as soon as it changes (while that sweep is
    still running beside training, on Ray, the previous one's); ``s`` >= 1: the sweep
    refreshes every stored observation once per ``s`` target periods."""
    sweeps_per_target: int = 1
    """buffer, staleness 0: times each target network sweeps the buffer, evenly spread
    over its period, each with fresh root noise (batch mode searches a position afresh
    every time a batch samples it: ~25 times a period for the DMC presets)."""
    root_noise: bool = True
    """Dirichlet noise at the roots of reanalyze's searches, as in self-play (the paper's
    reanalyze has it)."""

    def __post_init__(self):
        check("reanalyze", self, [
            ("mode", self.mode in REANALYZE_MODES, one_of(REANALYZE_MODES)),
            ("staleness", 0 <= self.staleness <= 1000, "in [0, 1000]"),
            ("sweeps_per_target", 1 <= self.sweeps_per_target <= 1000, "in [1, 1000]"),
        ])

