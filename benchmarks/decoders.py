"""PyAV vs torchcodec as the sampler's decoder, side by side on the same videos and the same targets
(`sample_frames(..., decoder=...)`: the targets come from the same packet probe, only the decoding
differs), to say when each wins. Videos written with PyAV (benchmarks/frame_sampling.py's moving
gradient) of three sizes and lengths: a 10 s 1280x720 30 fps clip (1 s key-frame interval), a 60 s
640x360 30 fps clip (2 s) and a 10-minute 320x240 25 fps video (10 s). Three samplings each: 64
uniform frames at the original size and at 224 px (the dual encoders' input), and GVE's 8 frames
(`linspace_frames`, multiples of 2). Prints ONE JSON line: best-of-3 wall-clock and CPU seconds of
each decoder, the ratio PyAV / torchcodec (> 1: torchcodec faster), whether the frames are identical
(np.array_equal; at 224 px the mean absolute pixel difference, since torchcodec resizes after the RGB
conversion), with the decoders' threading: both with one FFmpeg thread (the sampler's `FFMPEG_THREADS`,
torchcodec's default: what DataLoader workers want). PyAV is also timed on FFmpeg's own pool
(decoders and PyAV's cached reformatter on FFmpeg's automatic thread count: a thread per core and one
more), the sampler's threading before 2026-12-07; `ratio_one_thread_over_pool` says what one thread costs a
process decoding alone.

The videos are written under `--work` (default: a temporary folder, removed at the end), never into
the source tree; pass a folder to keep them between runs.

`--device cuda` adds torchcodec on NVDEC (`VideoDecoder(device="cuda")`) for the frames PyAV
chose, with its seconds and its pixel difference to PyAV (NVDEC's colour conversion is its own);
`benchmarks/device_check.sh` runs it on the GPU node when CUDA and torchcodec are there.

    python benchmarks/decoders.py                 # CPU: about 4 minutes with the videos to write
    python benchmarks/decoders.py --work /tmp/decoder-videos --videos 60s
    python benchmarks/decoders.py --device cuda --videos 60s
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from unittest import mock

import numpy as np
from frame_sampling import LONG, Geometry, best_of, video

from lit_retrieval.data.media import pyav_threads
from lit_retrieval.data.media import video as sampler
from lit_retrieval.data.media.torchcodec_decoder import frames_played_at, require
from lit_retrieval.data.media.video import sample_frames

CLIP = Geometry(60, 30, 640, 360, 60)
HD = Geometry(10, 30, 1280, 720, 30)
TINY = Geometry(2, 10, 64, 48, 10)  # the tests' run of the script
VIDEOS = {"10s_720p": HD, "60s": CLIP, "10min": LONG, "tiny": TINY}
DEFAULT_VIDEOS = ["10s_720p", "60s", "10min"]
SAMPLINGS = {
    "uniform64": dict(num_frames=64),
    "uniform64_224px": dict(num_frames=64, size=224),
    "gve8": dict(num_frames=8, targets="linspace_frames", frame_multiple=2),
}


def versions() -> dict:
    """The two decoders and the FFmpeg each runs on (PyAV bundles its own; torchcodec loads the system's)."""
    import av
    import torchcodec

    libavcodec = av.library_versions["libavcodec"]
    try:  # a private helper of torchcodec's: the FFmpeg it loaded
        from torchcodec._core import get_ffmpeg_library_versions

        torchcodec_ffmpeg = get_ffmpeg_library_versions().get("ffmpeg_version")
    except (ImportError, RuntimeError):
        torchcodec_ffmpeg = f"major {torchcodec.ffmpeg_major_version}"
    return {
        "av": av.__version__,
        "pyav_libavcodec": ".".join(map(str, libavcodec)),
        "torchcodec": torchcodec.__version__,
        "torchcodec_ffmpeg": torchcodec_ffmpeg,
    }


def compare(path: Path, settings: dict, device: str | None) -> dict:
    pyav = sample_frames(path, **settings)
    torchcodec = sample_frames(path, decoder="torchcodec", **settings)
    t_pyav = best_of(lambda: sample_frames(path, **settings))
    t_torchcodec = best_of(lambda: sample_frames(path, decoder="torchcodec", **settings))
    t_pool = best_of(lambda: sample_on_ffmpegs_pool(path, settings))
    same_times = bool(np.allclose(pyav.times, torchcodec.times, atol=1e-9, equal_nan=True))
    row = {
        "frames": int(pyav.mask.sum()),
        "pyav_s": round(t_pyav[0], 3),
        "torchcodec_s": round(t_torchcodec[0], 3),
        "pyav_pool_s": round(t_pool[0], 3),
        "pyav_cpu_s": round(t_pyav[1], 3),
        "torchcodec_cpu_s": round(t_torchcodec[1], 3),
        "pyav_pool_cpu_s": round(t_pool[1], 3),
        "ratio_pyav_over_torchcodec": round(t_pyav[0] / t_torchcodec[0], 2),
        "cpu_ratio": round(t_pyav[1] / t_torchcodec[1], 2),
        "ratio_one_thread_over_pool": round(t_pyav[0] / t_pool[0], 2),
        "same_times": same_times,
        "identical_frames": same_times and bool(np.array_equal(pyav.frames, torchcodec.frames)),
    }
    if settings.get("size"):
        row["mean_abs_pixel_difference"] = round(float(np.abs(pyav.frames.astype(int) - torchcodec.frames).mean()), 3)
    if device is not None and settings.get("size") is None:
        row.update(nvdec(path, pyav, device))
        row["ratio_pyav_over_nvdec"] = round(t_pyav[0] / row["nvdec_s"], 2)
    return row


def sample_on_ffmpegs_pool(path: Path, settings: dict) -> None:
    """PyAV's sample as the sampler took it before 2026-12-07: decoders on FFmpeg's automatic thread count, frames
    converted by PyAV's cached reformatter (the same, automatic)."""

    def pyav_rgb(frame, width: int | None = None, height: int | None = None) -> np.ndarray:
        return frame.reformat(width=width, height=height, format="rgb24").to_ndarray()

    with mock.patch.object(pyav_threads, "FFMPEG_THREADS", 0), mock.patch.object(sampler, "to_rgb", pyav_rgb):
        sample_frames(path, **settings)


def nvdec(path: Path, pyav, device: str) -> dict:
    """torchcodec on `device` decoding the frames PyAV chose (their absolute times: the first
    frame's PTS, torchcodec's `begin_stream_seconds`, plus the sample's times)."""
    from torchcodec.decoders import VideoDecoder

    first = VideoDecoder(str(path), seek_mode="approximate").metadata.begin_stream_seconds or 0.0
    times = first + pyav.times[pyav.mask]
    frames_played_at(path, times, None, device=device)  # CUDA context and NVDEC's first session, untimed
    t_gpu = best_of(lambda: frames_played_at(path, times, None, device=device))
    decoded = np.stack([rgb for _, rgb in frames_played_at(path, times, None, device=device)])
    difference = np.abs(decoded.astype(int) - pyav.frames[pyav.mask].astype(int))
    return {
        "nvdec_s": round(t_gpu[0], 3),
        "nvdec_mean_abs_pixel_difference": round(float(difference.mean()), 3),
        "nvdec_max_abs_pixel_difference": int(difference.max()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="also torchcodec on this device (cuda: NVDEC)")
    parser.add_argument("--videos", nargs="+", choices=list(VIDEOS), default=DEFAULT_VIDEOS)
    parser.add_argument("--work", type=Path, help="folder for the videos (default: a temporary one, removed)")
    args = parser.parse_args()
    require()  # one line saying what to install, before any video is written
    rows = []
    with tempfile.TemporaryDirectory(prefix="decoders-") as scratch:
        work = args.work or Path(scratch)
        for name in args.videos:
            path = video(VIDEOS[name], work)
            for sampling, settings in SAMPLINGS.items():
                rows.append({"video": VIDEOS[name].name, "sampling": sampling, **compare(path, settings, args.device)})
    print(json.dumps({"benchmark": "decoders", "device": args.device or "cpu", **versions(), "rows": rows}))


if __name__ == "__main__":
    main()
