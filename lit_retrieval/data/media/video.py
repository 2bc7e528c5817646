"""PyAV frame sampling over a stream's presentation-time span, reached by key-frame seeking.

Time. Every video is sampled over its real span: from its first frame's presentation timestamp
(PTS) to the moment its last frame stops (last PTS + that frame's duration), both read
from the stream, so a stream that starts at 10 s (a cut) or has a variable frame rate (phones,
screen recorders) is covered uniformly. Window bounds (`start`, `end`) and the returned `times` are
seconds from the first frame, as a player shows them. A file is *truncated* when its header
declares an end far beyond the last frame present (`TRUNCATION_TOLERANCE_S`).

What is sampled is a `SamplingSpec` (all parameters that decide the returned frames, a cache key):
- targets `bin_centres`: T target times t_i = t0 + (i + 0.5)(t1 - t0)/T over the window; each takes
  the frame *played at* t_i (the last frame whose PTS is <= t_i). Targets that fall on the same
  frame keep one copy; the rest is padded (`mask=False`).
- targets `linspace_frames` (Qwen2.5-VL / qwen-vl-utils, as GVE's retriever samples): the frames
  whose PTS lie in [t0, t1] are counted (m, from packet timestamps, no decoding), n = min(T, m)
  rounded down to a multiple of `frame_multiple`, and the frames at indices round(linspace(0, m - 1,
  n)) are taken. `FrameSample.sampled_fps` = n / m x the stream's average rate (qwen-vl-utils'
  `sample_fps`), the spacing the chosen frames really have.
- sampling `exact` decodes the frame at each target: a target far ahead of the decoder seeks to the
  preceding key frame and decodes forward; targets close behind one another continue the same
  decode. Non-reference packets are not decoded when a packet already read lies between them and
  the target (nothing depends on them and they cannot be the frame played at the target), so the
  frames are identical to a full decode, also for VFR, B-frame and open-GOP streams.
- sampling `keyframe` decodes only the key frame at or before each target (one seek and at most one
  decode per target; a key frame shared by consecutive targets is decoded once and repeated).
  Approximate: a frame up to one GOP early, much faster on long GOPs.
- decoder `pyav` decodes as above; any other name is a backend of `decoding.BACKENDS` (`torchcodec`,
  optional: `torchcodec_decoder`), which decodes the same `exact` targets (targets, span and errors still
  come from the packet reads above); torchcodec's frames are identical to PyAV's at the original size.

Seeking lands on the key frame whose *decode* time precedes the target; with B-frames or an open GOP
that frame may be presented after the target, so the sampler then seeks further back. Frames are
indexed by their timestamps, never by `frame.index` (PyAV issue #1158). Containers are opened per
call, so the sampler is safe inside DataLoader workers.

Threads. Decoding and conversion run on one FFmpeg thread each (`pyav_threads`): FFmpeg's thread pools do
not survive a fork, and DataLoader workers are the parallelism. A process decoding alone waited up to 1.9x
longer on 720p than with FFmpeg's pool (docs/datasets.md, "Decoder threads").
"""

from __future__ import annotations

import contextlib
import importlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast

import av
import numpy as np

from lit_retrieval.data.media.decoding import (
    BUILTIN_DECODER,
    BACKENDS,
    Decoder,
    DecoderBackend,
    VideoDecodeError,
    check_decoder,
)
from lit_retrieval.data.media.pyav_threads import decode_on_one_thread, to_rgb
from lit_retrieval.errors import ConfigError

Targets = Literal["bin_centres", "linspace_frames"]
Sampling = Literal["exact", "keyframe"]
TRUNCATION_TOLERANCE_S = 1.0  # a declared end this far (or 2 frame intervals) past the last frame: truncated


__all__ = ["Decoder", "FrameSample", "SamplingSpec", "VideoDecodeError", "decoder_backend", "sample_frames"]


def decoder_backend(name: str) -> DecoderBackend:
    """The backend module of decoder `name` (`decoding.BACKENDS`), imported when first chosen."""
    return cast(DecoderBackend, importlib.import_module(BACKENDS[name]))


@dataclass(frozen=True)
class SamplingSpec:
    """Everything that decides which frames `sample_frames` returns (hashable: a cache key).

    Args:
        num_frames: T, the frames returned (padded with `mask=False` where fewer are distinct).
        size: resize the short side to `size` and centre-crop `size x size` (None: original size).
        targets: `bin_centres` (uniform bin centres in time) or `linspace_frames` (uniform frame
            indices, qwen-vl-utils' rule); see the module docstring.
        sampling: `exact` (the frame at each target) or `keyframe` (the key frame at or before it).
        frame_multiple: `linspace_frames` rounds the frame count down to this multiple
            (Qwen2.5-VL's temporal patch: 2).
        decoder: `pyav`, or a backend of `decoding.BACKENDS` (`exact` sampling only), e.g. `torchcodec`
            (the optional extra): the same frames, decoded by torchcodec.
    """

    num_frames: int
    size: int | None = None
    targets: Targets = "bin_centres"
    sampling: Sampling = "exact"
    frame_multiple: int = 1
    decoder: Decoder = "pyav"

    def __post_init__(self) -> None:
        if self.num_frames < 1:
            raise ConfigError(f"num_frames must be >= 1, got {self.num_frames}")
        if self.size is not None and self.size < 1:
            raise ConfigError(f"size must be >= 1, got {self.size}")
        if self.targets not in ("bin_centres", "linspace_frames"):
            raise ConfigError(f"targets must be 'bin_centres' or 'linspace_frames', got {self.targets!r}")
        if self.sampling not in ("exact", "keyframe"):
            raise ConfigError(f"sampling must be 'exact' or 'keyframe', got {self.sampling!r}")
        if self.frame_multiple < 1:
            raise ConfigError(f"frame_multiple must be >= 1, got {self.frame_multiple}")
        check_decoder(self.decoder, self.sampling)


@dataclass
class FrameSample:
    """Sampled frames `[T, H, W, 3]` uint8, their timestamps `[T]` in seconds from the first frame
    (NaN where padded), `mask` (True for real frames) and `sampled_fps`, the rate the real frames
    represent (`linspace_frames`: n / frames in the window x stream rate; `bin_centres`: real frames
    / window seconds)."""

    frames: np.ndarray
    times: np.ndarray
    mask: np.ndarray
    sampled_fps: float = math.nan


def uniform_times(start: float, end: float, num: int) -> np.ndarray:
    """Bin-centre target times of `num` frames uniformly over `[start, end)`."""
    return start + (np.arange(num) + 0.5) * (end - start) / num


def linspace_indices(count: int, num: int) -> np.ndarray:
    """Indices round(linspace(0, count - 1, num)) of `num` frames spread over `count` (half to even)."""
    return np.round(np.linspace(0, count - 1, num)).astype(int)


def video_duration(path: str | Path) -> float:
    """Seconds of the video stream's span, as the sampler measures it (first frame's PTS to the end
    of the last frame; from packet timestamps, no decoding), so every time below it can be sampled.
    The container's duration is not used: it includes a longer audio track (5.312 s for a 5.280 s
    video stream). `VideoDecodeError` for missing, empty, truncated or unreadable files."""
    path = Path(path)
    with _opened(path, "unreadable") as stream:
        span = _probe_span(stream, path, None)
    return span.end - span.first


@contextlib.contextmanager
def _opened(path: Path, failure: str) -> Iterator[_Stream]:
    """The first video stream of `path`, closed afterwards. A missing or empty file, no video stream
    and FFmpeg's errors while it is open (`failure (error)`) are `VideoDecodeError`s."""
    if not path.is_file():
        raise VideoDecodeError(path, "file not found")
    if path.stat().st_size == 0:
        raise VideoDecodeError(path, "file is empty")
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise VideoDecodeError(path, "no video stream")
            stream = _Stream(container, decode_on_one_thread(container.streams.video[0]))
            try:
                yield stream
            finally:
                stream.close()
    except av.error.FFmpegError as err:
        raise VideoDecodeError(path, f"{failure} ({err})") from None


def _declared_span(
    container: av.container.InputContainer, stream: av.video.stream.VideoStream
) -> tuple[float, float | None]:
    """(start, end) presentation times in seconds the headers declare; the stream's own before
    the container's (which may include a longer audio track); end None if unknown."""
    tb = stream.time_base
    if stream.start_time is not None and tb:
        start = float(stream.start_time * tb)
    else:
        start = (container.start_time or 0) / 1e6
    if stream.duration and tb:
        return start, start + float(stream.duration * tb)
    if container.duration:
        return start, (container.start_time or 0) / 1e6 + container.duration / 1e6
    return start, None


def _resize_rgb(frame: av.VideoFrame, size: int | None) -> np.ndarray:
    """RGB array of a frame, short side scaled to `size` and centre-cropped to `size x size`."""
    if size is None:
        return to_rgb(frame)
    scale = size / min(frame.width, frame.height)
    width, height = max(size, round(frame.width * scale)), max(size, round(frame.height * scale))
    rgb = to_rgb(frame, width, height)
    top, left = (height - size) // 2, (width - size) // 2
    return rgb[top : top + size, left : left + size]


@dataclass
class _Frame:
    time: float  # seconds (absolute presentation time)
    frame: av.VideoFrame


class _Stream:
    """One open video stream: seeking, packet scans and forward decoding, timed by PTS."""

    def __init__(self, container: av.container.InputContainer, stream: av.video.stream.VideoStream) -> None:
        self.container = container
        self.stream = stream
        self.tb = float(stream.time_base)  # float arithmetic: Fraction products cost more than decoding small frames
        rate = stream.average_rate or stream.guessed_rate
        self.rate = float(rate) if rate else None
        self._frames: Iterator[av.VideoFrame] | None = None
        self.pending: _Frame | None = None
        self.target = -math.inf
        self._later: list[float] = []  # times of packets read since the seek that lie after the target
        self._before = -math.inf  # latest time of a packet read since the seek that is <= the target
        self.origin = -math.inf  # no seek goes before this time (the stream's declared start)

    def time_of(self, pts: int) -> float:
        return pts * self.tb

    def seek(self, time: float) -> None:
        """Go to a key frame before `time`, as the demuxer chooses (mp4: by decode time shifted by the
        largest reorder delay); it may still be presented after `time` (see `_seek_at_or_before`)."""
        offset = max(0, round(max(time, self.origin) / self.tb))
        self.container.seek(offset, stream=self.stream, backward=True, any_frame=False)
        self.close()
        self._frames = self._decode()
        self.pending = None
        self._later, self._before = [], -math.inf

    def close(self) -> None:
        """End the running decode. Its generator refers back to this object, a cycle that only the
        garbage collector would free, possibly in a forked DataLoader worker whose copy of FFmpeg's
        decoder threads does not exist (a hang): close it while the container is still open."""
        if self._frames is not None:
            self._frames.close()
        self._frames, self.pending = None, None

    def packets(self) -> Iterator[av.Packet]:
        for packet in self.container.demux(self.stream):
            if packet.pts is not None:
                yield packet

    def set_target(self, target: float) -> None:
        self.target = target
        self._before = max([self._before] + [t for t in self._later if t <= target])
        self._later = [t for t in self._later if t > target]

    def _decode(self) -> Iterator[av.VideoFrame]:
        codec = self.stream.codec_context
        for packet in self.packets():
            time = self.time_of(packet.pts)
            # a later packet at or before the target already read: this one, if non-reference, is not needed
            codec.skip_frame = "NONREF" if time < self._before else "DEFAULT"
            if time <= self.target:
                self._before = max(self._before, time)
            else:
                self._later.append(time)
            yield from codec.decode(packet)
        codec.skip_frame = "DEFAULT"
        yield from codec.decode(None)

    def next_frame(self) -> _Frame | None:
        if self.pending is not None:
            frame, self.pending = self.pending, None
            return frame
        assert self._frames is not None
        for frame in self._frames:
            if frame.pts is not None:
                return _Frame(self.time_of(frame.pts), frame)
        return None

    def key_frame(self, time: float, target: float) -> tuple[float, av.Packet] | None:
        """The latest key-frame packet presented at or before `target`, read (not decoded) after
        seeking to `time`; None if the seek landed past it. Demuxers may land on an earlier key
        frame than the latest (mp4 seeks by decode time shifted by the largest reorder delay)."""
        self.seek(time)
        found = None
        for packet in self.packets():
            when = self.time_of(packet.pts)
            if packet.is_keyframe and when <= target + 1e-9 and (found is None or when > found[0]):
                found = (when, packet)
            if self.time_of(packet.dts if packet.dts is not None else packet.pts) > target + 1e-9:
                break  # decode order: no later packet is presented at or before the target
        return found

    def decode_one(self, packet: av.Packet) -> av.VideoFrame | None:
        """Decode a key-frame packet on its own (the decoder is drained, then reset by the next seek)."""
        codec = self.stream.codec_context
        frames = list(codec.decode(packet)) + list(codec.decode(None))
        return frames[0] if frames else None


@dataclass
class _Span:
    first: float  # absolute PTS (s) of the first frame
    end: float  # absolute time at which the last frame stops


def _tail(packets: Iterator[av.Packet], stream: _Stream, default_duration: float) -> tuple[float, float, float] | None:
    """(last PTS, that packet's end, the latest end of any packet) in seconds; None if no packet.
    Packet durations are decode-time steps, so with B-frames no single one is the last frame's."""
    last = last_end = reach = None
    for packet in packets:
        time = stream.time_of(packet.pts)
        stop = time + (stream.time_of(packet.duration) if packet.duration else default_duration)
        if last is None or time > last:
            last, last_end = time, stop
        reach = stop if reach is None else max(reach, stop)
    return None if last is None else (last, last_end, reach)


def _probe_span(stream: _Stream, path: Path, fallback_duration: float | None) -> tuple[_Span, _Frame]:
    """The stream's real span, read from packet timestamps (nothing is decoded); `VideoDecodeError`
    when truncated.

    The end is the header's (it includes the last frame's duration) when the last packet present is
    presented before it, else the last packet's end. A file is truncated when nothing is left after
    the key frame its index places last, or the packets present reach less far than the declared end
    by more than `TRUNCATION_TOLERANCE_S` (and 2 frame intervals)."""
    declared_start, declared_end = _declared_span(stream.container, stream.stream)
    stream.origin = declared_start
    if declared_end is None and fallback_duration:
        declared_end = declared_start + fallback_duration
    interval = 1.0 / stream.rate if stream.rate else 0.04
    tail = None
    if declared_end is not None:
        stream.seek(declared_end)
        tail = _tail(stream.packets(), stream, interval)
    if tail is None:  # no declared end, or nothing after the last key frame: scan every packet
        stream.seek(declared_start)
        tail = _tail(stream.packets(), stream, interval)
    if tail is None:
        raise VideoDecodeError(path, "no video packets")
    last, last_end, reach = tail
    if declared_end is not None and declared_end - reach > max(TRUNCATION_TOLERANCE_S, 2 * interval):
        ends, declared = reach - declared_start, declared_end - declared_start
        raise VideoDecodeError(path, f"truncated: frames end at {ends:.3f} s but the file declares {declared:.3f} s")
    end = declared_end if declared_end is not None and declared_end > last else last_end
    stream.seek(declared_start)
    first = _first_time(stream)
    if first is None or first >= end:
        raise VideoDecodeError(path, f"no frame before the end at {end - declared_start:.3f} s")
    stream.origin = first
    return _Span(first, end)


def _first_time(stream: _Stream) -> float | None:
    """The earliest PTS among the first packets: read until a packet's decode time passes it (every
    later packet is presented later still)."""
    first = None
    for packet in stream.packets():
        time = stream.time_of(packet.pts)
        first = time if first is None else min(first, time)
        if stream.time_of(packet.dts if packet.dts is not None else packet.pts) >= first:
            break
    return first


def sample_frames(
    path: str | Path,
    num_frames: int,
    start: float | None = None,
    end: float | None = None,
    size: int | None = None,
    seek_threshold: float = 1.0,
    duration: float | None = None,
    *,
    targets: Targets = "bin_centres",
    sampling: Sampling = "exact",
    frame_multiple: int = 1,
    decoder: Decoder = "pyav",
) -> FrameSample:
    """Sample frames over `[start, end)` seconds (from the first frame) of a video; see `SamplingSpec`."""
    spec = SamplingSpec(num_frames, size, targets, sampling, frame_multiple, decoder)
    return sample_video(path, spec, start, end, seek_threshold=seek_threshold, duration=duration)


def sample_video(
    path: str | Path,
    spec: SamplingSpec,
    start: float | None = None,
    end: float | None = None,
    *,
    seek_threshold: float = 1.0,
    duration: float | None = None,
) -> FrameSample:
    """Sample `spec.num_frames` frames of `path` over the window `[start, end)` (seconds from the
    first frame; default the whole stream) as `spec` says.

    `seek_threshold`: in `exact` sampling a target more than this many seconds past the last decoded
    frame is reached by seeking (speed only: the frames are the same). `duration`: the declared
    length for containers whose header has none (used for truncation detection). Raises
    `VideoDecodeError` for missing, empty, truncated or undecodable files and empty windows.
    """
    path = Path(path)
    with _opened(path, "undecodable") as stream:
        span = _probe_span(stream, path, duration)
        length = span.end - span.first
        t0 = 0.0 if start is None else max(0.0, start)
        t1 = length if end is None else min(end, length)
        if t1 <= t0:
            raise VideoDecodeError(path, f"empty window [{t0}, {t1}] for a {length:.3f} s video")
        a0, a1 = span.first + t0, span.first + t1
        if spec.targets == "bin_centres":
            wanted = uniform_times(a0, a1, spec.num_frames)
            fps_scale = None
        else:
            wanted, fps_scale = _linspace_targets(stream, a0, a1, spec, path)
        geometry = (stream.stream.codec_context.width, stream.stream.codec_context.height)
        if spec.decoder != BUILTIN_DECODER:
            chosen = None  # decoded below, by the backend
        elif spec.sampling == "exact":
            chosen = _collect_exact(stream, wanted, seek_threshold, spec.size, path)
        else:
            chosen = _collect_keyframes(stream, wanted, spec.size, path)
    if chosen is None:
        chosen = decoder_backend(spec.decoder).frames_played_at(path, wanted, spec.size, geometry=geometry)
    frames = [rgb for _, rgb in chosen]
    times = [time - span.first for time, _ in chosen]
    sampled_fps = len(frames) * fps_scale if fps_scale is not None else len(frames) / (t1 - t0)
    return _pad(frames, times, spec.num_frames, sampled_fps)


def _linspace_targets(
    stream: _Stream, a0: float, a1: float, spec: SamplingSpec, path: Path
) -> tuple[np.ndarray, float]:
    """PTS of the frames at round(linspace) indices among those in [a0, a1], and the factor that
    turns a frame count into the sampled rate (stream rate / frames in the window)."""
    stream.seek(a0)
    times = []
    for packet in stream.packets():
        time = stream.time_of(packet.pts)
        if a0 - 1e-9 <= time <= a1 + 1e-9:
            times.append(time)
        if stream.time_of(packet.dts if packet.dts is not None else packet.pts) > a1:
            break  # decode order: every later packet is presented after a1 too
    times.sort()
    count = len(times)
    if count == 0:
        raise VideoDecodeError(path, f"no frame in the window [{a0 - stream.origin:.3f}, {a1 - stream.origin:.3f}] s")
    num = min(spec.num_frames, count)
    if num >= spec.frame_multiple:
        num -= num % spec.frame_multiple
    rate = stream.rate or count / max(a1 - a0, 1e-9)
    return np.asarray(times)[linspace_indices(count, num)], rate / count


def _collect_exact(
    stream: _Stream, targets: np.ndarray, seek_threshold: float, size: int | None, path: Path
) -> list[tuple[float, np.ndarray]]:
    """(time, RGB) of the frame played at each target; consecutive targets on one frame keep one copy."""
    chosen: list[tuple[float, np.ndarray]] = []
    last: _Frame | None = None
    for target in targets:
        if last is None or target - last.time > seek_threshold:
            last = _seek_at_or_before(stream, target, path)
        stream.set_target(target)
        last = _played_at(stream, last, target)
        if chosen and abs(last.time - chosen[-1][0]) < 1e-9:
            continue
        chosen.append((last.time, _resize_rgb(last.frame, size)))
    return chosen


def _seek_at_or_before(stream: _Stream, target: float, path: Path) -> _Frame:
    """Seek so that the first decoded frame is at or before `target` (stepping back while a
    B-frame or open-GOP seek point is presented after it); return that frame."""
    step, at = 1.0, target
    while True:
        stream.seek(at)
        stream.set_target(target)
        frame = stream.next_frame()
        if frame is None:
            raise VideoDecodeError(path, f"no frame decodable at {target - stream.origin:.3f} s")
        if frame.time <= target + 1e-9 or at <= stream.origin:
            return frame
        at, step = at - step, step * 2


def _played_at(stream: _Stream, current: _Frame, target: float) -> _Frame:
    """Advance to the frame displayed at `target` (the last one with time <= target)."""
    if current.time > target + 1e-9:  # the first decodable frame, for a target before it
        return current
    while True:
        frame = stream.next_frame()
        if frame is None:
            return current
        if frame.time > target + 1e-9:
            stream.pending = frame
            return current
        current = frame


def _collect_keyframes(
    stream: _Stream, targets: np.ndarray, size: int | None, path: Path
) -> list[tuple[float, np.ndarray]]:
    """(time, RGB) of the key frame at or before each target; a key frame shared by consecutive
    targets is decoded once and repeated."""
    chosen: list[tuple[float, np.ndarray]] = []
    for target in targets:
        step, at = 1.0, target
        while (found := stream.key_frame(at, target)) is None:
            if at <= stream.origin:
                raise VideoDecodeError(path, f"no key frame at or before {target - stream.origin:.3f} s")
            at, step = at - step, step * 2
        time, packet = found
        if chosen and abs(chosen[-1][0] - time) < 1e-9:
            chosen.append(chosen[-1])
            continue
        frame = stream.decode_one(packet)
        if frame is None:
            raise VideoDecodeError(path, f"key frame at {time - stream.origin:.3f} s undecodable")
        chosen.append((time, _resize_rgb(frame, size)))
    return chosen


def _pad(frames: list[np.ndarray], times: list[float], num_frames: int, sampled_fps: float) -> FrameSample:
    height, width = frames[0].shape[:2]
    out = np.zeros((num_frames, height, width, 3), dtype=np.uint8)
    out_times = np.full(num_frames, np.nan)
    mask = np.zeros(num_frames, dtype=bool)
    n = len(frames)
    out[:n] = np.stack(frames)
    out_times[:n] = times
    mask[:n] = True
    return FrameSample(frames=out, times=out_times, mask=mask, sampled_fps=sampled_fps)
