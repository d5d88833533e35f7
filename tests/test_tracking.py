"""What a run shows and mirrors besides its run directory: progress lines where stdout is
not a terminal (a batch job's log), and Weights & Biases (offline) as a tracker that gets
the same metrics, the config and the evaluation videos."""
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

from ez_robot.progress import ProgressDisplay
from ez_robot.schedules import Counters
from tests.cli_runner import user_error
from tests.test_resume import TINY, TINY_ARGS, records


def wandb_records(path: Path) -> list:
    """The records of a W&B run file (``run-<id>.wandb``): a 7-byte header (``:W&B``, magic,
    version), then LevelDB-log chunks in 32 KiB blocks, each with a 7-byte header (CRC-32C,
    length, type: 1 full, 2 first, 3 middle, 4 last) around a serialized ``Record``."""
    from wandb.proto import wandb_internal_pb2

    data, block, found, pending, position = path.read_bytes(), 32768, [], b"", 7
    assert data[:4] == b":W&B"
    while position + 7 <= len(data):
        if block - position % block < 7:  # a block's tail too short for a header is padding
            position += block - position % block
            continue
        _, length, kind = struct.unpack("<IHB", data[position:position + 7])
        if kind == 0:
            break
        pending += data[position + 7:position + 7 + length]
        position += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            found.append(record)
            pending = b""
    return found


def _key(item) -> str:
    return item.key or ".".join(item.nested_key)


def test_progress_lines_say_steps_rates_the_latest_evaluation_and_eta(monkeypatch):
    import ez_robot.progress as progress

    now = [1000.0]
    monkeypatch.setattr(progress.time, "time", lambda: now[0])
    lines = []
    display = ProgressDisplay("lines", every=30, write=lines.append)
    display.start(Counters(agent_steps=100, train_steps=50), budget_steps=1000)
    now[0] += 10
    display.tick(Counters(agent_steps=200, env_frames=400, train_steps=100))
    assert lines == []  # not yet: one line per 30 s
    display.record("eval", Counters(agent_steps=200, env_frames=400, train_steps=100),
                   {"mean": 12.5, "std": 1.0, "returns": [11.5, 13.5]})
    assert "eval at 200 agent steps (400 env frames, 100 training steps): return 12.5 +- 1.0 over 2 episodes" \
        in lines[-1]
    now[0] += 20
    display.tick(Counters(agent_steps=400, env_frames=800, train_steps=200, recent_returns=[20.0, 30.0]))
    line = lines[-1]
    for part in ("400/1000 agent steps (40%)", "800 env frames", "200 training steps", "10.0 agent steps/s",
                 "5.00 training steps/s", "training return 25.0", "last evaluation 12.5 at 200 agent steps",
                 "ETA 0:01:00"):
        assert part in line, (part, line)
    display.tick(Counters(agent_steps=500))
    assert len(lines) == 2  # the next line waits its 30 s


def test_progress_lines_go_on_while_the_learner_catches_up(tmp_path):
    """The replay fills at 100 agent steps and the learner then owes 25 training steps at once:
    the log shows them being taken, not a silence until self-play's next move (a long run's
    catch-up or offline phase can take many minutes)."""
    from ez_robot import trainer
    from ez_robot.config import load_config

    lines = []
    config = load_config("gym:CartPole-v1", budget="120",
                         overrides=[*TINY[1:], "replay.min_replay_size=100", "train.eval_episodes=1"])
    trainer.train(config, tmp_path / "run", device="cpu", eval_interval=1000, checkpoint_interval=1000,
                  progress=ProgressDisplay("lines", every=1e-9, write=lines.append))
    shown = {int(line.split(" training steps")[0].rsplit(" ", 1)[1]) for line in lines if " train: " in line}
    assert set(range(1, 25)) <= shown, sorted(shown)


def test_a_piped_run_logs_progress_and_evaluation_lines_and_mirrors_to_wandb_offline(tmp_path):
    """``> log`` (stdout a pipe): progress lines every --log-every seconds and one per
    evaluation, no progress bar.  ``--wandb`` with WANDB_MODE=offline writes the run's W&B
    file in the run directory: the config, every number metrics.jsonl has (kind/name, against
    env frames), and the video --video records once training is done."""
    run = tmp_path / "run"
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"),
           "WANDB_CACHE_DIR": str(tmp_path / "wandb-cache"), "WANDB_DATA_DIR": str(tmp_path / "wandb-data")}
    out = subprocess.run([sys.executable, "-m", "ez_robot.cli", "train", "--task", "gym:CartPole-v1", "--budget", "120",
                          "--workers", "0", "--run-dir", str(run), "--log-every", "0.05", "--wandb", "--video", "1",
                          *TINY_ARGS], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any(" train: " in line and "/120 agent steps" in line and "agent steps/s" in line and "ETA" in line
               for line in lines), out.stdout
    logged = records(run)
    evals = [r for r in logged if r["kind"] == "eval"]
    assert [line for line in lines if " eval at " in line] and \
        len([line for line in lines if " eval at " in line]) == len(evals)
    assert "━" not in out.stdout  # no bar
    video = next(line.removeprefix("video: ") for line in lines if line.startswith("video: "))
    assert Path(video).is_file()

    files = list((run / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1, list((run / "wandb").rglob("*"))
    found = wandb_records(files[0])
    history = [{_key(item): json.loads(item.value_json) for item in r.history.item} for r in found
               if r.WhichOneof("record_type") == "history"]
    final = evals[-1]
    assert any(h.get("eval/mean") == final["mean"] and h.get("env_frames") == final["env_frames"] for h in history)
    returns = [h["episode/episode_return"] for h in history if "episode/episode_return" in h]
    assert returns == [r["episode_return"] for r in logged if r["kind"] == "episode"]
    config = {_key(item): json.loads(item.value_json) for r in found
              for item in (r.run.config.update if r.WhichOneof("record_type") == "run" else
                           r.config.update if r.WhichOneof("record_type") == "config" else [])}
    assert config["env"]["task"] == "gym:CartPole-v1" and config["train"]["batch_size"] == 8
    assert any(h.get("eval/video._type") == "video-file" and h.get("env_frames") == 120 for h in history)
    assert list((files[0].parent / "files" / "media" / "videos").rglob("*.mp4"))


def test_wandb_missing_is_one_line_naming_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    result = user_error("train", "--task", "gym:CartPole-v1", "--workers", "0", "--wandb", "--run-dir", tmp_path / "r")
    assert "--wandb needs the wandb package, which the track extra installs: pip install 'ez-robot[track]'" \
        in result.output
    assert not (tmp_path / "r").exists()
