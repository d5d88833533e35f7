"""Typed, frozen run configuration, loaded from the YAML presets in ``configs/``.

One dataclass per component, composed in :class:`Config`.  Defaults are the paper's
appendix table (Atari); the presets (``configs/<family>.yaml``) hold what differs per
task family and per task.  ``--set section.key=value`` overrides any field; unknown keys
and out-of-range values fail with a :class:`ConfigError` that names them.
"""
from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import importlib.resources
import json
import math
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from ez_robot.mcts import SearchConfig
from ez_robot.errors import ConfigError

__all__ = ["ConfigError", "EnvConfig", "ModelConfig", "ReplayConfig", "TrainConfig", "ReanalyzeConfig", "Config",
           "load_config", "resolved_action_mode", "search_config", "parse_budget", "parse_override", "config_to_dict",
           "task_family", "PRESET_DIR", "RECIPE_DIR", "recipe_overrides"]

# configs/ in the repository, installed as the data package ez_robot.configs.
PRESET_DIR = Path(str(importlib.resources.files("ez_robot.configs")))
# Named sets of overrides (``--config NAME``), e.g. the settings a published system trains with.
RECIPE_DIR = PRESET_DIR / "recipes"


def _check(section: str, rules: Iterable[tuple[str, bool, str]], obj) -> None:
    for name, ok, rule in rules:
        if not ok:
            raise ConfigError(f"{section}.{name} must be {rule}, got {getattr(obj, name)!r}")


STATE_BODIES = ("mlp", "residual")
ACTION_MODES = ("auto", "joint", "factorized", "gaussian")


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

    def __post_init__(self):
        if not isinstance(self.kwargs, dict) or not all(isinstance(k, str) for k in self.kwargs):
            raise ConfigError(f"env.kwargs must be a mapping of keyword names to values, got {self.kwargs!r}")
        _check("env", [
            ("obs", self.obs in ("state", "pixels"), "'state' or 'pixels'"),
            ("action_repeat", self.action_repeat >= 1, ">= 1"),
            ("action_mode", self.action_mode in ACTION_MODES, " or ".join(repr(m) for m in ACTION_MODES)),
            ("bins", self.bins >= 2, ">= 2"),
            ("max_discrete_actions", self.max_discrete_actions >= 2, ">= 2"),
            ("factorized_bins", 2 <= self.factorized_bins <= 1001, "in [2, 1001]"),
            ("frame_size", 8 <= self.frame_size <= 512, "in [8, 512]"),
            ("frame_stack", self.frame_stack >= 1, ">= 1"),
            ("noop_max", self.noop_max >= 0, ">= 0"),
            ("reward_scale", self.reward_scale > 0, "> 0"),
            ("reward_offset", math.isfinite(self.reward_offset), "finite"),
            ("max_episode_frames", self.max_episode_frames >= 1, ">= 1"),
            ("budget_unit", self.budget_unit in ("agent_steps", "env_frames"), "'agent_steps' or 'env_frames'"),
        ], self)


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
        _check("model", [(name, getattr(self, name) >= 1, ">= 1") for name in (
            "num_channels", "reduced_channels", "head_hidden", "head_layers", "latent_dim", "mlp_hidden", "lstm_hidden",
            "support_size", "projection_hidden", "projection_out", "reward_support_scale", "value_support_scale",
            "residual_blocks")]
               + [("reward_support_size", self.reward_support_size >= 0, ">= 0 (0: support_size)"),
                  ("state_body", self.state_body in STATE_BODIES, " or ".join(repr(b) for b in STATE_BODIES))], self)


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

    def __post_init__(self):
        _check("replay", [
            ("segment_length", self.segment_length >= 1, ">= 1"),
            ("capacity", self.capacity >= 1, ">= 1"),
            ("priority_alpha", 0.0 <= self.priority_alpha <= 1.0, "in [0, 1]"),
            ("priority_beta_start", 0.0 <= self.priority_beta_start <= 1.0, "in [0, 1]"),
            ("priority_beta_end", 0.0 <= self.priority_beta_end <= 1.0, "in [0, 1]"),
            ("min_replay_size", self.min_replay_size >= 1, ">= 1"),
        ], self)


@dataclass(frozen=True)
class TrainConfig:
    budget: int = 100_000
    """Run length in env.budget_unit."""
    train_steps_per_agent_step: float = 1.2
    """Learner steps per agent decision (the paper: 120k training steps for 100k Atari steps)."""
    offline_train_steps: int = 0
    """Learner steps after self-play has spent the budget, on the replay as it stands
    (EfficientZero V2 trains 20k more on DMC).  The learning-rate, dynamic-horizon and
    priority schedules span all the training steps, these included; self-play's temperature
    spans the steps paced to it.  `--resume` a finished run with it to train that run on."""
    batch_size: int = 256
    """Minibatch size."""
    optimizer: str = "sgd"
    """sgd (the paper: momentum, L2 weight decay) or adam (EfficientZero V2's choice on DMC
    states, with lr = lr_final = 3e-4); weight_decay is Adam's L2 term there."""
    lr: float = 0.2
    """Learning rate at the start, decayed exponentially to lr_final."""
    lr_final: float = 0.02
    """Learning rate at the end of training."""
    momentum: float = 0.9
    """SGD momentum."""
    weight_decay: float = 1e-4
    """L2 weight decay c."""
    max_grad_norm: float = 5.0
    """Gradient-norm clip."""
    unroll_steps: int = 5
    """Model unroll length l_unroll."""
    td_steps: int = 5
    """Value-target horizon k."""
    policy_loss_coef: float = 1.0
    """lambda_1."""
    value_loss_coef: float = 0.25
    """lambda_2."""
    consistency_loss_coef: float = 2.0
    """lambda_3."""
    reanalyze_policy_ratio: float = 0.99
    """Share of sampled positions whose policy target is re-searched with the target network."""
    dynamic_horizon_tau: float = 0.3
    """tau in l = clip(k - floor(age / (tau * T_total)), 1, k)."""
    value_target: str = "dynamic"
    """dynamic: the paper's off-policy correction, every value target bootstraps from a fresh
    search's root value after the dynamic horizon l >= 1.  mixed (EfficientZero V2's): the
    k-step target with the target network's value prediction (no search) for every sample
    before ``mixed_start`` and afterwards for data collected within ``mixed_window``; older
    data takes the fresh search's root value of the position itself (l = 0)."""
    mixed_start: float = 0.4
    """mixed: share of the training steps before which every value target is the k-step one
    (EfficientZero V2 on DMC: 40k of 100k)."""
    mixed_window: float = 0.4
    """mixed: data collected within this share of the training steps of now counts as
    recent and keeps the k-step target (EfficientZero V2 on DMC: the newest 20k of 50k
    transitions)."""
    selfplay_update_interval: int = 100
    """Training steps between weight refreshes of the acting network."""
    target_update_interval: int = 200
    """Training steps between target-network refreshes."""
    eval_episodes: int = 32
    """Evaluation episodes."""
    entropy_coef: float = 0.01
    """Sampled action modes: weight of the policy-entropy bonus in the loss."""
    entropy: str = "pre_squash"
    """Gaussian mode: the entropy that bonus (and the ``policy_entropy`` metric) measures:
    ``pre_squash``, the Gaussian before tanh (closed form, unbounded: it rewards stds that
    pile the actions onto the bounds), or ``squashed``, that of the actions in [-1, 1]
    (EfficientZero V2's; bounded by dims x log 2)."""
    step_weights: str = "muzero"
    """How the loss weighs the unroll's steps.  ``muzero``: the root step's value and policy
    terms in full, the K unrolled steps' terms (value, policy, value prefix, consistency)
    each 1/K (MuZero's pseudocode).  ``paper``: every step 1/K, the root's terms included:
    L = (1/K) sum_i L_{t+i}, EfficientZero's appendix equation and its released code, which
    gives the unrolled model K times the relative weight."""
    policy_target: str = "full"
    """What the policy is trained towards: ``full``, the search's whole output policy (visit
    counts, or the improved policy over the sampled candidates: -sum_i pi'(a_i) log pi(a_i));
    ``best``, only its most likely action (-log pi(a*); EfficientZero V2 trains policies over
    more than one action dimension so, its "simple" loss, there with the Gumbel search's
    winner, here the noise-free argmax of the same improved policy)."""
    model_gradient_coef: float = 0.0
    """Gaussian mode: weight of a policy-improvement term that does not go through the
    search's targets.  At every unrolled hidden state s the policy draws a = tanh(mu + std e)
    and the loss takes -Q(s, a) / S with Q(s, a) = r(s, a) + gamma V(g(s, a)) from the model
    itself, whose weights this term leaves alone (its gradient reaches the policy head only,
    through a: the reparameterized actor update of SAC and TD-MPC2, with the learned model
    as the critic).  S is a running mean of the batch's 5-95 percentile range of Q (at least
    1), TD-MPC2's scale.  0 (the default) leaves the loss as it was."""
    inference: str = "onnxruntime"
    """Network calls of the searches in self-play and reanalyze on the CPU: onnxruntime
    (the networks exported again after each weight refresh; several times faster on the
    small batches of a search) or torch.  On a GPU they always run in torch."""
    compile: str = "none"
    """``torch.compile`` of the network calls in the learner's step (not the searches):
    ``none``, ``default``, or ``reduce-overhead`` (CUDA graphs on a GPU).  A pixel step on an
    H200 is bound by kernel launches, not arithmetic: ``reduce-overhead`` took it from 107 to
    53 ms (``benchmarks/learner_bench.py --compile``), ``default`` to 102; on a CPU neither
    pays.  Compiling takes a minute or so each time the learner starts (and, on a CPU, a C++
    compiler).  In real runs on an H200: cartpole_swingup from pixels 7.7 -> 11.0 training
    steps/s, Pong 7.4 -> 7.9 (benchmarks/README.md); off by default, a GPU's gain only."""
    consistency: bool = True
    """Ablation: SimSiam temporal-consistency loss."""
    value_prefix: bool = True
    """Ablation: end-to-end value-prefix LSTM (off: per-step reward head, summed)."""
    off_policy_correction: bool = True
    """Ablation: dynamic horizon + MCTS root value targets (off: plain k-step targets that
    bootstrap from the target network's predicted value)."""

    def __post_init__(self):
        _check("train", [
            ("budget", self.budget >= 1, ">= 1"),
            ("train_steps_per_agent_step", self.train_steps_per_agent_step > 0, "> 0"),
            ("offline_train_steps", self.offline_train_steps >= 0, ">= 0"),
            ("batch_size", self.batch_size >= 1, ">= 1"),
            ("optimizer", self.optimizer in ("sgd", "adam"), "'sgd' or 'adam'"),
            ("lr", self.lr > 0, "> 0"),
            ("lr_final", self.lr_final > 0, "> 0"),
            ("momentum", 0.0 <= self.momentum < 1.0, "in [0, 1)"),
            ("weight_decay", self.weight_decay >= 0, ">= 0"),
            ("max_grad_norm", self.max_grad_norm > 0, "> 0"),
            ("unroll_steps", self.unroll_steps >= 1, ">= 1"),
            ("td_steps", self.td_steps >= 1, ">= 1"),
            ("policy_loss_coef", self.policy_loss_coef >= 0, ">= 0"),
            ("entropy_coef", self.entropy_coef >= 0, ">= 0"),
            ("model_gradient_coef", self.model_gradient_coef >= 0, ">= 0"),
            ("entropy", self.entropy in ("pre_squash", "squashed"), "'pre_squash' or 'squashed'"),
            ("policy_target", self.policy_target in ("full", "best"), "'full' or 'best'"),
            ("step_weights", self.step_weights in ("muzero", "paper"), "'muzero' or 'paper'"),
            ("value_loss_coef", self.value_loss_coef >= 0, ">= 0"),
            ("consistency_loss_coef", self.consistency_loss_coef >= 0, ">= 0"),
            ("reanalyze_policy_ratio", 0.0 <= self.reanalyze_policy_ratio <= 1.0, "in [0, 1]"),
            ("dynamic_horizon_tau", self.dynamic_horizon_tau > 0, "> 0"),
            ("value_target", self.value_target in ("dynamic", "mixed"), "'dynamic' or 'mixed'"),
            ("mixed_start", 0.0 <= self.mixed_start <= 1.0, "in [0, 1]"),
            ("mixed_window", 0.0 <= self.mixed_window <= 1.0, "in [0, 1]"),
            ("selfplay_update_interval", self.selfplay_update_interval >= 1, ">= 1"),
            ("target_update_interval", self.target_update_interval >= 1, ">= 1"),
            ("eval_episodes", self.eval_episodes >= 1, ">= 1"),
            ("inference", self.inference in ("onnxruntime", "torch"), "'onnxruntime' or 'torch'"),
            ("compile", self.compile in ("none", "default", "reduce-overhead"),
             "'none', 'default' or 'reduce-overhead'"),
        ], self)
        if self.value_target == "mixed" and not self.off_policy_correction:
            raise ConfigError("train.value_target=mixed bootstraps from fresh searches; it needs "
                              "train.off_policy_correction=true")


REANALYZE_MODES = ("batch", "buffer")


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
        _check("reanalyze", [
            ("mode", self.mode in REANALYZE_MODES, " or ".join(repr(m) for m in REANALYZE_MODES)),
            ("staleness", 0 <= self.staleness <= 1000, "in [0, 1000]"),
            ("sweeps_per_target", 1 <= self.sweeps_per_target <= 1000, "in [1, 1000]"),
        ], self)


@dataclass(frozen=True)
class Config:
    env: EnvConfig = field(default_factory=EnvConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    reanalyze: ReanalyzeConfig = field(default_factory=ReanalyzeConfig)
    seed: int = 0
    """Seed of every random generator in the run."""
    preset: str = ""
    """The preset file the config was built from (informational)."""

    def __post_init__(self):
        if self.agent_steps_budget < self.replay.min_replay_size:
            raise ConfigError(
                f"the budget ({self.train.budget} {self.env.budget_unit} = {self.agent_steps_budget} agent steps) "
                f"is below replay.min_replay_size ({self.replay.min_replay_size} moves): training would never "
                f"start; raise --budget or lower replay.min_replay_size")
        if self.train.model_gradient_coef > 0 and self.env.action_mode != "auto":  # auto: resolved before the run
            if resolved_action_mode(self.env) != "gaussian":
                raise ConfigError(f"train.model_gradient_coef={self.train.model_gradient_coef:g} differentiates the "
                                  f"model through a reparameterized Gaussian action; env.action_mode is "
                                  f"{self.env.action_mode}: --set env.action_mode=gaussian, or leave the coefficient at 0")

    @property
    def cautions(self) -> list[str]:
        """Settings that are each valid but work against each other; training prints them
        before it starts."""
        notes = []
        offset = self.env.reward_offset
        if offset >= 0:
            return notes
        # the mode as training resolves it: a Config built in code may still say auto
        if self.search.root_unvisited_q == "zero" and resolved_action_mode(self.env) == "joint":
            notes.append(f"env.reward_offset={offset:g} makes returns negative, and "
                         "search.root_unvisited_q=zero then scores every unvisited root action above the visited "
                         "ones: the root search goes breadth-first (each action once before any twice). "
                         "Add --set search.root_unvisited_q=mean")
        if task_family(self.env.task, self.env.obs) not in ("dmc_state", "dmc_pixels"):
            notes.append(f"env.reward_offset={offset:g} on {self.env.task}: where an episode can end "
                         "before its time limit (a fall, a lost game), negative rewards make ending it sooner pay. "
                         "Keep it for fixed-length episodes only, else --set env.reward_offset=0")
        return notes

    @property
    def agent_steps_budget(self) -> int:
        """The budget converted to agent decisions."""
        if self.env.budget_unit == "agent_steps":
            return self.train.budget
        return -(-self.train.budget // self.env.action_repeat)  # ceil: never stop short of the budget

    @property
    def env_frames_budget(self) -> int:
        return self.agent_steps_budget * self.env.action_repeat


SECTIONS = {"env": EnvConfig, "model": ModelConfig, "search": SearchConfig, "replay": ReplayConfig,
            "reanalyze": ReanalyzeConfig,
            "train": TrainConfig}
TOP_LEVEL = ("seed",)


def task_family(task: str, obs: str = "state") -> str:
    """The preset a task uses: atari, classic (Gymnasium classic control), gym_mujoco
    (Gymnasium's MuJoCo tasks), custom (a factory or another gym id), dmc_state or
    dmc_pixels."""
    from ez_robot.envs import gym_family, task_kind

    kind = task_kind(task)
    if kind == "atari":
        return "atari"
    if kind == "gym":
        return gym_family(task)
    if kind == "custom":
        return "custom"
    return "dmc_pixels" if obs == "pixels" else "dmc_state"


_BUDGET = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*$")


def parse_budget(text: str | int) -> int:
    """'100k' -> 100000, '1.5M' -> 1500000, '30000' -> 30000; anything else is an error."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        match = _BUDGET.match(str(text))
        if not match:
            raise ConfigError(f"bad budget {text!r}: use a whole number with an optional k or M suffix, e.g. 100k")
        number, suffix = float(match.group(1)), match.group(2).lower()
        value = number * {"": 1, "k": 1_000, "m": 1_000_000}[suffix]
        if value != int(value):
            raise ConfigError(f"bad budget {text!r}: it is not a whole number of steps")
        value = int(value)
    if value < 1:
        raise ConfigError(f"bad budget {text!r}: it must be at least 1")
    return value


def _all_keys() -> list[str]:
    keys = [f"{s}.{f.name}" for s, cls in SECTIONS.items() for f in dataclasses.fields(cls)]
    return keys + list(TOP_LEVEL)


def _coerce(key: str, value: Any, kind) -> Any:
    kind = {"int": int, "float": float, "bool": bool, "str": str}.get(kind, kind) if isinstance(kind, str) else kind
    if kind is bool:
        if isinstance(value, bool):
            return value
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            try:
                return parse_budget(value) if key == "train.budget" else int(value)
            except (ValueError, ConfigError):
                pass
    elif kind is float:
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):
            try:
                number = float(eval_number(value))
            except (ValueError, OverflowError):
                pass
        if number is not None:
            if not math.isfinite(number):  # inf passes every "> 0" rule and diverges at the first step
                raise ConfigError(f"{key} must be a finite number, got {value!r}")
            return number
    elif kind is str:
        if isinstance(value, str):
            return value
    elif kind is dict:
        if isinstance(value, Mapping):
            return dict(value)
    raise ConfigError(f"{key} must be {kind.__name__}, got {value!r}")


def eval_number(text: str) -> float:
    """A float, also written as a power such as 0.997**4."""
    match = re.fullmatch(r"\s*([0-9.eE+-]+)\s*\*\*\s*([0-9.eE+-]+)\s*", text)
    if match:
        return float(match.group(1)) ** float(match.group(2))
    return float(text)


def _unknown(key: str) -> ConfigError:
    close = difflib.get_close_matches(key, _all_keys(), n=3, cutoff=0.5)
    hint = f"; did you mean: {', '.join(close)}?" if close else "; keys look like train.lr or search.num_simulations"
    return ConfigError(f"unknown config key {key!r}{hint}")


def _merge(values: dict, update: Mapping, where: str) -> None:
    """Folds a nested mapping {section: {key: value}} into flat values {'section.key': value}."""
    for section, entries in update.items():
        if section in TOP_LEVEL:
            values[section] = entries
            continue
        if section not in SECTIONS:
            raise ConfigError(f"{where}: unknown config section {section!r} (sections: {', '.join(SECTIONS)})")
        if not isinstance(entries, Mapping):
            raise ConfigError(f"{where}: section {section!r} must be a mapping of keys, e.g. "
                              f"'{section}: {{key: value}}', got {entries!r}")
        for key, value in entries.items():
            values[f"{section}.{key}"] = value


def parse_override(text: str) -> tuple[str, Any]:
    """``"train.lr=0.1"`` -> ``("train.lr", 0.1)`` (the value read as JSON, else as YAML:
    YAML reads ``1e-05``, JSON's way of writing a small float, as a string)."""
    if "=" not in text:
        raise ConfigError(f"bad --set {text!r}: write key=value, e.g. train.lr=0.1")
    key, raw = text.split("=", 1)
    try:
        value = json.loads(raw)
    except ValueError:
        try:
            value = yaml.safe_load(raw) if raw.strip() else raw
        except yaml.YAMLError:
            value = raw
    return key.strip(), value


def recipe_overrides(source: str | Path) -> list[str]:
    """A ``--config`` file as ``--set`` strings, in file order: a YAML mapping nested as the
    presets are (``{train: {lr: 0.1}}``), given as a path or as the name of a recipe in
    ``configs/recipes``.  Unknown sections and keys fail here, naming the file."""
    path = Path(source)
    if not path.is_file():
        named = RECIPE_DIR / f"{source}.yaml"
        if not named.is_file():
            names = sorted(p.stem for p in RECIPE_DIR.glob("*.yaml"))
            raise ConfigError(f"--config {source}: no such file, nor a recipe of that name (recipes: "
                              f"{', '.join(names) or 'none'})")
        path = named
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise ConfigError(f"--config {source}: cannot read it as YAML: {error}") from None
    if data is None:
        return []
    if not isinstance(data, Mapping):
        raise ConfigError(f"--config {source}: expected a mapping of sections, e.g. 'train: {{lr: 0.1}}', "
                          f"got {type(data).__name__}")
    values: dict[str, Any] = {}
    _merge(values, data, f"--config {source}")
    known = set(_all_keys())
    for key in values:
        if key not in known:
            raise ConfigError(f"--config {source}: {_unknown(key)}")
    return [f"{key}={json.dumps(value)}" for key, value in values.items()]


def load_config(task: str, *, obs: str = "state", budget: str | int | None = None, seed: int | None = None,
                overrides: Iterable[str] = (), preset_dir: Path | None = None) -> Config:
    """Builds the resolved config for a task: dataclass defaults (the paper), then the family
    preset, then its per-task overrides, then ``budget``/``seed``, then ``--set`` overrides."""
    family = task_family(task, obs)
    path = (preset_dir or PRESET_DIR) / f"{family}.yaml"
    with open(path) as f:
        preset = yaml.safe_load(f) or {}
    values: dict[str, Any] = {}
    task_overrides = preset.pop("tasks", {}) or {}
    preset_modes = preset.pop("modes", {}) or {}
    _merge(values, preset, path.name)
    name = task.split(":", 1)[1] if ":" in task else task
    for pattern, update in task_overrides.items():  # in file order, later patterns win
        if fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(task, pattern):
            _merge(values, update, f"{path.name} tasks.{pattern}")
    from ez_robot.envs.custom import absolute_task

    task = absolute_task(task)  # a file task's path: Ray workers and resumed runs may start elsewhere
    fixed = {"env.task": task, "env.obs": "pixels" if family == "atari" else obs}
    values.update(fixed)
    if budget is not None:
        values["train.budget"] = parse_budget(budget)
    if seed is not None:
        values["seed"] = seed
    user = {}
    for text in overrides:
        key, value = parse_override(text)
        if key in fixed and value != fixed[key]:  # the preset was chosen by the task and obs kind
            flag = "--task" if key == "env.task" else "--obs"
            raise ConfigError(f"--set {key}={value} disagrees with {flag} {fixed[key]}: the preset follows "
                              f"{flag}, so give the {key.split('.')[1]} there")
        user[key] = value
    # the action mode decides part of the preset (e.g. fewer simulations for the sampled
    # search), so it is resolved here, and the run's config names the concrete mode
    mode = resolved_action_mode(_build(_fold_kwargs({**values, **user}), preset=path.name).env)
    _merge(values, preset_modes.get(mode) or {}, f"{path.name} modes.{mode}")
    values.update(user)
    values["env.action_mode"] = mode
    return _build(values, preset=path.name)


def resolved_action_mode(env: EnvConfig) -> str:
    """The action mode ``env.action_mode`` means for its task: ``auto`` becomes joint for
    discrete action spaces and for continuous ones whose bins^dims fits
    ``max_discrete_actions``, gaussian otherwise; discrete action spaces refuse the others."""
    from ez_robot.envs import action_dims

    dims = action_dims(env.task, env.kwargs)  # None: a discrete action space
    if dims is None:
        if env.action_mode not in ("auto", "joint"):
            raise ConfigError(f"{env.task} has discrete actions: env.action_mode must be joint (or auto), "
                              f"got {env.action_mode!r}")
        return "joint"
    if env.action_mode != "auto":
        return env.action_mode
    return "joint" if env.bins ** dims <= env.max_discrete_actions else "gaussian"


def _build(values: Mapping[str, Any], preset: str = "") -> Config:
    values = _fold_kwargs(values)
    known = set(_all_keys())
    for key in values:
        if key not in known:
            raise _unknown(key)
    sections = {}
    for section, cls in SECTIONS.items():
        hints = typing.get_type_hints(cls)
        kwargs = {}
        for f in dataclasses.fields(cls):
            key = f"{section}.{f.name}"
            if key in values:
                kwargs[f.name] = _coerce(key, values[key], hints[f.name])
        try:
            sections[section] = cls(**kwargs)
        except ConfigError:
            raise
        except (ValueError, TypeError) as error:  # SearchConfig's own checks
            raise ConfigError(str(error).replace("SearchConfig.", "search.")) from None
    seed = _coerce("seed", values.get("seed", 0), int)
    return Config(seed=seed, preset=preset, **sections)


KWARGS_PREFIX = "env.kwargs."


def _fold_kwargs(values: Mapping[str, Any]) -> dict:
    """``env.kwargs.NAME=VALUE`` keys folded into the ``env.kwargs`` mapping (later keys win)."""
    out = {key: value for key, value in values.items() if not key.startswith(KWARGS_PREFIX)}
    named = {key[len(KWARGS_PREFIX):]: value for key, value in values.items() if key.startswith(KWARGS_PREFIX)}
    if named:
        base = out.get("env.kwargs") or {}
        if not isinstance(base, Mapping):
            raise ConfigError(f"env.kwargs must be a mapping, got {base!r}")
        for name in named:
            if not name.isidentifier():
                raise ConfigError(f"--set {KWARGS_PREFIX}{name}: {name!r} is not a keyword argument name")
        out["env.kwargs"] = {**base, **named}
    return out


def with_search_overrides(config: Config, overrides: Iterable[str]) -> Config:
    """A trained run's config with ``search.KEY=VALUE`` changes: what evaluating a trained
    network may change (the networks and the env are the run's).  Checked as ``--set`` is."""
    if isinstance(overrides, str):  # one setting given bare
        overrides = [overrides]
    updates = {}
    for text in overrides:
        key, value = parse_override(text)
        if not key.startswith("search."):
            raise ConfigError(f"--set {key}: evaluation changes search settings only (search.KEY=VALUE, e.g. "
                              "search.num_simulations=8); the networks and the env are the run's")
        updates[key] = value
    return config_from_dict(config_to_dict(config), updates) if updates else config


def search_config(config: Config) -> SearchConfig:
    """The search a run's networks are searched with: ``config.search``, except that
    without the value-prefix LSTM (ablation) the network predicts per-step rewards, so
    every node is its own reset boundary and the tree reads each prediction as a reward."""
    return config.search if config.train.value_prefix else config.search.replace(lstm_horizon=1)


def config_to_dict(config: Config) -> dict:
    """The resolved config as plain data (what a run saves as config.yaml)."""
    return dataclasses.asdict(config)


def config_from_dict(data: Mapping, updates: Mapping[str, Any] | None = None) -> Config:
    """Inverse of :func:`config_to_dict` (loading a saved run), with ``section.key`` values
    in ``updates`` replacing the saved ones."""
    values: dict[str, Any] = {}
    data = dict(data)
    preset = data.pop("preset", "")
    _merge(values, data, "saved config")
    values.update(updates or {})
    return _build(values, preset=preset)
