"""Test videos with known content, written with PyAV."""

from pathlib import Path

import av
import numpy as np

FPS = 10
COLOURS = [(200, 30, 30), (30, 160, 40), (40, 60, 220), (230, 210, 40), (20, 20, 20)]


def write_shots_video(path: Path, cut_frames: list[int], total: int, size: int = 96) -> None:
    """Solid-colour shots with a moving bar; shot k starts at frame `cut_frames[k - 1]`."""
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("libx264", rate=FPS)
        stream.width = stream.height = size
        stream.pix_fmt = "yuv420p"
        stream.options = {"g": "25", "crf": "20"}
        for k in range(total):
            shot = sum(k >= c for c in cut_frames)
            rgb = np.empty((size, size, 3), dtype=np.uint8)
            rgb[:] = COLOURS[shot % len(COLOURS)]
            bar = (k * 3) % (size - 8)
            rgb[:, bar : bar + 8] = 255 - np.array(COLOURS[shot % len(COLOURS)], dtype=np.uint8)
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts = k
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))


def write_noise_video(path: Path, seconds: float, fps: int = 8, width: int = 64, height: int = 48, seed: int = 0) -> Path:
    """Random-noise frames (mpeg4), `seconds` long."""
    rng = np.random.default_rng(seed)
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for k in range(round(seconds * fps)):
            frame = av.VideoFrame.from_ndarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8), format="rgb24")
            frame.pts = k
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return path
