"""Frame sampling speed: 64 frames by key-frame seeking (`exact`) and by decoding only the key frame
at or before each target (`keyframe`), on two videos: a 10-minute 320x240 25 fps video with a 10 s
key-frame interval, where `exact` is also compared with decoding every frame and keeping 64, and an
ActivityNet-like 150 s 640x360 30 fps video with a 2 s key-frame interval. Prints one JSON line:
wall-clock and CPU seconds (the process's CPU time, which other jobs on a shared machine disturb
less), ratios within this run, whether `exact` equals the full decode, and how far `keyframe`
frames lag their targets."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np

from lit_retrieval.data.media.video import sample_frames, uniform_times

WORK = Path(__file__).parent / "_work"
FRAMES = 64


@dataclass(frozen=True)
class Geometry:
    seconds: int
    fps: int
    width: int
    height: int
    keyint: int

    @property
    def name(self) -> str:
        return f"{self.seconds}s_{self.width}x{self.height}_{self.fps}fps_gop{self.keyint}"


LONG = Geometry(600, 25, 320, 240, 250)
ACTIVITYNET = Geometry(150, 30, 640, 360, 60)


def make_video(path: Path, geo: Geometry) -> None:
    """Moving gradient + frame counter blocks, so frames differ and P/B frames carry real data."""
    tmp = path.with_suffix(".part.mp4")
    yy, xx = np.mgrid[0 : geo.height, 0 : geo.width]
    with av.open(str(tmp), "w") as container:
        stream = container.add_stream("libx264", rate=geo.fps)
        stream.width, stream.height, stream.pix_fmt = geo.width, geo.height, "yuv420p"
        stream.options = {
            "preset": "veryfast",
            "g": str(geo.keyint),
            "keyint_min": str(geo.keyint),
            "sc_threshold": "0",
        }
        for k in range(geo.seconds * geo.fps):
            rgb = np.stack([(xx + 3 * k) % 256, (yy + k) % 256, (xx + yy + 5 * k) % 256], -1).astype(np.uint8)
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts = k
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    tmp.replace(path)


def decode_all_keep(path: Path, seconds: float, num: int) -> list[tuple[float, np.ndarray]]:
    """Baseline: decode every frame, keep the ones played at the uniform targets."""
    targets = list(uniform_times(0, seconds, num))
    kept, previous = [], None
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            while targets and frame.time > targets[0] + 1e-9:
                kept.append((previous.time, previous.to_ndarray(format="rgb24")))
                targets.pop(0)
            previous = frame
    kept += [(previous.time, previous.to_ndarray(format="rgb24")) for _ in targets]
    return kept


def best_of(fn, repeats: int = 3) -> tuple[float, float]:
    """Best wall-clock and best CPU seconds of `repeats` calls."""
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return min(wall), min(cpu)


def video(geo: Geometry, work: Path = WORK) -> Path:
    """The video of `geo` in `work` (written once there)."""
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"{geo.name}.mp4"
    if not path.exists():
        make_video(path, geo)
    return path


def measure(geo: Geometry, full_decode: bool) -> dict:
    path = video(geo)
    t_seek = best_of(lambda: sample_frames(path, FRAMES))
    key = sample_frames(path, FRAMES, sampling="keyframe")
    t_key = best_of(lambda: sample_frames(path, FRAMES, sampling="keyframe"))
    lag = uniform_times(0, geo.seconds, FRAMES) - key.times
    row = {
        "video": geo.name,
        "exact_s": round(t_seek[0], 3),
        "keyframe_s": round(t_key[0], 3),
        "exact_cpu_s": round(t_seek[1], 3),
        "keyframe_cpu_s": round(t_key[1], 3),
        "keyframe_speedup_over_exact": round(t_seek[0] / t_key[0], 2),
        "keyframe_cpu_speedup": round(t_seek[1] / t_key[1], 2),
        "keyframe_lag_mean_s": round(float(lag.mean()), 3),
        "keyframe_lag_max_s": round(float(lag.max()), 3),
    }
    if full_decode:
        seek = sample_frames(path, FRAMES)
        full = decode_all_keep(path, geo.seconds, FRAMES)
        row["identical_frames"] = bool(
            np.allclose(seek.times, [t for t, _ in full])
            and all(np.array_equal(a, b) for a, (_, b) in zip(seek.frames, full))
        )
        t_full = best_of(lambda: decode_all_keep(path, geo.seconds, FRAMES), repeats=2)
        row.update(
            {
                "decode_all_s": round(t_full[0], 3),
                "decode_all_cpu_s": round(t_full[1], 3),
                "exact_speedup_over_decode_all": round(t_full[0] / t_seek[0], 2),
                "exact_cpu_speedup": round(t_full[1] / t_seek[1], 2),
            }
        )
    return row


def main() -> None:
    rows = [measure(LONG, full_decode=True), measure(ACTIVITYNET, full_decode=False)]
    print(json.dumps({"benchmark": "frame_sampling", "frames": FRAMES, "videos": rows}))


if __name__ == "__main__":
    main()
