"""Replay videos: frames streamed to an mp4 file as they come, so a long episode (an
Atari game of 27k steps) costs no memory.  ``ez-robot eval --video`` and ``ez-robot run
--video`` both write through :class:`VideoWriter`.

imageio drives the ffmpeg binary that imageio-ffmpeg ships; both come with the training
extra (``pip install "ez-robot[train]"``), not with the onboard runtime.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ez_robot.errors import ConfigError

__all__ = ["VideoWriter"]


class VideoWriter:
    """An H.264 mp4 at ``fps`` frames per second, written to ``path`` frame by frame."""

    def __init__(self, path: str | Path, fps: float):
        try:
            import imageio.v2 as imageio
        except ModuleNotFoundError:
            raise ConfigError('videos need imageio and imageio-ffmpeg: pip install "ez-robot[train]"') from None

        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # macro_block_size=1 keeps odd frame sizes (Atari's 210 rows is not a multiple of
        # 16) without resizing; yuv420p plays in every browser and player.
        self._writer = imageio.get_writer(self.path, format="FFMPEG", mode="I", fps=fps, codec="libx264",
                                          macro_block_size=1, pixelformat="yuv420p", output_params=["-crf", "23"])

    def add(self, frame: np.ndarray) -> None:
        """Appends one [H, W, 3] uint8 frame."""
        frame = np.asarray(frame, np.uint8)
        if frame.shape[0] % 2 or frame.shape[1] % 2:  # yuv420p needs even sides
            frame = np.pad(frame, ((0, frame.shape[0] % 2), (0, frame.shape[1] % 2), (0, 0)), mode="edge")
        self._writer.append_data(frame)

    def close(self) -> None:
        """Finishes the file (a second call does nothing)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def abort(self) -> None:
        """Closes and deletes the file."""
        self.close()
        self.path.unlink(missing_ok=True)
