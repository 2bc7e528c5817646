"""What `MTEBModel` pays per video to hand mteb's frames to our embedders (lit_retrieval/mteb_model.py):
`write_frames` (a lossless RGB H.264 file, 1 frame per second, every frame a key frame) and the embedder's
read of it (`sample_frames`, exact, the N frames at the original size and at 224 px). Noise frames are the
worst case for a lossless encoder. Prints ONE JSON line: best-of-3 seconds of each, per frame size.

    python benchmarks/mteb_frames.py            # 8 frames at 720p and 360p, about half a minute
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import torch

from lit_retrieval.data.media.video import sample_frames
from lit_retrieval.mteb_model import write_frames

SIZES = {"720p": (720, 1280), "360p": (360, 640)}
FRAMES = 8


def best_of(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    result = {"frames": FRAMES, "torch_threads": torch.get_num_threads()}
    with tempfile.TemporaryDirectory(prefix="mteb-frames-") as scratch:
        for name, (height, width) in SIZES.items():
            frames = torch.randint(
                0, 256, (FRAMES, 3, height, width), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)
            )
            path = Path(scratch) / f"{name}.mp4"
            write = best_of(lambda: write_frames(frames, path))
            read = best_of(lambda: sample_frames(str(path), FRAMES))
            read_224 = best_of(lambda: sample_frames(str(path), FRAMES, size=224))
            result[name] = {
                "write_s": round(write, 3),
                "read_s": round(read, 3),
                "read_224px_s": round(read_224, 3),
                "file_mb": round(path.stat().st_size / 2**20, 1),
            }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
