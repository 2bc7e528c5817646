"""Test videos with known content, written with PyAV."""

import math
from fractions import Fraction
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


def write_noise_video(
    path: Path, seconds: float, fps: int = 8, width: int = 64, height: int = 48, seed: int = 0
) -> Path:
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


def write_timed_video(
    path: Path,
    pts: list[int],
    time_base: Fraction = Fraction(1, 1000),
    gop: int = 12,
    bframes: int = 0,
    open_gop: bool = False,
    size: int = 32,
    faststart: bool = False,
) -> Path:
    """H.264 frames at the given presentation timestamps (in `time_base` units: irregular gaps make
    a variable-frame-rate file, a first pts of 10 s an offset start), a key frame every `gop` frames
    exactly (no scene-cut key frames), `bframes` forced B-frames, optionally an open GOP. Frames are a
    moving gradient with a brightness that changes per frame, so every frame differs."""
    yy, xx = np.mgrid[0:size, 0:size]
    params = f"keyint={gop}:min-keyint={gop}:scenecut=0:bframes={bframes}:b-adapt=0:open-gop={int(open_gop)}"
    options = {"movflags": "faststart"} if faststart else {}
    with av.open(str(path), mode="w", options=options) as container:
        stream = container.add_stream("libx264", rate=10)
        stream.width = stream.height = size
        stream.pix_fmt = "yuv420p"
        stream.time_base = stream.codec_context.time_base = time_base
        stream.options = {"x264-params": params, "crf": "18"}
        for k, p in enumerate(pts):
            rgb = np.stack([(xx + 5 * k) % 256, (yy + 3 * k) % 256, np.full_like(xx, 40 + 7 * k % 180)], -1)
            rgb = rgb.astype(np.uint8)
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts, frame.time_base = p, time_base
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return path


def full_decode(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, float]:
    """Every frame decoded in order: times (s from the first frame), RGB frames, key-frame flags,
    the header's end (stream start + duration, from the first frame) and the average rate."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        decoded = [
            (float(f.pts * stream.time_base), f.to_ndarray(format="rgb24"), f.key_frame)
            for f in container.decode(stream)
        ]
        end = float((stream.start_time + stream.duration) * stream.time_base)
        rate = float(stream.average_rate)
    first = decoded[0][0]
    times = np.array([t for t, _, _ in decoded]) - first
    assert (np.diff(times) > 0).all()
    return times, np.stack([f for _, f, _ in decoded]), np.array([k for _, _, k in decoded]), end - first, rate


def write_video_with_audio(
    path: Path, video_seconds: float, audio_seconds: float, fps: int = 8, rate: int = 8000
) -> Path:
    """Noise frames (mpeg4) for `video_seconds` and a silent AAC track of `audio_seconds`, as phones
    and screen recorders write when the sound outlasts the picture."""
    rng = np.random.default_rng(0)
    with av.open(str(path), mode="w") as container:
        video = container.add_stream("mpeg4", rate=fps)
        video.width, video.height, video.pix_fmt = 32, 32, "yuv420p"
        audio = container.add_stream("aac", rate=rate, layout="mono")
        for k in range(round(video_seconds * fps)):
            frame = av.VideoFrame.from_ndarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8), format="rgb24")
            frame.pts = k
            container.mux(video.encode(frame))
        container.mux(video.encode(None))
        samples = 1024
        for k in range(math.ceil(audio_seconds * rate / samples)):
            sound = av.AudioFrame.from_ndarray(np.zeros((1, samples), dtype=np.float32), format="fltp", layout="mono")
            sound.sample_rate, sound.pts = rate, k * samples
            container.mux(audio.encode(sound))
        container.mux(audio.encode(None))
    return path


def torchcodec_or_skip() -> None:
    """Skip without torchcodec or FFmpeg's libraries, naming what is missing; under CI (the dev extra and
    .ci/run install both) fail instead."""
    import os

    import pytest

    from lit_retrieval.data.media.torchcodec_decoder import require
    from lit_retrieval.errors import ConfigError

    try:
        require()
    except ConfigError as err:
        if os.environ.get("CI"):
            pytest.fail(str(err))
        pytest.skip(str(err))
