"""Checkpoints and replay segments carry a SHA-256 of their content, checked on load: a
flipped byte is "corrupt: restore a copy", never wrong weights; a pickle that would run
code is named as such, whatever the installed torch's wording of its refusal; checkpoints
written before the hash still load."""
import hashlib
import os
import zlib

import numpy as np
import pytest
import torch

from ez_robot.checkpoint import HASH_MARK, ReplayFiles, checkpoint_path, load_run, read_checkpoint
from ez_robot.config import ReplayConfig
from ez_robot.errors import RunError
from ez_robot.replay import ReplayBuffer, Segment
from tests.cli_runner import user_error
from tests.test_export import save_checkpoint, tiny_model



@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A run directory with the checkpoint of a tiny CartPole network, and that network."""
    net, config = tiny_model("gym:CartPole-v1")
    return save_checkpoint(tmp_path_factory.mktemp("runs") / "run", net, config), net


def copy_run(saved, tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    checkpoint_path(run).write_bytes(checkpoint_path(saved[0]).read_bytes())
    return run


def test_a_checkpoint_records_the_sha256_of_its_content(saved):
    data = checkpoint_path(saved[0]).read_bytes()
    content, trailer = data[:-(len(HASH_MARK) + 65)], data[-(len(HASH_MARK) + 65):]
    assert trailer == HASH_MARK + hashlib.sha256(content).hexdigest().encode() + b"\n"
    assert (saved[0] / "checkpoints" / "latest.json").read_text().count(hashlib.sha256(content).hexdigest()) == 1
    assert torch.load(checkpoint_path(saved[0]), weights_only=True)["format"] == 2  # torch reads it as it is


def test_a_flipped_byte_in_the_weights_is_corrupt_not_loaded(saved, tmp_path):
    run, net = copy_run(saved, tmp_path), saved[1]
    path = checkpoint_path(run)
    data = bytearray(path.read_bytes())
    weights = next(net.parameters()).detach().numpy().tobytes()
    where = bytes(data).find(weights)
    assert where > 0  # the first layer's weights, stored as they are
    data[where + len(weights) // 2] ^= 0x10  # one bit of one weight
    path.write_bytes(bytes(data))
    with pytest.raises(RunError, match=f"checkpoint {path} is corrupt .*SHA-256.*restore a copy"):
        load_run(run)
    assert "restore a copy" in user_error("eval", run, "--quiet").stderr


def test_a_checkpoint_written_before_the_hash_still_loads(saved, tmp_path):
    """An older checkpoint (torch's bytes alone) is read unchecked, as before."""
    run = copy_run(saved, tmp_path)
    path = checkpoint_path(run)
    path.write_bytes(path.read_bytes()[:-(len(HASH_MARK) + 65)])
    loaded = load_run(run)
    for a, b in zip(loaded.net.parameters(), saved[1].parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


class RunsACommand:
    """A pickled payload as a shared file would carry it: os.system (posix.system) on load."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch '{self.marker}'",)


class Prints:
    def __reduce__(self):
        return print, ("this ran while loading a checkpoint",)


# torch words the two refusals differently: "Trying to load unsupported GLOBAL posix.system
# whose module posix is blocked" and "Unsupported global: GLOBAL builtins.print was not an
# allowed global by default"
@pytest.mark.parametrize("payload", ["system", "print"])
def test_a_pickle_that_would_run_code_is_named_whatever_torchs_wording(tmp_path, payload, capsys):
    marker = tmp_path / "PWNED"
    path = tmp_path / "latest.pt"
    torch.save({"format": 2, "payload": RunsACommand(marker) if payload == "system" else Prints()}, path)
    with pytest.raises(RunError, match="holds Python objects that could run code"):
        read_checkpoint(path)
    assert not marker.exists() and "this ran" not in capsys.readouterr().out


# --- replay segments ---------------------------------------------------------------------

def stored_replay(tmp_path):
    replay = ReplayBuffer(ReplayConfig(capacity=20, min_replay_size=1))
    rng = np.random.default_rng(0)
    replay.add(Segment(frames=rng.normal(size=(11, 4)).astype(np.float32), actions=np.zeros(10, np.int64),
                       rewards=np.ones(10, np.float32), root_values=np.zeros(11, np.float32),
                       policies=np.full((10, 2), 0.5, np.float32), collected_at=np.zeros(10, np.int64),
                       num_own=10, frame_stack=1))
    files = ReplayFiles(tmp_path)
    return replay, files, files.save(replay)


def test_replay_segments_carry_their_sha256_and_a_changed_one_is_corrupt(tmp_path):
    replay, files, state = stored_replay(tmp_path)
    path = files.path(0)
    assert state["checksums"] == ["sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    for use in (lambda: ReplayFiles(tmp_path).check(state), lambda: ReplayFiles(tmp_path).load(replay.config, state)):
        with pytest.raises(RunError, match=f"replay segment {path} .* is corrupt .*restore a copy"):
            use()


def test_replay_segments_of_older_checkpoints_are_checked_by_their_crc32(tmp_path):
    replay, files, state = stored_replay(tmp_path)
    path = files.path(0)
    older = {**state, "checksums": [zlib.crc32(path.read_bytes())]}
    loaded = ReplayFiles(tmp_path).load(replay.config, older)
    np.testing.assert_array_equal(loaded.segments[0].frames, replay.segments[0].frames)
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(RunError, match="is corrupt"):
        ReplayFiles(tmp_path).check(older)
