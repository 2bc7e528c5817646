"""Shards at corpus scale: a synthetic corpus of N short clips (every entry the same 8 frames of 32 px, as
the issue allows: entries may share frames) written as litdata shards the way `lit-retrieval shard` writes
them (samples.to_sample, BinaryWriter, 64 MB chunks), then, in a fresh process each: the time to open the
training split and read its first item (`ShardedDataModule`'s dataset, `PinnedShuffle`), the memory that
process holds (RSS after opening less RSS before), the system calls per item while reading `--read` items
in the training order (strace -c -f: open/openat, stat-family, mmap, read), and items/s of one process
(CPU time of the reading process: the rate of one dedicated core; the mp4 encoding's rate includes its
lossless decode). Prints one JSON line.

    nice python benchmarks/shard_scale.py --items 10000 100000 [--read 2000] [--encoding frames mp4]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

FRAMES, SIZE = 8, 32
LINKS_PER_SOURCE = 60_000

PROBE = r"""
import json, os, sys, time
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
import torch, litdata  # imported before the clock: the open, not the imports, is measured
from lit_retrieval.data.streaming.datamodule import streaming_dataset
from lit_retrieval.data.streaming.samples import ToItem
from lit_retrieval.data.media.normalize import NormalizeFrames
folder, read = sys.argv[1], int(sys.argv[2])
before = rss(); start = time.perf_counter(); cpu = time.process_time()
ds = streaming_dataset(folder, True, 0, 256, transform=ToItem(NormalizeFrames()))
it = iter(ds); next(it)
opened = time.perf_counter() - start; opened_cpu = time.process_time() - cpu; held = rss() - before
start = time.process_time()  # CPU seconds of this process: a per-core rate, whatever else the machine runs
for _ in range(read):
    next(it)
rate = read / (time.process_time() - start)
figures = {"open_s": round(opened, 3), "open_cpu_s": round(opened_cpu, 3), "held_mb": round(held / 2**20, 1)}
print(json.dumps({**figures, "items_per_s": round(rate, 1)}))
"""


def write(folder: Path, items: int, encoding: str) -> float:
    from litdata.streaming.writer import BinaryWriter

    from lit_retrieval.data.streaming.samples import to_sample

    frames = np.random.default_rng(0).integers(0, 255, (FRAMES, SIZE, SIZE, 3), dtype=np.uint8)
    item = {
        "index": 0,
        "video_id": "v",
        "events": ["a person opens a door", "then sits down"],
        "duration": 4.0,
        "frames": torch.from_numpy(frames).permute(0, 3, 1, 2),
        "frame_mask": torch.ones(FRAMES, dtype=torch.bool),
        "frame_times": torch.linspace(0.25, 3.75, FRAMES, dtype=torch.float64),
    }
    sample = to_sample(item, encoding)
    writer = BinaryWriter(str(folder), chunk_bytes="64MB")
    start = time.perf_counter()
    for i in range(items):
        writer[i] = {**sample, "index": i, "video_id": f"v{i:08d}"}
    writer.done()
    writer.merge(1)
    return time.perf_counter() - start


CACHE_PROBE = r"""
import json, os, sys, time
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
import torch, numpy
from lit_retrieval.data.batching.dataset import MultiEventDataset
from lit_retrieval.data.media.frame_cache import FrameCache
from lit_retrieval.data.media.normalize import NormalizeFrames
from lit_retrieval.data.media.video import SamplingSpec
folder, read = sys.argv[1], int(sys.argv[2])
videos = [os.path.join(folder, "videos", f"v{i:08d}.mp4") for i in range(int(sys.argv[3]))]
params = MultiEventDataset.cache_params(SamplingSpec(%d, %d), False)
normalize = NormalizeFrames()
before = rss(); start = time.perf_counter(); cpu = time.process_time()
cache = FrameCache(os.path.join(folder, "cache"), params)
normalize(cache.get(videos[0]).frames)
opened = time.perf_counter() - start; opened_cpu = time.process_time() - cpu; held = rss() - before
order = numpy.random.default_rng(0).permutation(len(videos))[:read]
start = time.process_time()
for i in order:
    normalize(cache.get(videos[i]).frames)
rate = read / (time.process_time() - start)
figures = {"open_s": round(opened, 3), "open_cpu_s": round(opened_cpu, 3), "held_mb": round(held / 2**20, 1)}
print(json.dumps({**figures, "items_per_s": round(rate, 1)}))
""" % (FRAMES, SIZE)


def write_cache(folder: Path, items: int) -> float:
    """The current frame cache of `items` videos (hard links of one short clip: distinct paths, one file)."""
    from lit_retrieval.data.batching.dataset import MultiEventDataset
    from lit_retrieval.data.datasets.synthetic import SynthConfig, generate_corpus
    from lit_retrieval.data.media.frame_cache import CacheJob, CacheWriter
    from lit_retrieval.data.media.identity import file_path, file_version
    from lit_retrieval.data.media.video import SamplingSpec, sample_video

    generate_corpus(folder / "corpus", SynthConfig(num_videos=1, seed=0), workers=1, progress=False)
    clip = next((folder / "corpus").rglob("*.mp4"))
    spec = SamplingSpec(FRAMES, SIZE)
    sample = sample_video(clip, spec)
    (folder / "videos").mkdir()
    writer = CacheWriter(folder / "cache", MultiEventDataset.cache_params(spec, False))
    start = time.perf_counter()
    for i in range(items):
        if i % LINKS_PER_SOURCE == 0:  # a fresh copy: ext4 allows 65,000 links to one file
            source = folder / "videos" / f"source{i // LINKS_PER_SOURCE}.mp4"
            shutil.copyfile(clip, source)
        video = folder / "videos" / f"v{i:08d}.mp4"
        os.link(source, video)
        writer.add(CacheJob(file_path(video)), file_version(video), sample)
    return time.perf_counter() - start


def syscalls(folder: Path, read: int, env: dict, probe: str = PROBE, *extra: str) -> dict[str, float]:
    with tempfile.NamedTemporaryFile("r", suffix=".strace") as out:
        cmd = ["strace", "-f", "-c", "-o", out.name, sys.executable, "-c", probe, str(folder), str(read), *extra]
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        text = out.read()
    counts = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 5 and re.fullmatch(r"[a-z_0-9]+", parts[-1]) and parts[3].isdigit():
            counts[parts[-1]] = int(parts[3])
    groups = {
        "opens": ("open", "openat"),
        "stats": ("stat", "fstat", "lstat", "newfstatat", "statx"),
        "mmaps": ("mmap",),
        "reads": ("read", "pread64"),
    }
    return {name: sum(counts.get(c, 0) for c in names) for name, names in groups.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, nargs="+", default=[10_000])
    parser.add_argument("--read", type=int, default=2000)
    parser.add_argument("--encoding", nargs="+", default=["frames", "mp4", "cache"], help="cache: the frame cache")
    args = parser.parse_args()
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": f"{root}:{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}
    result = {"script": "benchmarks/shard_scale.py", "frames": FRAMES, "size": SIZE, "read": args.read, "runs": []}
    for encoding in args.encoding:
        for items in args.items:
            with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
                cache = encoding == "cache"
                folder = Path(tmp) / ("" if cache else "train")
                seconds = write_cache(folder, items) if cache else write(folder, items, encoding)
                data = folder / "cache" if cache else folder
                size = sum(p.stat().st_size for p in data.iterdir())
                code, extra = (CACHE_PROBE, [str(items)]) if cache else (PROBE, [])
                probe = subprocess.run(
                    [sys.executable, "-c", code, str(folder), str(args.read), *extra],
                    env=env,
                    check=True,
                    capture_output=True,
                    text=True,
                )
                measured = json.loads(probe.stdout.strip().splitlines()[-1])
                base = syscalls(folder, 0, env, code, *extra)
                more = syscalls(folder, args.read, env, code, *extra)
                per_item = {k: round((more[k] - base[k]) / args.read, 3) for k in base}
                print(f"{encoding} {items}: written in {seconds:.0f} s, measured", file=sys.stderr, flush=True)
                result["runs"].append(
                    {
                        "encoding": encoding,
                        "items": items,
                        "write_s": round(seconds, 1),
                        "bytes_per_item": size // items,
                        "files": len(list(data.iterdir())),
                        **measured,
                        "syscalls_at_open": base,
                        "syscalls_per_item": per_item,
                    }
                )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
