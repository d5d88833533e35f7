"""The ``train`` section: the run's length and pace, the optimizer, the loss, the value
and policy targets, the paper's ablations and the network backends.

Keys stay flat as users write them (``train.lr``, ``train.entropy_coef``); the fields are
grouped here by what they set.
"""
from __future__ import annotations

from dataclasses import dataclass

from ez_robot.checks import check, one_of
from ez_robot.errors import ConfigError

__all__ = ["TrainConfig"]

OPTIMIZERS = ("sgd", "adam")
STEP_WEIGHTS = ("muzero", "paper")
POLICY_TARGETS = ("full", "best", "played")
ENTROPIES = ("pre_squash", "squashed", "clipped")
VALUE_TARGETS = ("dynamic", "mixed")
INFERENCE_BACKENDS = ("onnxruntime", "torch")
COMPILE_MODES = ("none", "default", "reduce-overhead")
PACINGS = ("free", "steps")


@dataclass(frozen=True)
class TrainConfig:
    # --- length and pace ---
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
    selfplay_update_interval: int = 100
    """Training steps between weight refreshes of the acting network."""
    target_update_interval: int = 200
    """Training steps between target-network refreshes."""
    eval_episodes: int = 32
    """Evaluation episodes."""
    pacing: str = "free"
    """The Ray trainer's timetable.  ``free``: self-play runs up to two requests of decisions
    ahead of the learner's ratio, with the acting weights of the moment, and buffer
    reanalyze's batches use the previous target network's results while the new one's sweep
    runs, so how far each part got depends on how busy the machine is.  ``steps``: every
    decision, weight refresh and reanalyze target is tied to a training step, whatever the
    load: the learner takes a step only once self-play has played those two requests past
    its ratio, self-play waits for the learner beyond them, and a batch waits for the sweep of the current target
    network (the single-process trainer's timetable, shifted by the lead); with one
    self-play worker and buffer reanalyze a seed fixes the run.  The single-process
    trainer keeps its own, which is ``steps`` without a lead."""

    # --- optimizer ---
    optimizer: str = "sgd"
    """sgd (the paper: momentum, L2 weight decay) or adam (EfficientZero V2's choice on DMC
    states, with lr = lr_final = 3e-4); weight_decay is Adam's L2 term there."""
    lr: float = 0.2
    """Learning rate at the start, decayed exponentially to lr_final."""
    lr_final: float = 0.02
    """Learning rate at the end of training."""
    lr_warmup_steps: int = 0
    """Training steps over which the learning rate rises linearly from 0 to its schedule's
    value (0: none, the paper's; EfficientZero V2's code warms up over 1% of training)."""
    momentum: float = 0.9
    """SGD momentum."""
    weight_decay: float = 1e-4
    """L2 weight decay c."""
    max_grad_norm: float = 5.0
    """Gradient-norm clip."""

    # --- loss ---
    unroll_steps: int = 5
    """Model unroll length l_unroll."""
    policy_loss_coef: float = 1.0
    """lambda_1."""
    value_loss_coef: float = 0.25
    """lambda_2."""
    consistency_loss_coef: float = 2.0
    """lambda_3."""
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
    winner, here the noise-free argmax of the same improved policy); ``played`` (sampled
    modes), only the candidate the search played (-log pi(a_played); the stored target is
    its one-hot), as EfficientZero V2's released code does."""

    # --- sampled action modes ---
    entropy_coef: float = 0.01
    """Sampled action modes: weight of the policy-entropy bonus in the loss."""
    entropy: str = "pre_squash"
    """Gaussian mode: the entropy that bonus (and the ``policy_entropy`` metric) measures:
    ``pre_squash``, the Gaussian before tanh (closed form, unbounded: it rewards stds that
    pile the actions onto the bounds), ``squashed``, that of the actions in [-1, 1]
    (bounded by dims x log 2), or ``clipped``, what EfficientZero V2's released code
    estimates from 1024 draws: -E[log pi(a)] with the actions clipped to +-0.999, where the
    density is read at the clip (flat for wide stds, it stops rewarding width there)."""
    model_gradient_coef: float = 0.0
    """Gaussian mode: weight of a policy-improvement term that does not go through the
    search's targets.  At every unrolled hidden state s the policy draws a = tanh(mu + std e)
    and the loss takes -Q(s, a) / S with Q(s, a) = r(s, a) + gamma V(g(s, a)) from the model
    itself, whose weights this term leaves alone (its gradient reaches the policy head only,
    through a: the reparameterized actor update of SAC and TD-MPC2, with the learned model
    as the critic).  S is a running mean of the batch's 5-95 percentile range of Q (at least
    1), TD-MPC2's scale.  0 (the default) leaves the loss as it was."""

    # --- targets ---
    td_steps: int = 5
    """Value-target horizon k."""
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

    # --- ablations ---
    consistency: bool = True
    """Ablation: SimSiam temporal-consistency loss."""
    value_prefix: bool = True
    """Ablation: end-to-end value-prefix LSTM (off: per-step reward head, summed)."""
    off_policy_correction: bool = True
    """Ablation: dynamic horizon + MCTS root value targets (off: plain k-step targets that
    bootstrap from the target network's predicted value)."""

    # --- backends ---
    inference: str = "onnxruntime"
    """Network calls of the searches in self-play and reanalyze on the CPU: onnxruntime
    (the networks exported again after each weight refresh; faster than torch on
    the small batches of a search) or torch.  On a GPU they always run in torch."""
    compile: str = "none"
    """``torch.compile`` of the network calls in the learner's step (not the searches):
    ``none``, ``default``, or ``reduce-overhead`` (CUDA graphs on a GPU).  A pixel step on
    a GPU is bound by kernel launches rather than arithmetic, which ``reduce-overhead``
    cuts; on a CPU neither mode pays.  Compiling takes a while each time the learner starts
    (and, on a CPU, a C++ compiler), so it is off by default: a GPU's gain only
    (``benchmarks/learner_bench.py --compile`` measures it)."""

    def __post_init__(self):
        check("train", self, [
            ("budget", self.budget >= 1, ">= 1"),
            ("train_steps_per_agent_step", self.train_steps_per_agent_step > 0, "> 0"),
            ("offline_train_steps", self.offline_train_steps >= 0, ">= 0"),
            ("batch_size", self.batch_size >= 1, ">= 1"),
            ("selfplay_update_interval", self.selfplay_update_interval >= 1, ">= 1"),
            ("target_update_interval", self.target_update_interval >= 1, ">= 1"),
            ("eval_episodes", self.eval_episodes >= 1, ">= 1"),
            ("pacing", self.pacing in PACINGS, one_of(PACINGS)),
            ("optimizer", self.optimizer in OPTIMIZERS, one_of(OPTIMIZERS)),
            ("lr", self.lr > 0, "> 0"),
            ("lr_final", self.lr_final > 0, "> 0"),
            ("lr_warmup_steps", self.lr_warmup_steps >= 0, ">= 0"),
            ("momentum", 0.0 <= self.momentum < 1.0, "in [0, 1)"),
            ("weight_decay", self.weight_decay >= 0, ">= 0"),
            ("max_grad_norm", self.max_grad_norm > 0, "> 0"),
            ("unroll_steps", self.unroll_steps >= 1, ">= 1"),
            ("policy_loss_coef", self.policy_loss_coef >= 0, ">= 0"),
            ("value_loss_coef", self.value_loss_coef >= 0, ">= 0"),
            ("consistency_loss_coef", self.consistency_loss_coef >= 0, ">= 0"),
            ("step_weights", self.step_weights in STEP_WEIGHTS, one_of(STEP_WEIGHTS)),
            ("policy_target", self.policy_target in POLICY_TARGETS, one_of(POLICY_TARGETS)),
            ("entropy_coef", self.entropy_coef >= 0, ">= 0"),
            ("entropy", self.entropy in ENTROPIES, one_of(ENTROPIES)),
            ("model_gradient_coef", self.model_gradient_coef >= 0, ">= 0"),
            ("td_steps", self.td_steps >= 1, ">= 1"),
            ("reanalyze_policy_ratio", 0.0 <= self.reanalyze_policy_ratio <= 1.0, "in [0, 1]"),
            ("dynamic_horizon_tau", self.dynamic_horizon_tau > 0, "> 0"),
            ("value_target", self.value_target in VALUE_TARGETS, one_of(VALUE_TARGETS)),
            ("mixed_start", 0.0 <= self.mixed_start <= 1.0, "in [0, 1]"),
            ("mixed_window", 0.0 <= self.mixed_window <= 1.0, "in [0, 1]"),
            ("inference", self.inference in INFERENCE_BACKENDS, one_of(INFERENCE_BACKENDS)),
            ("compile", self.compile in COMPILE_MODES, one_of(COMPILE_MODES)),
        ])
        if self.value_target == "mixed" and not self.off_policy_correction:
            raise ConfigError("train.value_target=mixed bootstraps from fresh searches; it needs "
                              "train.off_policy_correction=true")
