"""The checkpoint file format: the one place that writes and reads it.

``RUN_DIR/checkpoints/`` holds

- ``latest.pt``: what each component of a run gave from its ``state_dict()`` (learner:
  model, target and acting networks, optimizer; counters; replay priorities; actor and
  sampler generators), the resolved config and metadata (format, ez-robot and torch
  versions, which trainer).  It holds tensors and plain data only, and is read with
  ``torch.load(weights_only=True)``: unpickling it cannot run code on the machine that
  loads it.  numpy arrays are stored as tensors tagged ``{"__ndarray__": t}`` and come
  back as arrays.  The file is what ``torch.save`` wrote followed by a one-line trailer
  with the SHA-256 of those bytes (:data:`HASH_MARK`), checked before anything is
  unpickled, so that a damaged file is refused as corrupt rather than loaded with wrong
  weights; ``torch.load`` itself ignores the trailer.  Written to a temporary name and
  renamed, so a kill never leaves half a checkpoint;
- ``latest.json``: the same metadata and counters as text (and the SHA-256), for people
  and scripts;
- ``replay/segment-<id>.npz``: the replay buffer, one compressed file per segment.
  Segments never change once stored, so each is written once, when the first checkpoint
  after it is taken; the checkpoint keeps each file's SHA-256, so a truncated or damaged
  file is found before a run starts.  Files of evicted segments are deleted after the
  checkpoint that no longer needs them.

The hashes find damage (a disk, a copy, a transfer), not tampering: whoever can change a
file can write its hash too.  What keeps a shared checkpoint from running code is that
it is unpickled with ``weights_only=True``, and that its task, when a factory
(``module:factory``), is used only when the user allows it (:func:`load_run`'s
``trust_task``, ``--trust-task``).

Both trainers (single-process and Ray) write and read the same format; :func:`load_run`
gives a run's trained network for evaluation, export and the Python API.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import time
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ez_robot._version import __version__
from ez_robot.errors import ConfigError, RunError

__all__ = ["CHECKPOINT_FORMAT", "HASH_MARK", "checkpoint_path", "write_checkpoint", "read_checkpoint", "resume_config",
           "require_trusted_config", "trained_network", "LoadedRun", "load_run", "ReplayFiles"]

CHECKPOINT_FORMAT = 2
"""Bumped only by changes that older readers cannot load; new optional keys keep it.
Format 1 (the first ez-robot 0.1.0 checkpoints) pickled numpy objects and cannot be read safely."""

HASH_MARK = b"\nez-robot sha256 "
"""What follows ``torch.save``'s bytes in a checkpoint file: this mark, the 64 hex digits
of those bytes' SHA-256 and a newline."""
_TRAILER = len(HASH_MARK) + 65

_NEEDED = ("format", "trainer", "config", "spec", "counters", "learner")
_LEARNER_NEEDED = ("model", "target_model", "acting_model", "optimizer", "train_steps", "versions", "generator")


def checkpoint_path(run_dir: Path | str) -> Path:
    return Path(run_dir) / "checkpoints" / "latest.pt"


# --- writing ---------------------------------------------------------------------------

def write_checkpoint(run_dir: Path | str, *, trainer: str, config, spec, counters, learner: dict,
                     replay: dict | None, actor: dict | None = None, rng: dict | None = None, restarts: int = 0,
                     metrics_bytes: int | None = None) -> Path:
    """Writes a run's checkpoint atomically, then its text metadata.

    ``config`` is a :class:`ez_robot.config.Config`, ``spec`` an
    :class:`ez_robot.builders.EnvSpec`, ``counters`` :class:`ez_robot.schedules.Counters`;
    ``learner``, ``replay`` (what :meth:`ReplayFiles.save` returned) and ``actor`` are
    the components' state dicts; ``rng`` the trainer's own generators."""
    import torch

    from ez_robot.config import config_to_dict

    state = {"format": CHECKPOINT_FORMAT, "ez_robot_version": __version__,
             "torch_version": str(torch.__version__), "trainer": trainer, "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
             "config": config_to_dict(config), "spec": spec.state_dict(),
             "counters": counters.state_dict(), "restarts": int(restarts), "metrics_bytes": metrics_bytes,
             "learner": learner, "replay": replay, "actor": actor, "rng": rng}
    path = checkpoint_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(_to_file(state), buffer)
    content = buffer.getvalue()
    digest = hashlib.sha256(content).hexdigest()
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(content)
        f.write(HASH_MARK + digest.encode() + b"\n")
    os.replace(tmp, path)  # a kill never leaves a half-written checkpoint
    info = {key: state[key] for key in ("format", "ez_robot_version", "torch_version", "trainer", "written_at",
                                        "counters", "restarts")}
    info["sha256"] = digest
    info["replay_segments"] = len(replay["priorities"]) if replay else 0
    _write_text(path.with_suffix(".json"), json.dumps(info, indent=2) + "\n")
    return path


def _to_file(value):
    """numpy arrays -> tagged tensors, numpy scalars -> Python numbers, recursively."""
    import torch

    if isinstance(value, np.ndarray):
        return {"__ndarray__": torch.from_numpy(value.copy())}  # a copy: arrays from Ray are read-only
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {key: _to_file(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_file(item) for item in value)
    return value


def _from_file(value):
    if isinstance(value, dict):
        if set(value) == {"__ndarray__"}:
            return value["__ndarray__"].numpy()
        return {key: _from_file(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_from_file(item) for item in value)
    return value


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# --- reading ---------------------------------------------------------------------------

def read_checkpoint(where: Path | str) -> dict:
    """The checkpoint of a run directory (or a checkpoint file), checked; :class:`RunError`
    naming the problem and what to do if it cannot be used.

    A file whose SHA-256 trailer does not match its content is corrupt.  A file without
    the trailer (written by ez-robot before checkpoints carried it, or re-saved by hand
    with ``torch.save``) is read as before, unchecked: refusing it would strand runs that
    load correctly, and the hash guards against damage, not against a changed file (its
    author can write a matching hash), so skipping it weakens no safety guarantee."""
    import torch

    where = Path(where)
    if where.is_file():
        path = where
    elif not where.is_dir():
        raise RunError(f"{where} is not a directory; give the run directory that `ez-robot train` wrote")
    else:
        path = checkpoint_path(where)
        if not path.is_file():
            found = sorted(p.name for p in path.parent.glob("*.pt")) if path.parent.is_dir() else []
            hint = f" (checkpoints there: {', '.join(found)})" if found else \
                ": the run has not saved a checkpoint yet, so there is nothing to resume or evaluate"
            raise RunError(f"no checkpoint at {path}{hint}")
    corrupt = f"checkpoint {path} is corrupt and cannot be read"
    remedy = "restore a copy of it, or start the run again"
    try:
        content = path.read_bytes()
    except OSError as error:
        raise RunError(f"cannot read the checkpoint {path}: {error.strerror}") from None
    content, digest = _split_trailer(content)
    if digest is not None and hashlib.sha256(content).hexdigest() != digest:
        raise RunError(f"{corrupt}: its content differs from the SHA-256 recorded when it was written; {remedy}")
    try:
        with warnings.catch_warnings():  # torch warns about odd pickle bytes before it refuses them
            warnings.simplefilter("ignore")
            state = torch.load(io.BytesIO(content), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        if _refused_objects(error):
            raise RunError(f"{path} holds Python objects that could run code when unpickled (classes or "
                           "functions, not only tensors and plain data), so it was not loaded; ez-robot reads only "
                           f"checkpoints it wrote itself (format {CHECKPOINT_FORMAT}). If it came from an older "
                           "ez-robot you trust, evaluate or export it there") from None
        raise RunError(f"{corrupt} ({_first_line(error)}); {remedy}") from None
    except Exception as error:  # truncated, overwritten, not a torch file...
        raise RunError(f"{corrupt} ({type(error).__name__}: {_first_line(error)}); {remedy}") from None
    if not isinstance(state, dict) or "format" not in state:
        raise RunError(f"{path} is not an ez-robot training checkpoint")
    if state["format"] != CHECKPOINT_FORMAT:
        raise RunError(f"{path} has checkpoint format {state['format']!r} (written by ez-robot "
                       f"{state.get('ez_robot_version', '?')}); this ez-robot ({__version__}) reads "
                       f"format {CHECKPOINT_FORMAT} only")
    missing = [key for key in _NEEDED if key not in state]
    missing += [f"learner.{key}" for key in _LEARNER_NEEDED if isinstance(state.get("learner"), dict)
                and key not in state["learner"]]
    if missing:
        raise RunError(f"{path} is not an ez-robot training checkpoint (missing: {', '.join(missing)})")
    state = _from_file(state)
    state["path"] = str(path)
    return state


def _split_trailer(data: bytes) -> tuple[bytes, str | None]:
    """(torch's bytes, the recorded SHA-256 hex digest), or (data, None) without a trailer."""
    trailer = data[-_TRAILER:]
    if len(data) > _TRAILER and trailer.startswith(HASH_MARK) and trailer.endswith(b"\n"):
        digest = trailer[len(HASH_MARK):-1]
        if all(c in b"0123456789abcdef" for c in digest):
            return data[:-_TRAILER], digest.decode()
    return data, None


def _refused_objects(error: pickle.UnpicklingError) -> bool:
    """Whether torch's weights-only unpickler refused a class or function (rather than
    bytes it could not parse).  Its wording changes between torch versions ("Unsupported
    global: GLOBAL builtins.print", "unsupported GLOBAL posix.system whose module posix is
    blocked", "Trying to call reduce for unrecognized function"), so any of the words
    those messages share counts, in any case."""
    text = str(error).lower()
    return any(word in text for word in ("global", "reduce", "can only build", "new object"))


def _first_line(error: BaseException) -> str:
    """The gist of a loading error: torch's unpickler error without the advice around it."""
    text = str(error)
    if "WeightsUnpickler error:" in text:
        text = text.split("WeightsUnpickler error:", 1)[1].strip().split("\n", 1)[0]
    return " ".join(text.split())[:200]


def require_trusted_config(state: dict, trusted: bool, also: str = "") -> None:
    """:class:`ez_robot.errors.UntrustedTaskError` unless the checkpoint's task may be used:
    a registered task, or a factory task the user allowed (``trusted``); see
    :func:`ez_robot.envs.require_trusted_task`."""
    from ez_robot.envs import require_trusted_task

    env = saved_config(state).env
    require_trusted_task(env.task, env.kwargs, trusted=trusted, origin=f"the saved config of {state['path']}",
                         also=also)


def saved_config(state: dict):
    """The resolved config a checkpoint was written with."""
    from ez_robot.config import config_from_dict

    try:
        return config_from_dict(state["config"])
    except ConfigError as error:
        raise RunError(f"the config saved in {state['path']} is not valid for this ez-robot: {error}") from None


def resume_config(state: dict, *, budget: str | int | None = None, overrides=()):
    """The saved config of a checkpoint, with a new budget and ``--set`` overrides applied."""
    from ez_robot.config import parse_override, config_from_dict, parse_budget

    data = {section: dict(value) if isinstance(value, dict) else value for section, value in state["config"].items()}
    changes = [("train.budget", parse_budget(budget))] if budget is not None else []
    changes += [parse_override(text) for text in overrides]
    for key, value in changes:
        section, _, name = key.partition(".")
        if not name or not isinstance(data.get(section), dict):
            raise ConfigError(f"bad --set {key!r} on resume: write section.key=value, e.g. train.eval_episodes=5")
        if key in ("env.task", "env.obs") and value != data["env"][name]:
            raise ConfigError(f"--set {key}={value} differs from the run's {name} {data['env'][name]}; a resumed "
                              "run keeps it")
        data[section][name] = value
    try:
        return config_from_dict(data)
    except ConfigError as error:
        raise ConfigError(f"the run's config with the changes asked for is not valid: {error}") from None


def trained_network(state: dict, device="cpu"):
    """The learner's network of a checkpoint, in eval mode on ``device``; returns (net, config)."""
    from ez_robot.builders import EnvSpec, make_model

    config = saved_config(state)
    net = make_model(config, EnvSpec.from_state_dict(state["spec"]))
    try:
        net.load_state_dict(state["learner"]["model"])
    except (RuntimeError, ValueError, KeyError) as error:
        raise RunError(f"the weights in {state['path']} do not fit the network its config describes: "
                       f"{' '.join(str(error).split())[:400]}") from None
    return net.to(device).eval(), config


@dataclass
class LoadedRun:
    run_dir: Path
    checkpoint: Path
    config: object          # ez_robot.config.Config
    net: object             # EfficientZeroNet, eval mode, on the requested device
    counters: dict


def load_run(run_dir: str | Path, checkpoint: str | Path | None = None, device="cpu", *,
             trust_task: bool = False) -> LoadedRun:
    """The trained network of a run directory (its latest checkpoint, or ``checkpoint``);
    :class:`ez_robot.errors.RunError` naming the problem when it cannot be used.

    A run whose task is a factory (``module:factory``, ``file.py:factory``) is refused
    (:class:`ez_robot.errors.UntrustedTaskError`) unless ``trust_task``: whoever made
    the env from it would import and call code the run's files name, and a run directory
    may come from someone else."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunError(f"{run_dir} is not a directory; give the run directory that `ez-robot train` wrote")
    if checkpoint is not None and not Path(checkpoint).is_file():
        raise RunError(f"no checkpoint file at {checkpoint}")
    state = read_checkpoint(checkpoint if checkpoint is not None else run_dir)
    require_trusted_config(state, trust_task)
    net, config = trained_network(state, device)
    return LoadedRun(run_dir, Path(state["path"]), config, net, dict(state["counters"]))


# --- replay ----------------------------------------------------------------------------

class ReplayFiles:
    """Writes each replay segment once (compressed), and rebuilds a buffer from the files
    and the state a checkpoint kept.

    The checkpoint keeps each file's ``"sha256:<hex digest>"``; checkpoints written before
    segments carried a SHA-256 keep a CRC-32 (an int), which is still checked."""

    FIELDS = ("frames", "actions", "rewards", "root_values", "policies", "collected_at")
    REMEDY = "resume with --no-replay-checkpoint to start from an empty replay buffer"

    def __init__(self, directory: Path | str):
        self.dir = Path(directory)
        self.checksums: dict[int, str | int] = {}  # segment id -> digest of its file, for the ids written

    def path(self, segment_id: int) -> Path:
        return self.dir / f"segment-{segment_id:09d}.npz"

    def save(self, replay) -> dict:
        """Writes the segments not yet on disk; returns the replay's state with each file's
        SHA-256 (what the checkpoint keeps)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        state = replay.state_dict()
        for segment_id, segment in zip(range(state["first_id"], state["first_id"] + len(replay.segments)),
                                       replay.segments):
            if segment_id not in self.checksums:
                tmp = self.dir / f".segment-{segment_id:09d}.tmp.npz"
                extra = {} if segment.candidates is None else {"candidates": segment.candidates}
                np.savez_compressed(tmp, **{name: getattr(segment, name) for name in self.FIELDS}, **extra,
                                    flags=np.array([segment.num_own, segment.frame_stack, segment.episode_end,
                                                    segment.terminated], np.int64))
                self.checksums[segment_id] = _digest(tmp.read_bytes())
                os.replace(tmp, self.path(segment_id))
        ids = range(state["first_id"], state["first_id"] + len(state["priorities"]))
        return {**state, "checksums": [self.checksums[i] for i in ids]}

    def prune(self, state: dict) -> None:
        """Deletes files of segments evicted before the checkpoint ``state`` was written."""
        for segment_id in [i for i in self.checksums if i < state["first_id"]]:
            self.path(segment_id).unlink(missing_ok=True)
            del self.checksums[segment_id]

    def _needed(self, state: dict) -> list[tuple[int, Path, str | int]]:
        first = int(state["first_id"])
        return [(first + offset, self.path(first + offset), digest if isinstance(digest, str) else int(digest))
                for offset, digest in enumerate(state["checksums"])]

    def _read(self, path: Path, recorded: str | int) -> bytes:
        """The file's bytes; :class:`RunError` if it is missing or differs from ``recorded``."""
        if not path.is_file():
            raise RunError(f"replay segment {path} that the checkpoint needs is missing; {self.REMEDY}")
        data = path.read_bytes()
        if _digest(data, like=recorded) != recorded:
            raise RunError(f"replay segment {path} that the checkpoint needs is corrupt (its content differs from "
                           f"the hash recorded when it was written); restore a copy of it, or {self.REMEDY}")
        return data

    def check(self, state: dict) -> None:
        """:class:`RunError` if a segment file the checkpoint needs is missing, truncated or
        changed (its hash differs): before a run starts."""
        for _, path, recorded in self._needed(state):
            self._read(path, recorded)

    def load(self, config, state: dict):
        """A :class:`ReplayBuffer` as it was at the checkpoint (each file checked on the way)."""
        from ez_robot.replay import ReplayBuffer, Segment

        segments = []
        for segment_id, path, recorded in self._needed(state):
            data = self._read(path, recorded)
            try:
                with np.load(io.BytesIO(data), allow_pickle=False) as data:
                    num_own, frame_stack, episode_end, terminated = (int(v) for v in data["flags"])
                    candidates = data["candidates"] if "candidates" in data.files else None
                    segments.append(Segment(**{name: data[name] for name in self.FIELDS}, num_own=num_own,
                                            frame_stack=frame_stack, episode_end=bool(episode_end),
                                            terminated=bool(terminated), candidates=candidates))
            except Exception as error:  # a file that passed its hash but is not a segment of ours
                raise RunError(f"replay segment {path} that the checkpoint needs cannot be read "
                               f"({type(error).__name__}: {str(error)[:200]}); {self.REMEDY}") from None
            self.checksums[segment_id] = recorded
        return ReplayBuffer.from_state_dict(config, state, segments)


def _digest(data: bytes, like: str | int = "") -> str | int:
    """``"sha256:<hex>"`` of ``data``; its CRC-32 where ``like`` is one (an older checkpoint's)."""
    if isinstance(like, int):
        return zlib.crc32(data)
    return "sha256:" + hashlib.sha256(data).hexdigest()
