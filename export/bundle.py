"""The bundle format: the one place that names a bundle's files and graphs and reads and
writes its manifest.  ``docs/bundle_format.md`` is its written spec.

A bundle is a directory of three files: ``initial.onnx`` and ``recurrent.onnx`` (the
networks, :data:`INITIAL` and :data:`RECURRENT` give their input and output names) and
``manifest.json`` (:class:`Manifest`: what the graphs take and give, the search they were
trained with, and each graph's sha256).  The exporter
(:mod:`ez_robot.export.onnx_export`) writes it, the runtime (:mod:`ez_robot.export.runtime`)
reads it; both go through this module.

It imports numpy, the standard library and the search's config, never torch or
onnxruntime: a bundle's manifest can be read and checked anywhere.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ez_robot.action_modes import ActionSpec
from ez_robot.errors import BundleError
from ez_robot.search_config import SearchConfig
__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "READABLE_VERSIONS", "MANIFEST_FILE", "GraphSignature", "INITIAL",
           "RECURRENT", "GRAPHS", "ObservationSection", "HiddenSection", "ActionSection", "Manifest",
           "read_manifest", "file_hashes", "sha256"]

FORMAT_NAME = "ez-robot-bundle"
FORMAT_VERSION = 2
"""Written into every manifest.  Version 2 added the action mode (``action.mode``,
``action.spec``); version 1 bundles are all joint mode and still read."""
READABLE_VERSIONS = (1, 2)
MANIFEST_FILE = "manifest.json"


@dataclass(frozen=True)
class GraphSignature:
    """One ONNX graph of a bundle: its file and the names of its inputs and outputs, in order."""

    file: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


INITIAL = GraphSignature("initial.onnx", ("observation",), ("hidden", "value", "policy_logits"))
"""observation [B, *obs] -> hidden [B, *hidden], value [B], policy_logits [B, P]."""
RECURRENT = GraphSignature("recurrent.onnx", ("hidden", "lstm_h", "lstm_c", "action", "reset"),
                           ("next_hidden", "next_h", "next_c", "value_prefix", "value", "policy_logits"))
"""hidden, lstm_h, lstm_c [B, lstm_hidden], action [B] int64 or [B, D] float32, reset [B]
float32 -> next_hidden, next_h, next_c, value_prefix [B], value [B], policy_logits [B, P]."""
GRAPHS = (INITIAL, RECURRENT)

_REQUIRED = ("format", "format_version", "observation", "hidden", "action", "search", "files")


# --- the manifest ------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class ObservationSection:
    """``manifest["observation"]``: what ``initial.onnx`` takes."""

    shape: tuple[int, ...]
    """One observation's shape (the batch axis not included)."""
    dtype: str
    """``"float32"`` (states) or ``"uint8"`` (pixels, scaled by 1/255 inside the graph)."""
    kind: str | None = None
    """``"state"`` or ``"pixels"``."""
    layout: list[dict] | None = None
    """Where each raw sensor reading goes in the vector (gym: and custom tasks); None where
    the task gives the vector itself."""
    normalized_in_graph: bool | None = None
    """The running observation normalizer is inside the graph (raw sensor values go in)."""

    def to_json(self) -> dict:
        return _drop_none({"shape": list(self.shape), "dtype": self.dtype, "kind": self.kind, "layout": self.layout,
                           "normalized_in_graph": self.normalized_in_graph}, keep=("layout",))


@dataclass(frozen=True, kw_only=True)
class HiddenSection:
    """``manifest["hidden"]``: the hidden state the two graphs pass between them."""

    lstm_hidden: int
    """Units of the value-prefix LSTM (``lstm_h``, ``lstm_c`` are [B, lstm_hidden])."""
    shape: tuple[int, ...] | None = None
    """One hidden state's shape."""

    def to_json(self) -> dict:
        return _drop_none({"shape": None if self.shape is None else list(self.shape),
                           "lstm_hidden": self.lstm_hidden})


@dataclass(frozen=True, kw_only=True)
class ActionSection:
    """``manifest["action"]``: what the search chooses and what the robot gets."""

    kind: str
    """``"discrete"`` (an index goes to the env) or ``"continuous"`` (a vector does)."""
    num_actions: int
    """Joint mode: A, the discrete actions; the sampled modes: the policy head's outputs."""
    mode: str | None = None
    """``joint``, ``factorized`` or ``gaussian`` (version 2)."""
    spec: ActionSpec | None = None
    """The action mode in full (version 2; version 1 bundles are joint mode)."""
    dims: int | None = None
    """Continuous: D, the action vector's length."""
    bins_per_dim: int | None = None
    """Joint mode on a continuous robot: values per dimension."""
    low: tuple[float, ...] | None = None
    """Continuous: the robot's bounds, [D] each."""
    high: tuple[float, ...] | None = None
    values_per_dim: tuple[tuple[float, ...], ...] | None = None
    """Joint mode on a continuous robot: [D, bins_per_dim] values of each dimension."""
    table: tuple[tuple[float, ...], ...] | None = None
    """Joint mode on a continuous robot: [A, D], the vector each index stands for."""

    @property
    def action_spec(self) -> ActionSpec:
        """The action mode; joint with ``num_actions`` actions where the bundle gives none."""
        return self.spec if self.spec is not None else ActionSpec("joint", num_actions=self.num_actions)

    def to_json(self) -> dict:
        return _drop_none({
            "kind": self.kind, "mode": self.mode, "spec": None if self.spec is None else self.spec.state_dict(),
            "num_actions": self.num_actions, "dims": self.dims, "bins_per_dim": self.bins_per_dim,
            "low": _lists(self.low), "high": _lists(self.high), "values_per_dim": _lists(self.values_per_dim),
            "table": _lists(self.table)})


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """``manifest.json``: a bundle's description, checked on reading (:meth:`from_json`).

    Fields are the JSON keys; :meth:`to_json` gives the JSON data back (fields that are
    None and optional are left out, and keys this version does not know are kept)."""

    format: str = FORMAT_NAME
    format_version: int = FORMAT_VERSION
    ez_robot_version: str | None = None
    """The ez-robot that wrote the bundle."""
    torch_version: str | None = None
    """The torch that exported the graphs."""
    opset: int | None = None
    """The graphs' ONNX opset."""
    task: str | None = None
    """The task the networks were trained on (``cartpole_swingup``, ``gym:Hopper-v5``, ...)."""
    checkpoint: str | None = None
    """The checkpoint the weights came from (exported from a run)."""
    counters: dict | None = None
    """That checkpoint's training counters (``agent_steps``, ``env_frames``, ``train_steps``)."""
    observation: ObservationSection
    hidden: HiddenSection
    action: ActionSection
    action_repeat: int | None = None
    """Simulator steps each decision's action is held for."""
    control_period_s: float | None = None
    """Seconds between two decisions (action repeat included); None where the task has no clock."""
    support_size: int | None = None
    """The value support's size in training (the graphs give scalars)."""
    value_prefix: bool | None = None
    """The value-prefix LSTM is on (false: per-step rewards, the state passes through)."""
    search: SearchConfig
    """The search the networks were trained with."""
    config: dict | None = None
    """The run's whole resolved training config."""
    files: dict[str, str]
    """sha256 (hex) of each graph file."""
    validation: dict | None = None
    """The exporter's check against torch (:func:`ez_robot.export.onnx_export.validate`)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Top-level keys this version does not know, kept as they were."""

    def to_json(self) -> dict:
        """The JSON data of ``manifest.json``."""
        data = {"format": self.format, "format_version": self.format_version,
                "ez_robot_version": self.ez_robot_version, "torch_version": self.torch_version, "opset": self.opset,
                "task": self.task, "checkpoint": self.checkpoint, "counters": self.counters}
        data = {**_drop_none(data), **self.extra}
        data.update(observation=self.observation.to_json(), hidden=self.hidden.to_json(),
                    action=self.action.to_json())
        if self.action_repeat is not None:
            data["action_repeat"] = self.action_repeat
        data["control_period_s"] = self.control_period_s
        data.update(_drop_none({"support_size": self.support_size, "value_prefix": self.value_prefix}))
        data["search"] = dataclasses.asdict(self.search)
        if self.config is not None:
            data["config"] = self.config
        data["files"] = dict(self.files)
        if self.validation is not None:
            data["validation"] = self.validation
        return data

    def write(self, directory: Path) -> Path:
        """Writes ``directory/manifest.json``."""
        path = Path(directory) / MANIFEST_FILE
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        return path

    @classmethod
    def from_json(cls, data, path: Path | str = MANIFEST_FILE) -> "Manifest":
        """The manifest of JSON ``data`` read from ``path`` (named in the errors), after
        checking its format, version, and that its fields have the types and ranges the
        runtime relies on: a manifest edited by hand, or from another tool, fails here with
        a :class:`BundleError` rather than deep inside a search."""
        path = Path(path)
        if not isinstance(data, dict) or any(key not in data for key in _REQUIRED):
            missing = [k for k in _REQUIRED if not isinstance(data, dict) or k not in data]
            raise BundleError(f"{path} is not an ez-robot bundle manifest (missing {', '.join(missing)})")
        if data["format"] != FORMAT_NAME:
            raise BundleError(f"{path} has format {data['format']!r}, not {FORMAT_NAME!r}")
        if data["format_version"] not in READABLE_VERSIONS:
            raise BundleError(f"{path.parent} is bundle format version {data['format_version']} (written by "
                              f"ez-robot {data.get('ez_robot_version', '?')}); this runtime reads versions "
                              f"{', '.join(map(str, READABLE_VERSIONS))}: re-export the run with this ez-robot, "
                              f"or run the matching one")

        def bad(what: str) -> BundleError:
            return BundleError(f"{path} is not valid for this runtime: {what}")

        for key in ("files", "observation", "hidden", "action", "search"):
            if not isinstance(data[key], dict):
                raise bad(f"{key!r} must be an object, got {data[key]!r}")
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        return cls(
            **{key: data.get(key) for key in ("ez_robot_version", "torch_version", "opset", "task", "checkpoint",
                                               "counters", "action_repeat", "control_period_s", "support_size",
                                               "value_prefix", "config", "validation")},
            format=data["format"], format_version=data["format_version"],
            observation=_observation(data["observation"], bad), hidden=_hidden(data["hidden"], bad),
            action=_action(data["action"], bad), search=_search(data["search"], path), files=dict(data["files"]),
            extra={key: value for key, value in data.items() if key not in known})

    @property
    def action_spec(self) -> ActionSpec:
        """The action mode (joint for version 1 bundles)."""
        return self.action.action_spec


def _is_count(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 1


def _observation(section: dict, bad) -> ObservationSection:
    shape = section.get("shape")
    if not isinstance(shape, list) or not shape or not all(_is_count(n) for n in shape):
        raise bad(f"observation.shape must be a list of positive whole numbers, got {shape!r}")
    try:
        dtype = np.dtype(section.get("dtype"))
    except TypeError:
        raise bad(f"observation.dtype {section.get('dtype')!r} is not a numpy dtype") from None
    return ObservationSection(shape=tuple(shape), dtype=str(dtype), kind=section.get("kind"),
                              layout=section.get("layout"), normalized_in_graph=section.get("normalized_in_graph"))


def _hidden(section: dict, bad) -> HiddenSection:
    if not _is_count(section.get("lstm_hidden")):
        raise bad(f"hidden.lstm_hidden must be a positive whole number, got {section.get('lstm_hidden')!r}")
    shape = section.get("shape")
    return HiddenSection(lstm_hidden=section["lstm_hidden"], shape=None if shape is None else tuple(shape))


def _action(section: dict, bad) -> ActionSection:
    kind, num_actions = section.get("kind"), section.get("num_actions")
    if kind not in ("discrete", "continuous") or not _is_count(num_actions):
        raise bad(f"action must have kind 'discrete' or 'continuous' and num_actions >= 1, got "
                  f"{kind!r} and {num_actions!r}")
    spec = None
    if "spec" in section:
        try:
            spec = ActionSpec.from_state_dict(section["spec"])
        except (TypeError, ValueError, AttributeError) as error:
            raise bad(f"action.spec is not a valid action mode ({error})") from None
    action_spec = spec if spec is not None else ActionSpec("joint", num_actions=num_actions)
    try:
        low, high = _floats(section.get("low")), _floats(section.get("high"))
        table, values = _rows(section.get("table")), _rows(section.get("values_per_dim"))
    except (TypeError, ValueError):
        raise bad("action.low, action.high, action.table and action.values_per_dim must hold numbers") from None
    if action_spec.sampled:
        if kind != "continuous" or len(low or ()) != action_spec.dims or len(high or ()) != action_spec.dims:
            raise bad(f"a {action_spec.mode} bundle needs kind 'continuous' and action.low and action.high with "
                      f"{action_spec.dims} values each")
        if not all(a <= b for a, b in zip(low, high)):
            raise bad("action.low must not exceed action.high")
    elif kind == "continuous":
        if table is None or len(table) != num_actions or len({len(row) for row in table}) > 1:
            raise bad(f"action.table must have one row per action ({num_actions})")
    return ActionSection(kind=kind, num_actions=num_actions, mode=section.get("mode"), spec=spec,
                         dims=section.get("dims"), bins_per_dim=section.get("bins_per_dim"), low=low, high=high,
                         values_per_dim=values, table=table)


def _search(fields: dict, path: Path) -> SearchConfig:
    try:
        return SearchConfig(**fields)
    except (TypeError, ValueError) as error:
        raise BundleError(f"{path}: the search settings are not valid: {error}") from None


def _floats(values) -> tuple[float, ...] | None:
    return None if values is None else tuple(float(v) for v in values)


def _rows(rows) -> tuple[tuple[float, ...], ...] | None:
    return None if rows is None else tuple(_floats(row) for row in rows)


def _lists(values):
    return None if values is None else [_lists(v) if isinstance(v, tuple) else v for v in values]


def _drop_none(data: dict, keep=()) -> dict:
    return {key: value for key, value in data.items() if value is not None or key in keep}


# --- a bundle's files --------------------------------------------------------------------

def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def file_hashes(directory: Path) -> dict[str, str]:
    """``manifest["files"]``: the sha256 of each graph in ``directory``."""
    return {graph.file: sha256(Path(directory) / graph.file) for graph in GRAPHS}


def read_manifest(bundle: Path | str) -> Manifest:
    """The manifest of a bundle directory, after checking it (:meth:`Manifest.from_json`)
    and that each graph file is there with the sha256 the manifest gives."""
    bundle = Path(bundle)
    if not bundle.is_dir():
        raise BundleError(f"no bundle at {bundle}: expected the directory `ez-robot export` writes")
    path = bundle / MANIFEST_FILE
    if not path.is_file():
        raise BundleError(f"{bundle} has no {MANIFEST_FILE}; is it a bundle that `ez-robot export` wrote?")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise BundleError(f"{path} is corrupt: not valid JSON ({error})") from None
    manifest = Manifest.from_json(data, path)
    for graph in GRAPHS:
        expected = manifest.files.get(graph.file)
        if expected is None:
            raise BundleError(f"{path} lists no hash for {graph.file}")
        if not (bundle / graph.file).is_file():
            raise BundleError(f"{bundle} is missing {graph.file}")
        digest = sha256(bundle / graph.file)
        if digest != expected:
            raise BundleError(f"{bundle / graph.file} does not match the manifest's sha256 (file {digest[:12]}..., "
                              f"manifest {expected[:12]}...): the file was changed or damaged after export")
    return manifest
