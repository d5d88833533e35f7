"""Checkpoints of a run, and what resuming from one needs.

``RUN_DIR/checkpoints/`` holds

- ``latest.pt``: model, target and acting networks, optimizer, counters, RNG states, the
  resolved config and metadata (format, ez-robot and torch versions, which trainer);
  written to a temporary name and renamed, so a kill never leaves half a checkpoint;
- ``latest.json``: the same metadata and counters as text, for people and scripts;
- ``replay/segment-<id>.npz``: the replay buffer, one compressed file per segment.
  Segments never change once stored, so each is written once, when the first checkpoint
  after it is taken; the checkpoint itself keeps the priorities and which ids it holds.
  Files of evicted segments are deleted after the checkpoint that no longer needs them.

Both trainers (single-process and Ray) write and read the same format.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

import ez_robot

__all__ = ["CHECKPOINT_FORMAT", "CheckpointError", "checkpoint_path", "write_checkpoint", "read_checkpoint",
           "resume_config", "ReplayFiles"]

CHECKPOINT_FORMAT = 1
"""Bumped only by changes that older readers cannot load; new optional keys keep it."""


class CheckpointError(Exception):
    """A checkpoint that cannot be resumed from (the message says why and what to do)."""


def checkpoint_path(run_dir: Path | str) -> Path:
    return Path(run_dir) / "checkpoints" / "latest.pt"


def metadata(trainer: str) -> dict:
    import torch

    return {"format": CHECKPOINT_FORMAT, "ez_robot_version": ez_robot.__version__, "torch_version": torch.__version__,
            "trainer": trainer, "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def write_checkpoint(run_dir: Path | str, state: dict) -> Path:
    """Writes ``state`` (which carries :func:`metadata`) atomically, then its text metadata."""
    import torch

    path = checkpoint_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)  # a kill never leaves a half-written checkpoint
    info = {key: state.get(key) for key in ("format", "ez_robot_version", "torch_version", "trainer", "written_at",
                                            "counters", "restarts")}
    info["replay_segments"] = len(state["replay"]["priorities"]) if state.get("replay") else 0
    _write_text(path.with_suffix(".json"), json.dumps(info, indent=2) + "\n")
    return path


def read_checkpoint(run_dir: Path | str) -> dict:
    """The checkpoint of a run directory, checked; :class:`CheckpointError` if it cannot be used."""
    import torch

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise CheckpointError(f"{run_dir} is not a directory; give the run directory that `ez-robot train` wrote")
    path = checkpoint_path(run_dir)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}: the run stopped before its first checkpoint, "
                              "so there is nothing to resume; start it again")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # truncated, overwritten, not a torch file...
        raise CheckpointError(f"checkpoint {path} is corrupt and cannot be read ({type(error).__name__}: "
                              f"{str(error)[:200]}); restore a copy of it, or start the run again") from None
    needed = ("format", "config", "model", "target_model", "optimizer", "counters", "obs_shape", "num_actions")
    if not isinstance(state, dict) or any(key not in state for key in needed):
        missing = [key for key in needed if not isinstance(state, dict) or key not in state]
        raise CheckpointError(f"{path} is not an ez-robot training checkpoint (missing: {', '.join(missing)})")
    if state["format"] != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path} has checkpoint format {state['format']!r} (written by ez-robot "
                              f"{state.get('ez_robot_version', '?')}); this ez-robot "
                              f"({ez_robot.__version__}) resumes format {CHECKPOINT_FORMAT} only")
    return state


def resume_config(state: dict, *, budget: str | int | None = None, overrides=()):
    """The saved config of a checkpoint, with a new budget and ``--set`` overrides applied."""
    from ez_robot.config import ConfigError, _parse_override, config_from_dict, parse_budget

    data = {section: dict(value) if isinstance(value, dict) else value for section, value in state["config"].items()}
    changes = [("train.budget", parse_budget(budget))] if budget is not None else []
    changes += [_parse_override(text) for text in overrides]
    for key, value in changes:
        section, _, name = key.partition(".")
        if not name or not isinstance(data.get(section), dict):
            raise ConfigError(f"bad --set {key!r} on resume: write section.key=value, e.g. train.eval_episodes=5")
        data[section][name] = value
    try:
        return config_from_dict(data)
    except ConfigError as error:
        raise ConfigError(f"the run's config with the changes asked for is not valid: {error}") from None


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# --- replay ---------------------------------------------------------------------------

class ReplayFiles:
    """Writes each replay segment once (compressed), and rebuilds a buffer from the files
    and the priorities a checkpoint kept."""

    FIELDS = ("frames", "actions", "rewards", "root_values", "policies", "collected_at")

    def __init__(self, directory: Path | str):
        self.dir = Path(directory)
        self.written: set[int] = set()

    def path(self, segment_id: int) -> Path:
        return self.dir / f"segment-{segment_id:09d}.npz"

    def save(self, replay) -> dict:
        """Writes the segments not yet on disk; returns the state a checkpoint keeps."""
        self.dir.mkdir(parents=True, exist_ok=True)
        first = replay._first_id
        for offset, segment in enumerate(replay.segments):
            segment_id = first + offset
            if segment_id not in self.written:
                tmp = self.dir / f".segment-{segment_id:09d}.tmp.npz"
                np.savez_compressed(tmp, **{name: getattr(segment, name) for name in self.FIELDS},
                                    flags=np.array([segment.num_own, segment.frame_stack, segment.episode_end,
                                                    segment.terminated], np.int64))
                os.replace(tmp, self.path(segment_id))
                self.written.add(segment_id)
        return {"first_id": first, "priorities": [p.copy() for p in replay._priorities],
                "max_priority": replay._max_priority}

    def prune(self, state: dict) -> None:
        """Deletes files of segments evicted before the checkpoint ``state`` was written."""
        for segment_id in [i for i in self.written if i < state["first_id"]]:
            self.path(segment_id).unlink(missing_ok=True)
            self.written.discard(segment_id)

    REMEDY = "resume with --no-replay-checkpoint to start from an empty replay buffer"

    def needed(self, state: dict) -> list[Path]:
        """The segment files the checkpoint ``state`` needs, oldest first."""
        first = int(state["first_id"])
        return [self.path(first + offset) for offset in range(len(state["priorities"]))]

    def check(self, state: dict) -> None:
        """Raises CheckpointError if a segment file the checkpoint needs is missing (cheap:
        before a run starts its workers; :meth:`load` also catches unreadable files)."""
        for path in self.needed(state):
            if not path.is_file():
                raise CheckpointError(f"replay segment {path} that the checkpoint needs is missing; {self.REMEDY}")

    def load(self, config, state: dict):
        """A :class:`ReplayBuffer` as it was at the checkpoint."""
        from ez_robot.replay import ReplayBuffer, Segment

        first, segments = int(state["first_id"]), []
        for path in self.needed(state):
            try:
                with np.load(path) as data:
                    num_own, frame_stack, episode_end, terminated = (int(v) for v in data["flags"])
                    segments.append(Segment(**{name: data[name] for name in self.FIELDS}, num_own=num_own,
                                            frame_stack=frame_stack, episode_end=bool(episode_end),
                                            terminated=bool(terminated)))
            except (OSError, KeyError, ValueError) as error:
                raise CheckpointError(f"replay segment {path} that the checkpoint needs cannot be read "
                                      f"({type(error).__name__}: {str(error)[:200]}); {self.REMEDY}") from None
        self.written.update(range(first, first + len(segments)))
        return ReplayBuffer(config, segments=segments,
                            _priorities=[np.array(p, np.float64) for p in state["priorities"]], _first_id=first,
                            _max_priority=float(state["max_priority"]), _num_moves=sum(s.num_own for s in segments))
