"""The onboard runtime: a bundle's ONNX networks on onnxruntime, searched by the same
:func:`ez_robot.search` that training and evaluation use.

It imports numpy, onnxruntime, the standard library and the compiled tree, never torch,
so the robot computer needs neither torch nor the training code::

    policy = Policy.load("runs/cartpole/bundle")          # preset="latency" by default
    action = policy.act(obs)                  # a vector within the task's bounds, or an index
    actions = policy.act_batch(observations)  # [B, ...] observations from B robots or envs
    action = policy.act(obs, deadline_ms=8)   # anytime: stop searching after 8 ms
    policy.last.simulations                   # [B] how many simulations ran

The search is greedy (no root noise, temperature 0): the action the trained agent
takes in evaluation.  In the sampled action modes (factorized, gaussian) the search still
draws its candidate actions; they come from the policy's own generator, seeded at load
(``seed=0``), so a policy loaded twice decides the same on the same observations.

A bundle is a directory with ``initial.onnx``, ``recurrent.onnx`` and ``manifest.json``
(written by ``ez-robot export``; the format is :mod:`ez_robot.export.bundle`); loading
checks the format version and each file's sha256 before onnxruntime sees it, then that
the graphs take and give what the manifest says.
"""
from __future__ import annotations

import numbers
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from ez_robot.action_modes import ActionSpec
from ez_robot.errors import BundleError, ConfigError, ObservationError
from ez_robot.export.bundle import GRAPHS, INITIAL, MANIFEST_FILE, RECURRENT, Manifest, read_manifest
from ez_robot.mcts import RootOutput, SearchOutput, search

__all__ = ["Policy", "Decision", "Networks", "session_options", "BundleError", "ObservationError", "PRESETS"]

PRESETS = ("latency", "throughput")


@dataclass(frozen=True)
class Decision:
    """One call's decisions for B observations."""

    actions: np.ndarray
    """[B, d] float64 actions within the task's bounds (DMControl, the sampled modes) or [B]
    int64 discrete actions."""
    indices: np.ndarray
    """[B] int64: joint mode, the discrete action indices the search chose (rows of the
    action table); the sampled modes, the chosen candidate's index among the root's."""
    simulations: np.ndarray
    """[B] int32 simulations that ran (fewer than asked when the deadline came first)."""
    root_values: np.ndarray
    """[B] float32 searched value of each root."""
    elapsed_ms: float
    """Wall time of the call: initial inference plus search."""
    search: SearchOutput
    """The full search output (visit counts, Q values, depths)."""
    agent_actions: np.ndarray | None = None
    """[B] indices (joint) or [B, D] float32 vectors in [-1, 1] (the sampled modes): the
    actions as an ez-robot task env takes them (what ``ez-robot run`` steps with)."""


def session_options(preset: str = "latency", threads: int | None = None) -> ort.SessionOptions:
    """onnxruntime settings of a preset.

    ``latency``: one intra-op thread (``threads`` to change), sequential execution, all
    graph optimizations: each recurrent step of a search is a small graph on a small
    batch, where thread hand-offs cost more than they save.  ``throughput``: intra-op
    threads for every core (``threads`` to cap), for large ``act_batch`` calls.
    """
    if preset not in PRESETS:
        raise ConfigError(f"preset must be one of {', '.join(PRESETS)}, got {preset!r}")
    if threads is not None and threads < 1:
        raise ConfigError(f"threads must be >= 1, got {threads}")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.inter_op_num_threads = 1
    options.intra_op_num_threads = threads or (1 if preset == "latency" else os.cpu_count() or 1)
    options.log_severity_level = 3  # warnings about unused initializers are noise here
    # subnormal floats (below 1.2e-38) cost the CPU an assist per operation, and trained
    # weights drift into that range (ez_robot.device.set_threads): computed as zero
    options.add_session_config_entry("session.set_denormal_as_zero", "1")
    return options


class Networks:
    """The two graphs as the search's ``root`` and ``recurrent_fn``, on numpy arrays.

    Hidden states in the search are the tuple ``(latent, lstm_h, lstm_c)``.
    """

    def __init__(self, initial: ort.InferenceSession, recurrent: ort.InferenceSession, lstm_hidden: int,
                 action_spec: ActionSpec | None = None):
        self._initial, self._recurrent, self._lstm_hidden = initial, recurrent, lstm_hidden
        self.action_spec = action_spec
        self._action_dtype = np.float32 if action_spec is not None and action_spec.sampled else np.int64

    def initial(self, observations: np.ndarray) -> list[np.ndarray]:
        """observations [B, *obs] -> hidden, value [B], policy_logits [B, A]."""
        return self._initial.run(None, dict(zip(INITIAL.inputs, (observations,))))

    def recurrent(self, hidden, lstm_h, lstm_c, action, reset) -> list[np.ndarray]:
        """-> next_hidden, next_h, next_c, value_prefix [B], value [B], policy_logits [B, A];
        ``reset`` [B] float32 (1 zeroes that row's LSTM state before the step)."""
        return self._recurrent.run(None, dict(zip(RECURRENT.inputs, (hidden, lstm_h, lstm_c, action, reset))))

    def root(self, observations: np.ndarray) -> RootOutput:
        hidden, value, logits = self.initial(observations)
        batch = len(observations)
        h = np.zeros((batch, self._lstm_hidden), np.float32)
        return RootOutput(hidden=(hidden, h, h.copy()), value_prefix=np.zeros(batch, np.float32),
                          value=value, policy_logits=logits)

    def recurrent_fn(self, hidden, actions: np.ndarray, reset_mask: np.ndarray):
        latent, h, c = hidden
        next_hidden, next_h, next_c, value_prefix, value, logits = self.recurrent(
            latent, h, c, actions.astype(self._action_dtype), reset_mask.astype(np.float32))
        return (next_hidden, next_h, next_c), value_prefix, value, logits


class Policy:
    """A loaded bundle: observations in, actions out, by greedy search on onnxruntime."""

    def __init__(self, manifest: Manifest | dict, networks: Networks, *, num_simulations: int | None = None,
                 deadline_ms: float | None = None, bundle: Path | None = None, seed: int = 0):
        if not isinstance(manifest, Manifest):
            manifest = Manifest.from_json(manifest)
        self._manifest = manifest
        self.manifest = manifest.to_json()
        """The bundle's ``manifest.json`` data, checked (:class:`ez_robot.export.bundle.Manifest`)."""
        self.networks = networks
        self.bundle = bundle
        self.observation_shape = manifest.observation.shape
        self.observation_dtype = np.dtype(manifest.observation.dtype)
        action = manifest.action
        self.action_spec = manifest.action_spec
        """The action mode (:class:`ez_robot.action_modes.ActionSpec`); joint for version 1 bundles."""
        self.num_actions = action.num_actions
        self.continuous = action.kind == "continuous"
        self.action_table = np.asarray(action.table, np.float64) \
            if self.continuous and not self.action_spec.sampled else None
        self.action_low = np.asarray(action.low, np.float64) if self.continuous else None
        self.action_high = np.asarray(action.high, np.float64) if self.continuous else None
        self._search_config = manifest.search.replace(add_noise=False, temperature=0.0)
        if num_simulations is not None:
            self._search_config.replace(num_simulations=num_simulations)  # checked as the config checks it
        self.num_simulations = self._search_config.num_simulations if num_simulations is None else num_simulations
        """Simulations per decision (the trained config's by default)."""
        self.deadline_ms = _checked_deadline_ms(deadline_ms)
        """Default time limit of a decision, or None for none."""
        self.last: Decision | None = None
        """The latest call's :class:`Decision` (simulations run, root values, timing)."""
        self._rng = np.random.default_rng(seed)  # the sampled modes' candidate draws

    @property
    def task(self) -> str:
        return self._manifest.task or ""

    @property
    def observation_layout(self) -> list[dict] | None:
        """Where each sensor reading goes in the observation vector: ``[{"key", "shape",
        "start", "size"}]`` (a Dict observation's keys in order; nested keys joined by
        dots), or None where the task gives a vector already (DMControl, Atari)."""
        return self._manifest.observation.layout

    def flatten(self, observation: dict) -> np.ndarray:
        """A Dict observation (``{"joints": ..., "target": ...}``, raw sensor values) as the
        vector the networks take, in the layout training used."""
        layout = self.observation_layout
        if not layout or (len(layout) == 1 and layout[0]["key"] == ""):
            raise ObservationError("this policy takes one observation vector, not a dict")
        parts = []
        for entry in layout:
            value = observation
            try:
                for key in entry["key"].split("."):
                    value = value[key]
            except (KeyError, TypeError, IndexError):
                raise ObservationError(f"the observation has no {entry['key']!r}; this policy reads "
                                       f"{[e['key'] for e in layout]}") from None
            if "one_hot_start" in entry:  # a Discrete reading
                index = int(value) - entry["one_hot_start"]
                if not 0 <= index < entry["size"]:
                    raise ObservationError(f"observation {entry['key']!r} is {value}, outside its "
                                           f"{entry['size']} values")
                value = np.eye(entry["size"], dtype=np.float32)[index]
            value = np.asarray(value, np.float32).reshape(-1)
            if value.size != entry["size"]:
                raise ObservationError(f"observation {entry['key']!r} has {value.size} values, this policy "
                                       f"takes {entry['size']} (shape {entry['shape']})")
            parts.append(value)
        return np.concatenate(parts)

    @property
    def control_period_s(self) -> float | None:
        """Seconds between decisions the policy was trained for (action repeat included)."""
        return self._manifest.control_period_s

    @classmethod
    def load(cls, bundle: str | Path, *, preset: str = "latency", threads: int | None = None,
             num_simulations: int | None = None, deadline_ms: float | None = None, seed: int = 0) -> "Policy":
        """Loads and checks a bundle directory (see :func:`session_options` for presets);
        ``seed`` seeds the candidate draws of the sampled action modes."""
        bundle = Path(bundle)
        manifest = read_manifest(bundle)
        options = session_options(preset, threads)
        sessions = {}
        for graph in GRAPHS:
            path = bundle / graph.file
            try:
                session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            except Exception as error:  # onnxruntime raises its own exception types
                raise BundleError(f"onnxruntime cannot load {path}: {error}") from None
            names = ([i.name for i in session.get_inputs()], [o.name for o in session.get_outputs()])
            if names != (list(graph.inputs), list(graph.outputs)):
                raise BundleError(f"{path} has inputs {names[0]} and outputs {names[1]}; "
                                  f"an ez-robot bundle's have {list(graph.inputs)} and {list(graph.outputs)}")
            sessions[graph] = session
        _check_graphs(bundle, manifest, sessions)
        networks = Networks(sessions[INITIAL], sessions[RECURRENT], manifest.hidden.lstm_hidden,
                            manifest.action_spec)
        return cls(manifest, networks, num_simulations=num_simulations, deadline_ms=deadline_ms, bundle=bundle,
                   seed=seed)

    # --- deciding ---

    def act(self, observation: np.ndarray, *, num_simulations: int | None = None,
            deadline_ms: float | None = None):
        """One observation (a vector, or the task's Dict of sensor readings) -> its action:
        a float64 vector [d] within the task's bounds (continuous robots) or an int."""
        if isinstance(observation, dict):
            observation = self.flatten(observation)
        observation = np.asarray(observation)
        if observation.shape != self.observation_shape:
            raise ObservationError(f"observation has shape {observation.shape}, this policy takes "
                                   f"{self.observation_shape} (use act_batch for a batch)")
        decision = self.decide(observation[None], num_simulations=num_simulations, deadline_ms=deadline_ms)
        return decision.actions[0] if self.continuous else int(decision.actions[0])

    def act_batch(self, observations: np.ndarray, *, num_simulations: int | None = None,
                  deadline_ms: float | None = None) -> np.ndarray:
        """[B, *obs] observations -> [B, d] continuous or [B] discrete actions, searched together."""
        return self.decide(observations, num_simulations=num_simulations, deadline_ms=deadline_ms).actions

    def decide(self, observations: np.ndarray, *, num_simulations: int | None = None,
               deadline_ms: float | None = None) -> Decision:
        """Searches B observations at once; ``deadline_ms`` counts from this call's start."""
        start = time.perf_counter()
        deadline_ms = _checked_deadline_ms(self.deadline_ms if deadline_ms is None else deadline_ms)
        deadline = None if deadline_ms is None else start + deadline_ms / 1000.0
        out = self.search(observations, num_simulations=num_simulations, deadline=deadline)
        if self.action_spec.sampled:
            normalized = np.clip(out.actions, -1.0, 1.0)
            indices = np.all(out.candidates == out.actions[:, None], axis=2).argmax(axis=1).astype(np.int64)
            actions = self.action_low + (normalized.astype(np.float64) + 1.0) * 0.5 * (self.action_high - self.action_low)
            agent_actions = out.actions
        else:
            indices = agent_actions = out.actions
            actions = self.action_table[indices] if self.continuous else indices
        self.last = Decision(actions=actions, indices=indices, simulations=out.simulations,
                             root_values=out.root_values, elapsed_ms=(time.perf_counter() - start) * 1000.0,
                             search=out, agent_actions=agent_actions)
        return self.last

    def search(self, observations: np.ndarray, *, num_simulations: int | None = None,
               deadline: float | None = None, rng: np.random.Generator | None = None) -> SearchOutput:
        """The greedy search on a checked batch; ``deadline`` is a ``time.perf_counter()``
        value; ``rng`` (default: the policy's own) draws the sampled modes' candidates."""
        observations = self.check_observations(observations)
        n = self.num_simulations if num_simulations is None else num_simulations
        config = self._search_config if n == self._search_config.num_simulations else \
            self._search_config.replace(num_simulations=n)
        return search(self.networks.root(observations), self.networks.recurrent_fn, config,
                      self._rng if rng is None else rng, deadline=deadline, action_spec=self.action_spec)

    def check_observations(self, observations) -> np.ndarray:
        """[B, *obs] in the bundle's dtype, or an :class:`ObservationError` naming the problem.

        States accept any float dtype (cast to float32); pixels must be uint8, because
        the graph divides by 255 and float pixels already scaled would be read wrong.
        """
        observations = np.asarray(observations)
        if observations.ndim != len(self.observation_shape) + 1 or observations.shape[1:] != self.observation_shape:
            raise ObservationError(f"observations have shape {observations.shape}, expected [B, "
                                   f"{', '.join(map(str, self.observation_shape))}]")
        if len(observations) == 0:
            raise ObservationError("observations are an empty batch (B = 0)")
        expected = self.observation_dtype
        if expected == np.uint8:
            if observations.dtype != np.uint8:
                raise ObservationError(f"pixel observations must be uint8 (0-255, scaled inside the network), "
                                       f"got {observations.dtype}")
        else:
            if not np.issubdtype(observations.dtype, np.floating):
                raise ObservationError(f"state observations must be floating point ({expected}), "
                                       f"got {observations.dtype}")
            observations = np.ascontiguousarray(observations, dtype=expected)
            finite = np.isfinite(observations)
            if not finite.all():
                rows = np.flatnonzero(~finite.reshape(len(observations), -1).all(axis=1))
                raise ObservationError(f"observations contain NaN or infinite values (batch rows {rows.tolist()})")
        return observations


def _checked_deadline_ms(deadline_ms):
    """``deadline_ms`` as a float (inf: no limit) or None; NaN, a negative time or a
    non-number is a :class:`ConfigError`: compared with the clock, NaN would never stop a
    search and a negative time would stop it before it starts."""
    if deadline_ms is None:
        return None
    if isinstance(deadline_ms, bool) or not isinstance(deadline_ms, numbers.Real) or not deadline_ms >= 0:
        raise ConfigError(f"deadline_ms must be a time in milliseconds >= 0 (0: no simulation, act on the "
                          f"policy's prior; None: no limit), got {deadline_ms!r}")
    return float(deadline_ms)


# --- checking a bundle's graphs ----------------------------------------------------------

def _check_graphs(bundle: Path, manifest: Manifest, sessions: dict) -> None:
    """The graphs take the observations and give the actions the manifest describes."""
    where = bundle / MANIFEST_FILE
    observation = sessions[INITIAL].get_inputs()[0]
    graph_shape = [n if isinstance(n, int) else None for n in observation.shape[1:]]
    shape = list(manifest.observation.shape)
    if graph_shape != shape:
        raise BundleError(f"{where} says observations have shape {shape}, but {INITIAL.file} takes {graph_shape}: "
                          f"the manifest was edited or belongs to another bundle")
    graph_dtype = {"tensor(float)": "float32", "tensor(uint8)": "uint8"}.get(observation.type, observation.type)
    if graph_dtype != manifest.observation.dtype:
        raise BundleError(f"{where} says observations are {manifest.observation.dtype}, but {INITIAL.file} takes "
                          f"{graph_dtype}")
    spec = manifest.action_spec
    for graph in GRAPHS:
        logits = sessions[graph].get_outputs()[-1].shape[-1]
        if isinstance(logits, int) and logits != spec.policy_size:
            raise BundleError(f"{where} says the actions are {spec.describe()} ({spec.policy_size} policy "
                              f"outputs), but {graph.file} gives {logits}")
    action_input = sessions[RECURRENT].get_inputs()[RECURRENT.inputs.index("action")]
    want = "tensor(float)" if spec.sampled else "tensor(int64)"
    if action_input.type != want:
        raise BundleError(f"{where} says the actions are {spec.describe()}, but {RECURRENT.file} takes "
                          f"actions of type {action_input.type}")
    lstm = sessions[RECURRENT].get_inputs()[RECURRENT.inputs.index("lstm_h")].shape[-1]
    if isinstance(lstm, int) and lstm != manifest.hidden.lstm_hidden:
        raise BundleError(f"{where} says the LSTM has {manifest.hidden.lstm_hidden} units, but "
                          f"{RECURRENT.file} takes {lstm}")
