"""PyAV frame sampling: T frames uniformly over a time window, reached by key-frame seeking.

Target times are bin centres, t_i = t0 + (i + 0.5)(t1 - t0)/T, and each target takes the frame
*played at* t_i (the last frame whose timestamp is <= t_i). Reaching a target far ahead of the
decoder seeks to the preceding key frame (`container.seek(backward=True)`) and decodes forward;
targets close behind one another continue the same decode. While approaching a target, packets of
non-reference frames that end before it are not decoded (`skip_frame="NONREF"`): nothing depends on
them, so the sampled frames are identical to a full decode. Frames are indexed by their timestamps,
never by `frame.index` (PyAV issue #1158).

Containers are opened per call, so the sampler is safe inside DataLoader workers.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np

from lit_retrieval.errors import InputError


class VideoDecodeError(InputError, RuntimeError):
    """A video could not be decoded; the message names the file and the reason."""

    def __init__(self, path: str | Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = str(path)
        self.reason = reason


@dataclass
class FrameSample:
    """Sampled frames `[T, H, W, 3]` uint8, their timestamps `[T]` (NaN where padded) and `mask`."""

    frames: np.ndarray
    times: np.ndarray
    mask: np.ndarray


def uniform_times(start: float, end: float, num: int) -> np.ndarray:
    """Bin-centre target times of `num` frames uniformly over `[start, end)`."""
    return start + (np.arange(num) + 0.5) * (end - start) / num


def probe_duration(container: av.container.InputContainer, stream: av.video.stream.VideoStream) -> float | None:
    """Duration in seconds from the container, else the stream header, else None."""
    if container.duration:
        return container.duration / 1e6
    if stream.duration and stream.time_base:
        return float(stream.duration * stream.time_base)
    return None


def video_duration(path: str | Path) -> float:
    """Duration in seconds from the file's header (no decoding); `VideoDecodeError` if unknown."""
    path = Path(path)
    if not path.is_file():
        raise VideoDecodeError(path, "file not found")
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise VideoDecodeError(path, "no video stream")
            duration = probe_duration(container, container.streams.video[0])
    except av.error.FFmpegError as err:
        raise VideoDecodeError(path, f"unreadable ({err})") from None
    if not duration:
        raise VideoDecodeError(path, "duration unknown (no container or stream duration)")
    return duration


def _resize_rgb(frame: av.VideoFrame, size: int | None) -> np.ndarray:
    """RGB array of a frame, short side scaled to `size` and centre-cropped to `size x size`."""
    if size is None:
        return frame.to_ndarray(format="rgb24")
    scale = size / min(frame.width, frame.height)
    width, height = max(size, round(frame.width * scale)), max(size, round(frame.height * scale))
    rgb = frame.reformat(width=width, height=height, format="rgb24").to_ndarray()
    top, left = (height - size) // 2, (width - size) // 2
    return rgb[top : top + size, left : left + size]


class _Decoder:
    """Forward decoding from a seek point, skipping non-reference frames before a target."""

    def __init__(self, container: av.container.InputContainer, stream: av.video.stream.VideoStream) -> None:
        self.container = container
        self.stream = stream
        self.time_base = float(stream.time_base)
        rate = stream.average_rate or stream.guessed_rate
        self.frame_duration = 1.0 / float(rate) if rate else 0.04
        self.skip_before = -math.inf
        self._frames: Iterator[av.VideoFrame] | None = None
        self.pending: av.VideoFrame | None = None

    def seek(self, time: float) -> None:
        self.container.seek(max(0, int(time / self.time_base)), stream=self.stream, backward=True, any_frame=False)
        self._frames = self._decode()
        self.pending = None

    def _decode(self) -> Iterator[av.VideoFrame]:
        codec = self.stream.codec_context
        margin = 2 * self.frame_duration
        for packet in self.container.demux(self.stream):
            ahead = packet.pts is not None and packet.pts * self.time_base < self.skip_before - margin
            codec.skip_frame = "NONREF" if ahead else "DEFAULT"
            yield from codec.decode(packet)
        codec.skip_frame = "DEFAULT"

    def next_frame(self) -> av.VideoFrame | None:
        if self.pending is not None:
            frame, self.pending = self.pending, None
            return frame
        assert self._frames is not None
        for frame in self._frames:
            if frame.time is not None:
                return frame
        return None


def sample_frames(
    path: str | Path,
    num_frames: int,
    start: float | None = None,
    end: float | None = None,
    size: int | None = None,
    seek_threshold: float = 1.0,
    duration: float | None = None,
) -> FrameSample:
    """Sample `num_frames` frames uniformly over `[start, end)` seconds of a video file.

    A target more than `seek_threshold` seconds past the last decoded frame is reached by seeking.
    Targets that fall on the same frame (a window shorter than `num_frames` frames) keep one copy;
    the rest is padded with zeros and `mask=False`. `duration` is a fallback for containers
    without one. Raises `VideoDecodeError` for missing, empty, truncated or undecodable files.
    """
    path = Path(path)
    if num_frames < 1:
        raise ValueError(f"num_frames must be >= 1, got {num_frames}")
    if not path.is_file():
        raise VideoDecodeError(path, "file not found")
    if path.stat().st_size == 0:
        raise VideoDecodeError(path, "file is empty")
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise VideoDecodeError(path, "no video stream")
            stream = container.streams.video[0]
            known = probe_duration(container, stream) or duration
            if not known:
                raise VideoDecodeError(path, "duration unknown (no container or stream duration)")
            t0 = 0.0 if start is None else max(0.0, start)
            t1 = known if end is None else min(end, known)
            if t1 <= t0:
                raise VideoDecodeError(path, f"empty window [{t0}, {t1}] for a {known:.3f} s video")
            frames, times = _collect(container, stream, uniform_times(t0, t1, num_frames), seek_threshold, size, path, known)
    except av.error.FFmpegError as err:
        raise VideoDecodeError(path, f"undecodable ({err})") from None
    return _pad(frames, times, num_frames, size)


def _collect(container, stream, targets, seek_threshold, size, path, known):
    decoder = _Decoder(container, stream)
    frames: list[np.ndarray] = []
    times: list[float] = []
    last: av.VideoFrame | None = None
    for target in targets:
        if last is None or target - last.time > seek_threshold:
            decoder.seek(target)
            last = None
        decoder.skip_before = target
        chosen = _played_at(decoder, last, target)
        if chosen is None:
            raise VideoDecodeError(path, f"no frame decodable at {target:.3f} s")
        if chosen.time + 2 * decoder.frame_duration < min(target, known - decoder.frame_duration):
            raise VideoDecodeError(
                path, f"truncated: frames end at {chosen.time:.3f} s but the container declares {known:.3f} s"
            )
        last = chosen
        if times and abs(chosen.time - times[-1]) < 1e-9:
            continue
        frames.append(_resize_rgb(chosen, size))
        times.append(chosen.time)
    return frames, times


def _played_at(decoder: _Decoder, last: av.VideoFrame | None, target: float) -> av.VideoFrame | None:
    """Advance the decoder to the frame displayed at `target` (the last one with time <= target)."""
    current = last
    while True:
        frame = decoder.next_frame()
        if frame is None:
            return current
        if frame.time > target + 1e-9:
            if current is None:  # seeking landed past the target: take the first frame there
                return frame
            decoder.pending = frame
            return current
        current = frame


def _pad(frames: list[np.ndarray], times: list[float], num_frames: int, size: int | None) -> FrameSample:
    height, width = frames[0].shape[:2]
    out = np.zeros((num_frames, height, width, 3), dtype=np.uint8)
    out_times = np.full(num_frames, np.nan)
    mask = np.zeros(num_frames, dtype=bool)
    n = len(frames)
    out[:n] = np.stack(frames)
    out_times[:n] = times
    mask[:n] = True
    return FrameSample(frames=out, times=out_times, mask=mask)
