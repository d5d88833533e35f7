"""Evaluation of trained runs: greedy-search episodes, scores and replay videos.

:func:`play` runs whole episodes in eval-mode envs (Atari: no life-loss terminal, raw
game scores; DMC: the full time limit), every episode's decision batched into one
search, with no root noise and temperature 0.  Training's periodic evaluation,
``ez-robot eval`` and :func:`ez_robot.evaluate` all call it.  Its envs have self-play's
fault guard (:class:`ez_robot.envs.guard.RemakeOnError`): an episode whose env raises is
played again on a new env and counted in ``failed_episodes``; more failures in a row
than ``env.max_failures_in_a_row`` stop the evaluation with the env's error.

:func:`evaluate_run` loads a run directory's checkpoint (from the single-process or the
Ray trainer: they save the same format), plays, and writes its report and, when asked,
mp4 replays.  ``eval.json`` is the run's own score (the latest checkpoint, the search it
trained with), which ``ez-robot report`` reads; an evaluation with other search settings
or another checkpoint writes ``eval-<label>.json`` beside it (:func:`report_path`), so an
experiment never replaces that score.
"""
from __future__ import annotations

import functools
import glob
import os
import re
import socket
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np
import yaml

from ez_robot.checkpoint import checkpoint_path, load_run
from ez_robot.errors import ConfigError, RunError
from ez_robot.run_files import strict_json
from ez_robot.video import VideoWriter

__all__ = ["play", "evaluate", "evaluate_run", "report_path", "human_normalized", "atari_reference_scores"]


# --- reference scores ------------------------------------------------------------------

@functools.cache
def atari_reference_scores() -> dict[str, dict[str, float]]:
    """``{"random": {game: score}, "human": {game: score}}`` from the paper's table."""
    text = resources.files("ez_robot.configs").joinpath("scores", "atari.yaml").read_text()
    return yaml.safe_load(text)


def human_normalized(task: str, score: float) -> float | None:
    """(score - random) / (human - random) for an Atari 100k game; None for other tasks."""
    if not task.startswith("atari:"):
        return None
    scores, game = atari_reference_scores(), task[len("atari:"):]
    if game not in scores["human"]:
        return None
    low, high = scores["random"][game], scores["human"][game]
    return (score - low) / (high - low)


# --- playing episodes ------------------------------------------------------------------

def video_fps(env, config) -> float:
    """Frames per second of a replay that shows one frame per agent decision in real time."""
    from ez_robot.envs import control_period

    period = control_period(env, config.env)
    return 1.0 / period if period else 30.0


@dataclass
class Episodes:
    returns: list[float]
    lengths: list[int]
    videos: list[Path]
    successes: list[bool] | None = None
    """``info["is_success"]`` at each episode's last step, where the env reports it (the
    Gymnasium-Robotics convention); None otherwise."""
    env_errors: list[str] = field(default_factory=list)
    """The errors of the episodes whose env raised: each was played again on a new env (with
    another seed), so ``returns`` still holds one return per episode asked for."""


def play(net, config, device, episodes: int, seed: int, *, record: int = 0, video_dir: Path | None = None,
         progress: bool = False) -> Episodes:
    """``episodes`` eval-mode episodes with greedy search, seeded ``seed, seed + 1, ...``.

    The first ``record`` episodes are written to ``video_dir`` as mp4 while they play
    (frames stream to the encoder, so an Atari game of 27k steps costs no memory);
    each file is named after its episode and return when the episode ends.
    """
    from ez_robot.envs import render_frame
    from ez_robot.envs.guard import ENV_ERROR, RemakeOnError
    from ez_robot.config import search_config
    from ez_robot.inference import run_search
    from ez_robot.torch_inference import TorchInference

    if episodes < 1:
        raise ConfigError(f"episodes must be >= 1, got {episodes}")
    inference = TorchInference(net, device)
    greedy = search_config(config).replace(add_noise=False, temperature=0.0)
    make = functools.partial(_make_eval_env, config.env)
    envs = [RemakeOnError(make, seed + i, config.env.max_failures_in_a_row, name=config.env.task)
            for i in range(episodes)]
    observations = [env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]
    writers = {i: _EpisodeVideo(video_dir, i, render_frame(envs[i]), video_fps(envs[i], config))
               for i in range(min(record, episodes))}
    returns, lengths, done = np.zeros(episodes), np.zeros(episodes, int), np.zeros(episodes, bool)
    successes: list = [None] * episodes
    videos: list[Path] = []
    errors: list[str] = []
    rng = np.random.default_rng(seed)
    net.eval()
    bar = _progress_bar(progress, episodes)
    try:
        while not done.all():
            live = np.flatnonzero(~done)
            out = run_search(inference, np.stack([observations[i] for i in live]), greedy, rng)
            for i, action in zip(live, out.actions):
                action = int(action) if out.candidates is None else action  # an index, or a vector
                obs, reward, terminated, truncated, info = envs[i].step(action)
                if ENV_ERROR in info:  # the env was made again: this episode starts over on it
                    errors.append(info[ENV_ERROR])
                    observations[i] = envs[i].reset()[0]
                    returns[i], lengths[i], successes[i] = 0.0, 0, None
                    if i in writers:
                        writers[i].abort()
                        writers[i] = _EpisodeVideo(video_dir, i, render_frame(envs[i]), video_fps(envs[i], config))
                    continue
                if "is_success" in info:
                    successes[i] = bool(info["is_success"])
                returns[i] += reward
                lengths[i] += 1
                observations[i] = obs
                if i in writers:
                    writers[i].add(render_frame(envs[i]))
                if terminated or truncated:
                    done[i] = True
                    if i in writers:
                        videos.append(writers.pop(i).finish(returns[i]))
                    if bar is not None:
                        bar.update(bar.task_ids[0], advance=1)
    finally:
        for writer in writers.values():  # interrupted: drop half-written videos
            writer.abort()
        for env in envs:
            env.close()
        if bar is not None:
            bar.stop()
    reported = [s for s in successes if s is not None]
    return Episodes(returns.tolist(), lengths.tolist(), videos,
                    [bool(s) for s in successes] if len(reported) == episodes else None, errors)


def _make_eval_env(env_config, seed: int):
    from ez_robot.envs import make_from_config

    return make_from_config(env_config, seed=seed, mode="eval")


def evaluate(net, config, device, episodes: int) -> dict:
    """The periodic evaluation during training: ``episodes`` greedy episodes from the
    run's evaluation seeds; returns mean, std and the returns, and where an env raised,
    ``failed_episodes`` and their ``env_errors`` (absent otherwise: a healthy run's metrics
    stay as they were)."""
    from ez_robot.schedules import eval_seed

    start = time.perf_counter()
    result = play(net, config, device, episodes, eval_seed(config))
    returns = result.returns
    out = {"mean": float(np.mean(returns)), "std": float(np.std(returns)), "returns": returns,
           "seconds": time.perf_counter() - start}
    if result.successes is not None:
        out["success_rate"] = float(np.mean(result.successes))
    if result.env_errors:
        out.update(failed_episodes=len(result.env_errors), env_errors=result.env_errors)
    return out


class _EpisodeVideo:
    """One episode's mp4, written under a temporary name and renamed after its return when
    the episode ends (an interrupted evaluation leaves no video behind)."""

    def __init__(self, directory: Path, episode: int, first_frame: np.ndarray, fps: float):
        self.directory, self.episode = directory, episode
        self.writer = VideoWriter(directory / f".episode-{episode:03d}.partial.mp4", fps)
        self.add(first_frame)

    def add(self, frame: np.ndarray) -> None:
        self.writer.add(frame)

    def finish(self, episode_return: float) -> Path:
        self.writer.close()
        final = self.directory / f"episode-{self.episode:03d}-return-{episode_return:.1f}.mp4"
        os.replace(self.writer.path, final)
        return final

    def abort(self) -> None:
        self.writer.abort()


def _progress_bar(enabled: bool, episodes: int):
    if not enabled:
        return None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("[bold]eval"), BarColumn(), MofNCompleteColumn(), TextColumn("episodes"),
                   TimeElapsedColumn())
    bar.start()
    bar.add_task("eval", total=episodes)
    return bar


# --- ez-robot eval ---------------------------------------------------------------------

def summarize(task: str, returns: list[float], successes: list[bool] | None = None) -> dict:
    """Mean, std, min, max of raw returns; for Atari 100k games also the human-normalized
    mean; the success rate where the env reports ``is_success``."""
    r = np.asarray(returns, np.float64)
    summary = {"episodes": len(r), "mean": float(r.mean()), "std": float(r.std()), "min": float(r.min()),
               "max": float(r.max())}
    if successes is not None:
        summary["success_rate"] = float(np.mean(successes))
    normalized = human_normalized(task, summary["mean"])
    if normalized is not None:
        summary["human_normalized"] = normalized
    return summary


def report_path(run_dir: Path, search_overrides=(), checkpoint: str | None = None) -> Path:
    """Where an evaluation's report goes by default: ``RUN_DIR/eval.json`` for the run as it
    trained (its latest checkpoint, no ``--set``); otherwise ``eval-<label>.json``, the label
    naming the checkpoint (``step30000``: its training steps) and each search override, e.g.
    ``eval-step30000-num_simulations=8.json``."""
    parts = [item.strip().removeprefix("search.") for item in search_overrides]
    parts = [re.sub(r"[^A-Za-z0-9._=+-]", "_", part) for part in ([checkpoint] if checkpoint else []) + parts]
    return run_dir / ("eval.json" if not parts else f"eval-{'-'.join(parts)}.json")


def _is_latest(run_dir: Path, checkpoint: Path) -> bool:
    latest = checkpoint_path(run_dir)
    return latest.is_file() and checkpoint.resolve() == latest.resolve()


def _temporary_report(out: Path, pid: int) -> Path:
    """Where an evaluation writes its report before renaming it to ``out``: named by host
    and process, so evaluations of one run on several machines never share it."""
    return out.parent / f".{out.name}.{socket.gethostname()}.{pid}.tmp"


def _remove_stale_temporaries(out: Path) -> None:
    """Removes the temporaries of ``out`` that evaluations on this host left behind when
    they were killed (their process is gone); another host's, or a running evaluation's, stay."""
    ours = re.compile(rf"\.{re.escape(out.name)}\.{re.escape(socket.gethostname())}\.(\d+)\.tmp")  # not "host.domain.PID"
    for path in out.parent.glob(f".{glob.escape(out.name)}.*.tmp"):
        match = ours.fullmatch(path.name)
        if match and path.is_file() and not path.is_symlink() and _process_gone(int(match[1])):
            try:
                path.unlink()
            except OSError:  # a read-only run: the evaluation says so when it writes its own
                pass


def _process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):  # alive under another user; not a pid
        pass
    return False


def evaluate_run(run_dir: str | Path, *, episodes: int | None = None, seed: int = 0, checkpoint=None,
                 video: int = 0, device: str = "auto", progress: bool = True, threads: int = 1,
                 search_overrides: tuple[str, ...] | list[str] = (), out: str | Path | None = None,
                 trust_task: bool = False) -> dict:
    """Evaluates a run's checkpoint; writes the report to ``out`` (default:
    :func:`report_path`, ``RUN_DIR/eval.json`` for the run as trained) and returns it, with
    ``"path"`` naming the file.  ``search_overrides`` (``"search.num_simulations=8"``, ...)
    change the search, not the run; ``trust_task`` allows a factory task
    (:func:`ez_robot.checkpoint.load_run`)."""
    from ez_robot.config import with_search_overrides
    from ez_robot.device import resolve_device, set_threads

    set_threads(threads)
    dev = resolve_device(device)
    run = load_run(run_dir, checkpoint, dev, trust_task=trust_task)
    config = with_search_overrides(run.config, search_overrides)
    episodes = episodes or config.train.eval_episodes
    if video < 0:
        raise ConfigError(f"the number of videos must be >= 0, got {video}")
    if out is None:
        label = None
        if checkpoint is not None and not _is_latest(run.run_dir, run.checkpoint):
            steps = run.counters.get("train_steps")
            label = run.checkpoint.stem if steps is None else f"step{steps}"
        out = report_path(run.run_dir, search_overrides, label)
    out = Path(out)
    if out.is_dir():
        raise RunError(f"{out} is a directory; give the report a file name, e.g. {out / 'eval.json'}")
    if not out.parent.is_dir():
        raise RunError(f"cannot write {out}: no directory {out.parent}")
    _remove_stale_temporaries(out)
    tmp = _temporary_report(out, os.getpid())  # one per process: two evaluations never share one
    try:  # before the episodes, not after them
        open(tmp, "w").close()
    except OSError as error:
        hint = "evaluate a copy of the run in a directory you can write to" if out.parent == run.run_dir else \
            "give --out a file in a directory you can write to"
        raise RunError(f"cannot write {out}: {error.strerror}; {hint}") from None
    start = time.time()
    try:
        result = play(run.net, config, dev, episodes, seed, record=min(video, episodes),
                      video_dir=run.run_dir / "videos", progress=progress)
    except BaseException:  # Ctrl-C, a failing env: no empty file left behind
        tmp.unlink(missing_ok=True)
        raise
    task = config.env.task
    report = {"task": task, "checkpoint": str(run.checkpoint), "seed": seed,
              "search_overrides": list(search_overrides),
              "agent_steps": run.counters.get("agent_steps"), "env_frames": run.counters.get("env_frames"),
              "train_steps": run.counters.get("train_steps"), **summarize(task, result.returns, result.successes),
              "returns": result.returns, "lengths": result.lengths, "videos": [str(v) for v in result.videos],
              "failed_episodes": len(result.env_errors), "env_errors": result.env_errors,
              "wall_seconds": time.time() - start}
    tmp.write_text(strict_json(report, indent=2) + "\n")
    os.replace(tmp, out)
    return {**report, "path": str(out)}
