"""Loading a run's config: presets, recipes, ``--set`` overrides and budgets.

:func:`load_config` builds the resolved config for a task: the dataclass defaults (the
paper), the task family's preset (``configs/<family>.yaml``: the family is the task
suite's answer), its per-task entries, the budget and seed, the ``--set`` overrides, and
the preset's entries for the action mode ``env.action_mode=auto`` resolves to.  Unknown
keys and bad values fail with a :class:`ConfigError` that names them.  Saved runs load
back through :func:`config_from_dict`.
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
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from ez_robot.config.composed import SECTIONS, TOP_LEVEL, Config
from ez_robot.config.sections import EnvConfig
from ez_robot.config.tasks import absolute_task, make_from_config, resolved_action_mode, task_family, validate_task
from ez_robot.errors import ConfigError
from ez_robot.search_config import SearchConfig

__all__ = ["PRESET_DIR", "RECIPE_DIR", "load_config", "make_env", "parse_budget", "parse_override", "eval_number",
           "recipe_overrides", "with_search_overrides", "search_config", "config_to_dict", "config_from_dict",
           "KWARGS_PREFIX"]

# configs/ in the repository, installed as the data package ez_robot.configs.
PRESET_DIR = Path(str(importlib.resources.files("ez_robot.configs")))
# Named sets of overrides (``--config NAME``), e.g. the settings a published system trains with.
RECIPE_DIR = PRESET_DIR / "recipes"


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
    config = _build(values, preset=path.name)
    if config.train.policy_target == "played" and mode == "joint":
        raise ConfigError("train.policy_target=played needs a sampled action mode (env.action_mode=gaussian or "
                          "factorized); the joint mode's target is the visit distribution: use full or best")
    return config


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
        sections[section] = cls(**kwargs)  # each section checks its values (ConfigError)
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
    every node is its own reset boundary and the tree reads each prediction as a reward;
    and with ``train.policy_target=played`` the search's policy target is the played
    candidate's one-hot."""
    search = config.search.replace(played_policy=config.train.policy_target == "played")
    return search if config.train.value_prefix else search.replace(lstm_horizon=1)


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



def make_env(task: str, *, seed: int | None = None, mode: str = "train", obs: str = "state", **options):
    """Makes a task's env (a ``gymnasium.Env``) with its preset's settings (``configs/``),
    ``options`` overriding any field of :class:`EnvConfig` (``action_repeat=2``,
    ``bins=3``, ``kwargs={...}`` for a factory)."""
    validate_task(task)
    unknown = set(options) - {f.name for f in dataclasses.fields(EnvConfig)}
    if unknown:
        raise TypeError(f"make_env() got unknown option(s) {sorted(unknown)}; options are EnvConfig fields")
    if "task" in options:
        raise TypeError("make_env() takes the task as its first argument, not as an option")
    try:  # as --set overrides: the preset's per-mode settings follow the mode the options give
        overrides = [f"env.{key}={json.dumps(value)}" for key, value in options.items()]
    except TypeError as error:
        raise TypeError(f"make_env() options must be config values (numbers, strings, lists, mappings): {error}") \
            from None
    return make_from_config(load_config(task, obs=obs, overrides=overrides).env, seed=seed, mode=mode)
