"""Frame sampling speed: 64 frames of a 10-minute 320x240 25 fps video (10 s key-frame interval)
by key-frame seeking vs. decoding every frame and keeping 64. Prints one JSON line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import av
import numpy as np

from lit_retrieval.data.video import sample_frames, uniform_times

WORK = Path(__file__).parent / "_work"
SECONDS, FPS, WIDTH, HEIGHT, KEYINT, FRAMES = 600, 25, 320, 240, 250, 64


def make_video(path: Path) -> None:
    """Moving gradient + frame counter blocks, so frames differ and P/B frames carry real data."""
    tmp = path.with_suffix(".part.mp4")
    yy, xx = np.mgrid[0:HEIGHT, 0:WIDTH]
    with av.open(str(tmp), "w") as container:
        stream = container.add_stream("libx264", rate=FPS)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        stream.options = {"preset": "veryfast", "g": str(KEYINT), "keyint_min": str(KEYINT), "sc_threshold": "0"}
        for k in range(SECONDS * FPS):
            rgb = np.stack([(xx + 3 * k) % 256, (yy + k) % 256, (xx + yy + 5 * k) % 256], -1).astype(np.uint8)
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts = k
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    tmp.replace(path)


def decode_all_keep(path: Path, num: int) -> list[float]:
    """Baseline: decode every frame, keep the ones played at the uniform targets."""
    targets = list(uniform_times(0, SECONDS, num))
    kept, previous = [], None
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            while targets and frame.time > targets[0] + 1e-9:
                kept.append((previous.time, previous.to_ndarray(format="rgb24")))
                targets.pop(0)
            previous = frame
    kept += [(previous.time, previous.to_ndarray(format="rgb24")) for _ in targets]
    return kept


def best_of(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    WORK.mkdir(exist_ok=True)
    path = WORK / "long_320x240_25fps_gop250.mp4"
    if not path.exists():
        make_video(path)
    seek = sample_frames(path, FRAMES)
    full = decode_all_keep(path, FRAMES)
    same = bool(np.allclose(seek.times, [t for t, _ in full]) and all(np.array_equal(a, b) for a, (_, b) in zip(seek.frames, full)))
    t_seek = best_of(lambda: sample_frames(path, FRAMES))
    t_full = best_of(lambda: decode_all_keep(path, FRAMES), repeats=2)
    print(json.dumps({
        "benchmark": "frame_sampling", "video": f"{SECONDS}s {WIDTH}x{HEIGHT} {FPS}fps keyint {KEYINT}", "frames": FRAMES,
        "seek_s": round(t_seek, 3), "decode_all_s": round(t_full, 3), "speedup": round(t_full / t_seek, 2), "identical_frames": same,
    }))


if __name__ == "__main__":
    main()
