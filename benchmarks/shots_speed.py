"""Shot-detection speed on a 10-minute video, with and without downscaling, and the cost of a
second run over cached videos. Prints one JSON line.

The video (320x240 by default, 25 fps, a hard cut every 5 s between coloured scenes with moving
content) is written once with PyAV under benchmarks/_work. Detection runs PySceneDetect's
AdaptiveDetector through `lit_retrieval.data.media.shots`; the cut positions found are checked against
the true ones.

    python benchmarks/shots_speed.py [--seconds 600 --width 320 --height 240]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import av
import numpy as np

from lit_retrieval.data.media.shots import ShotDetectorConfig, detect_many, detect_shots

WORK = Path(__file__).parent / "_work"
FPS, SHOT_SECONDS = 25, 5


def make_video(path: Path, seconds: int, width: int, height: int) -> None:
    tmp = path.with_suffix(".part.mp4")
    rng = np.random.default_rng(0)
    colours = rng.integers(0, 256, (seconds // SHOT_SECONDS, 2, 3))
    yy, xx = np.mgrid[0:height, 0:width]
    with av.open(str(tmp), "w") as container:
        stream = container.add_stream("libx264", rate=FPS)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"preset": "veryfast", "g": "250"}
        for k in range(seconds * FPS):
            shot = k // (SHOT_SECONDS * FPS)
            base, accent = colours[shot]
            rgb = np.empty((height, width, 3), dtype=np.uint8)
            rgb[:] = base
            inside = (xx - (k * 4) % width) ** 2 + (yy - height / 2) ** 2 < (height / 6) ** 2
            rgb[inside] = accent
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts = k
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    tmp.replace(path)


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=600)
    parser.add_argument("--width", type=int, default=320)
    parser.add_argument("--height", type=int, default=240)
    args = parser.parse_args()
    seconds, width, height = args.seconds, args.width, args.height
    WORK.mkdir(exist_ok=True)
    video = WORK / f"shots_{width}x{height}_{FPS}fps_{seconds}s.mp4"
    if not video.exists():
        make_video(video, seconds, width, height)
    frames = seconds * FPS
    true_cuts = np.arange(SHOT_SECONDS, seconds, SHOT_SECONDS, dtype=float)
    out = {"benchmark": "shots_speed", "video": f"{seconds}s {width}x{height} {FPS}fps", "true_cuts": len(true_cuts)}
    for name, downscale in (("full", 1), ("auto", None), ("downscale4", 4)):
        shots, seconds = timed(lambda: detect_shots(video, ShotDetectorConfig(downscale=downscale)))
        found = np.array([s for s, _ in shots[1:]])
        hits = sum(np.any(np.abs(found - c) <= 1 / FPS + 1e-9) for c in true_cuts)
        out[name] = {
            "seconds": round(seconds, 2),
            "fps": round(frames / seconds, 1),
            "cuts_found": int(hits),
            "cuts_reported": len(found),
        }
    with tempfile.TemporaryDirectory() as cache:
        config = ShotDetectorConfig(downscale=4)
        _, first = timed(lambda: detect_many([video], config, cache, progress=False))
        again, second = timed(lambda: detect_many([video], config, cache, progress=False))
        assert again.cached == 1
    out["cache"] = {
        "first_seconds": round(first, 2),
        "cached_seconds": round(second, 4),
        "cached_fraction": float(f"{second / first:.2e}"),
    }
    out["speedup_downscale4_vs_full"] = round(out["full"]["seconds"] / out["downscale4"]["seconds"], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
