"""torchcodec as the sampler's decoder (`SamplingSpec.decoder: torchcodec`, `data.decoder` in a config): a
backend of `decoding.BACKENDS`, implementing `decoding.DecoderBackend` (`require`, `frames_played_at`).

`video.sample_video` still reads the span, the targets and the truncation checks from PyAV's packet
timestamps (nothing decoded); this module decodes the frames played at those targets with
`torchcodec.decoders.VideoDecoder(..., seek_mode="exact").get_frames_played_at(seconds)`. In exact
seek mode torchcodec scans the file's packets once, sorts the frames by PTS and returns, for a time
t, the frame whose interval [PTS, next frame's PTS) contains t: the frame `video._played_at` decodes
(the last frame with PTS <= t, to within 1e-9 s, which is added to each target here). torchcodec
refuses times at or past its stream end (the last frame's PTS + duration, a duration that may be 0);
such targets (the PyAV path reaches them when the header declares a longer stream) take the last
frame by index, which PyAV's path returns there too. Consecutive targets on one frame keep one copy,
as in `video._collect_exact`.

At the original size the frames are identical to PyAV's (tested on constant-rate, VFR, B-frame,
open-GOP and offset-start H.264 and on MPEG-4 Part 2: `tests/data/media/test_video_torchcodec.py`). With
`size`, torchcodec's `Resize` transform scales the RGB frame (bilinear swscale) where PyAV scales the
YUV frame while converting it: the same geometry and crop, pixels that differ by rounding and chroma
interpolation (docs/datasets.md gives the measured difference).

torchcodec loads FFmpeg's shared libraries at run time (it bundles none): without torchcodec, or
without the libraries, `require` raises a one-line `ConfigError` saying what to install.
Decoders are opened per call with one FFmpeg thread each (torchcodec's default; DataLoader workers
decode in parallel), so the sampler stays safe in worker processes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from lit_retrieval.data.media.decoding import VideoDecodeError
from lit_retrieval.errors import ConfigError

INSTALL_EXTRA = "pip install 'lit-retrieval[torchcodec]'"
# FFmpeg 5.1's shared libraries on Debian 12 (bookworm), what `.ci/run` installs; elsewhere any FFmpeg 4 or later
FFMPEG_PACKAGES = "libavcodec59 libavformat59 libavutil57 libswscale6 libswresample4 libavdevice59 libavfilter8"
TARGET_SLACK_S = 1e-9  # `video._played_at` counts a frame at or before t + 1e-9 as played at t


def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


def require() -> Any:
    """torchcodec's `VideoDecoder` class, or a one-line `ConfigError` saying what to install.

    `import torchcodec` succeeds without FFmpeg (its image decoders need none); the video ops then
    fail on first use. `torchcodec.ffmpeg_major_version` is None exactly when no FFmpeg could be
    loaded (torchcodec tries each `libtorchcodec_core<N>.so` it ships, one per FFmpeg major version)."""
    try:
        import torchcodec
        from torchcodec.decoders import VideoDecoder
    except (ImportError, OSError, RuntimeError) as err:  # absent, or built for another torch
        raise ConfigError(
            f"decoder 'torchcodec': torchcodec cannot be imported ({_first_line(err)}); {INSTALL_EXTRA}"
        ) from None
    if getattr(torchcodec, "ffmpeg_major_version", None) is None:
        raise ConfigError(
            "decoder 'torchcodec': torchcodec finds no FFmpeg shared libraries (FFmpeg 4 or later); install them, "
            f"on Debian 12: apt-get install {FFMPEG_PACKAGES}"
        )
    return VideoDecoder


def resized_geometry(width: int, height: int, size: int) -> tuple[int, int]:
    """(width, height) the short side scaled to `size`, as `video._resize_rgb` scales it."""
    scale = size / min(width, height)
    return max(size, round(width * scale)), max(size, round(height * scale))


@contextlib.contextmanager
def _source(path: str | Path) -> Iterator[str | BinaryIO]:
    """What `VideoDecoder` reads: the path, or the open file when the name is not UTF-8 (bytes that
    `os.fsdecode` kept as surrogates; torch's operator arguments take UTF-8 strings only)."""
    name = str(path)
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        with open(path, "rb") as handle:
            yield handle
        return
    yield name


def open_decoder(
    source: str | BinaryIO, size: int | None = None, device: str = "cpu", geometry: tuple[int, int] | None = None
) -> Any:
    """A torchcodec `VideoDecoder` of `source` (a path or an open file) in exact seek mode, NHWC
    uint8 RGB frames, resized on decode (short side to `size`, `torchcodec.transforms.Resize`) when
    `size` is given; `geometry`: the stream's (width, height) when known, else read from the header."""
    decoder_class = require()
    kwargs: dict[str, Any] = {"seek_mode": "exact", "dimension_order": "NHWC", "device": device}
    if size is not None:
        from torchcodec.transforms import Resize

        if geometry is None:  # the header's geometry: approximate mode does not scan the file
            metadata = decoder_class(source, seek_mode="approximate").metadata
            geometry = (metadata.width, metadata.height)
        width, height = resized_geometry(*geometry, size)
        kwargs["transforms"] = [Resize((height, width))]
    return decoder_class(source, **kwargs)


def frames_played_at(
    path: str | Path,
    times: np.ndarray,
    size: int | None,
    device: str = "cpu",
    geometry: tuple[int, int] | None = None,
) -> list[tuple[float, np.ndarray]]:
    """(time, RGB `[H, W, 3]` uint8) of the frame played at each of `times` (absolute seconds in
    ascending order, as `video.sample_video` computes them), consecutive repeats kept once; `size` as
    `_resize_rgb` (short side, then the centre `size x size`; `geometry` as `open_decoder`).
    `device="cuda"` decodes with NVDEC (frames come back to the CPU). torchcodec's errors are
    `VideoDecodeError`s naming the file."""
    wanted = np.asarray(times, dtype=np.float64) + TARGET_SLACK_S
    require()  # first: its refusal is a ConfigError (a ValueError), never the file's VideoDecodeError
    try:
        with _source(path) as source:
            decoder = open_decoder(source, size, device, geometry)
            end = decoder.metadata.end_stream_seconds
            inside = wanted < end if end is not None else np.ones(len(wanted), dtype=bool)
            played = decoder.get_frames_played_at(wanted[inside].tolist()) if inside.any() else None
            # past torchcodec's end (the last frame may count 0 s there): the last frame, by index
            last = None if inside.all() else decoder.get_frames_at([len(decoder) - 1])
    except (RuntimeError, ValueError, IndexError) as err:
        raise VideoDecodeError(path, f"undecodable (torchcodec: {_first_line(err)})") from None
    found = _rows(played) + _rows(last) * int((~inside).sum())  # `times` ascend: the outside ones come last
    chosen: list[tuple[float, np.ndarray]] = []
    for time, rgb in found:
        if chosen and abs(time - chosen[-1][0]) < 1e-9:
            continue
        if size is not None:
            height, width = rgb.shape[:2]
            top, left = (height - size) // 2, (width - size) // 2
            rgb = rgb[top : top + size, left : left + size]
        chosen.append((time, rgb))
    return chosen


def _rows(batch: Any) -> list[tuple[float, np.ndarray]]:
    """A torchcodec `FrameBatch` as (PTS seconds, NHWC frame on the CPU) rows; [] for None."""
    if batch is None:
        return []
    return list(zip(batch.pts_seconds.tolist(), batch.data.cpu().numpy()))
