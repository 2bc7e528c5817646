"""Loader throughput: videos/s per DataLoader worker process for on-the-fly `exact` sampling,
on-the-fly `keyframe` sampling and the frame cache (raw uint8 and JPEG), at MELON's geometry (64
frames, 224 px), MSR-VTT's (12 x 224) and GVE's (8 frames at full resolution, qwen-vl-utils
sampling), on two kinds of video generated here: ActivityNet-like (640x360, 30 fps, 2 s GOP, 150 s)
and MSR-VTT-like (320x240, 30 fps, 2 s GOP, 15 s).

Items go through the real loaders: `MultiEventDataModule.test_dataloader()` (decode or cache read,
normalisation to float, collation, the worker queue; `cache_raw_uint8`: the cache with
`normalize_on_device`, uint8 frames through the queue, normalised later on the GPU) and, for
GVE, a DataLoader over the sampling `GVEProcessing.load_video` runs (`sample_clip` or the
cache). Rates exclude each worker's first item
(its start-up). `cpu_s_per_video` is the CPU time one item costs (all threads, measured in one
process; 1 / it is the rate of one dedicated core, whatever else the machine runs). The cache's size
per video and the JPEG cache's PSNR against the exact frames are reported too, and the host-to-device
time of one MELON step's frames (float32 pageable, float32 pinned, uint8 pinned normalised on the
GPU; bytes only without CUDA). Prints one JSON line.

    nice -n 10 python benchmarks/loader_throughput.py [--videos 4] [--workers 1] [--quick] [--h2d-only]
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from frame_sampling import WORK, Geometry, make_video
from lit_retrieval.data.media.cache_plan import WindowSampler
from lit_retrieval.models.gve.cache_plan import ClipSampler
from lit_retrieval.data import MultiEventDataModule
from lit_retrieval.data.batching.dataset import MultiEventDataset, collate_items
from lit_retrieval.data.media.frame_cache import CacheJob, CacheWriter, FrameCache, cached_or_sampled
from lit_retrieval.data.media.identity import file_path, file_version
from lit_retrieval.data.media.video import SamplingSpec
from lit_retrieval.models.gve.processing import InputConfig, clip_cache_params, sample_clip

GEOMETRIES = {"activitynet": Geometry(150, 30, 640, 360, 60), "msrvtt": Geometry(15, 30, 320, 240, 60)}
QUICK_GEOMETRIES = {"activitynet": Geometry(8, 30, 640, 360, 60), "msrvtt": Geometry(4, 30, 320, 240, 60)}
SETTINGS = {"melon_64x224": (64, 224), "msrvtt_12x224": (12, 224), "gve_8": None}
TEMPORAL_PATCH = 2  # Qwen2.5-VL
JPEG_QUALITY = 90


def videos(geo: Geometry, count: int, folder: Path) -> list[Path]:
    """`count` copies of one generated video of geometry `geo` (generated once into benchmarks/_work)."""
    WORK.mkdir(exist_ok=True)
    source = WORK / f"{geo.name}.mp4"
    if not source.exists():
        make_video(source, geo)
    paths = []
    for k in range(count):
        path = folder / f"{geo.name}_{k}.mp4"
        shutil.copyfile(source, path)
        paths.append(path)
    return paths


def per_second(loader: DataLoader) -> float:
    """Items/s in the steady state: after the first item of every worker (their start-up)."""
    iterator = iter(loader)
    for _ in range(max(1, loader.num_workers)):
        next(iterator)
    start, seen = time.perf_counter(), 0
    for _ in iterator:
        seen += 1
    if not seen:
        raise ValueError("too few items for the workers: raise --exact-repeats / --cache-repeats")
    return seen / (time.perf_counter() - start)


def isolated(fn, *args) -> float:
    """`fn(*args)` in a forked child, so every loader's workers fork from a process that has run no
    other loader. The garbage of earlier decoding is collected first: a PyAV codec context left in a
    reference cycle (an unfinished decode generator) and freed by a forked child's garbage collector
    waits forever for FFmpeg threads that only exist in the parent (seen here as hung workers)."""
    gc.collect()
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=lambda: send.send(fn(*args)))
    child.start()
    rate = receive.recv()
    child.join()
    return rate


def write_annotation(folder: Path, paths: list[Path], repeats: int) -> Path:
    records = [
        {
            "video_id": f"{p.stem}_r{r}",
            "path": p.name,
            "duration": 1.0,
            "split": "test",
            "events": [
                {
                    "event_id": f"{p.stem}_r{r}_e",
                    "theme": "",
                    "description": "x",
                    "start": 0.0,
                    "end": 1.0,
                    "intervals": [[0.0, 1.0]],
                }
            ],
        }
        for r in range(repeats)
        for p in paths
    ]
    path = folder / f"annotations_{repeats}.json"
    path.write_text(json.dumps({"format": "lit-retrieval/multi-event", "version": 1, "videos": records}))
    return path


def video_text_module(
    annotation: Path, frames: int, size: int, sampling: str, cache: Path | None, on_device: bool, **options
) -> MultiEventDataModule:
    """The test split of `annotation` as the benchmark reads it (set up), from the cache when given."""
    module = MultiEventDataModule(
        str(annotation),
        num_frames=frames,
        image_size=size,
        sampling=sampling,
        train_split="test",
        frame_cache=str(cache) if cache else None,
        normalize_on_device=on_device,
        **options,
    )
    module.setup()
    return module


def video_text_rate(
    annotation: Path,
    frames: int,
    size: int,
    workers: int,
    sampling: str = "exact",
    cache: Path | None = None,
    on_device: bool = False,
) -> float:
    module = video_text_module(
        annotation, frames, size, sampling, cache, on_device, eval_batch_size=1, num_workers=workers
    )
    return per_second(module.test_dataloader())


def video_text_cpu_s(
    annotation: Path,
    frames: int,
    size: int,
    sampling: str = "exact",
    cache: Path | None = None,
    on_device: bool = False,
    items: int = 4,
) -> float:
    """CPU seconds (all threads) one item costs a worker: read or decode, normalise, collate and
    move to shared memory as the worker queue does. Independent of other load on the machine, so
    1 / this is the rate one dedicated core sustains."""
    dataset = video_text_module(annotation, frames, size, sampling, cache, on_device).datasets["test"]
    dataset[0]
    start = time.process_time()
    for i in range(items):
        collate_items([dataset[i % len(dataset)]])["frames"].share_memory_()
    return (time.process_time() - start) / items


class ClipFrames(Dataset):
    """What `GVEProcessing.load_video` reads for whole videos: the cache, else `sample_clip`."""

    def __init__(self, paths: list[Path], config: InputConfig, cache: FrameCache | None) -> None:
        self.paths, self.config, self.cache = [str(p) for p in paths], config, cache

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> torch.Tensor:
        path = self.paths[i]
        sample = cached_or_sampled(
            self.cache, path, None, None, lambda: sample_clip(path, None, None, self.config, TEMPORAL_PATCH)
        )
        return torch.from_numpy(sample.frames[sample.mask])


def clip_rate(paths: list[Path], config: InputConfig, workers: int, cache: FrameCache | None = None) -> float:
    return per_second(DataLoader(ClipFrames(paths, config, cache), batch_size=None, num_workers=workers))


def build_cache(out: Path, params: dict, sampler, paths: list[Path], frame_format: str = "raw") -> tuple[float, float]:
    """Write a cache of `paths`; (seconds per video to build, MB per video)."""
    writer = CacheWriter(out, params, frame_format, JPEG_QUALITY if frame_format == "jpeg" else None)
    start = time.perf_counter()
    for path in paths:
        job = CacheJob(file_path(path))
        sample = sampler(job)
        writer.add(job, file_version(path), sample)
    seconds = (time.perf_counter() - start) / len(paths)
    return seconds, writer.data_path.stat().st_size / len(paths) / 1e6


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(((a.astype(np.float64) - b.astype(np.float64)) ** 2).mean())
    return float("inf") if mse == 0 else 10 * np.log10(255**2 / mse)


def measure_video_text(root: Path, paths: list[Path], frames: int, size: int, args) -> dict:
    spec = SamplingSpec(frames, size)
    params = MultiEventDataset.cache_params(spec, False)
    few, many = write_annotation(root, paths, args.exact_repeats), write_annotation(root, paths, args.cache_repeats)
    row = {
        "exact": isolated(video_text_rate, few, frames, size, args.workers),
        "keyframe": isolated(video_text_rate, few, frames, size, args.workers, "keyframe"),
    }
    for frame_format in ("raw", "jpeg"):
        cache = root / f"cache_{frames}x{size}_{frame_format}"
        build_s, mb = build_cache(cache, params, WindowSampler(spec, 1.0), paths, frame_format)
        row[f"cache_{frame_format}"] = isolated(video_text_rate, many, frames, size, args.workers, "exact", cache)
        row[f"cache_{frame_format}_mb_per_video"] = mb
        row[f"cache_{frame_format}_build_s_per_video"] = build_s
    raw_cache = root / f"cache_{frames}x{size}_raw"
    row["cache_raw_uint8"] = isolated(video_text_rate, many, frames, size, args.workers, "exact", raw_cache, True)
    row["cpu_s_per_video"] = {
        "exact": isolated(video_text_cpu_s, few, frames, size, "exact", None, False, 2),
        "keyframe": isolated(video_text_cpu_s, few, frames, size, "keyframe", None, False, 2),
        "cache_raw": isolated(video_text_cpu_s, many, frames, size, "exact", raw_cache, False, 8),
        "cache_raw_uint8": isolated(video_text_cpu_s, many, frames, size, "exact", raw_cache, True, 8),
    }
    raw, jpeg = (
        FrameCache(root / f"cache_{frames}x{size}_raw", params),
        FrameCache(root / f"cache_{frames}x{size}_jpeg", params),
    )
    row["jpeg_psnr_db"] = min(psnr(raw.get(p).frames, jpeg.get(p).frames) for p in paths[:1])
    return row


def measure_gve(root: Path, paths: list[Path], args) -> dict:
    config = InputConfig()
    params = clip_cache_params(config, TEMPORAL_PATCH)
    row = {
        "exact": isolated(clip_rate, paths * args.exact_repeats, config, args.workers),
        "keyframe": isolated(clip_rate, paths * args.exact_repeats, replace(config, sampling="keyframe"), args.workers),
    }
    cache = root / "cache_gve_raw"
    build_s, mb = build_cache(cache, params, ClipSampler(config, TEMPORAL_PATCH), paths)
    row["cache_raw"] = isolated(clip_rate, paths * args.cache_repeats, config, args.workers, FrameCache(cache, params))
    row.update(cache_raw_mb_per_video=mb, cache_raw_build_s_per_video=build_s)
    return row


def host_to_device(batch: int, frames: int, size: int, steps: int) -> dict:
    """Host-to-device time per training step of one batch of frames `[batch, frames, 3, size, size]`:
    float32 frames from pageable memory (no `normalize_on_device`, no pinning), float32 pinned, and
    uint8 pinned normalised on the GPU (`normalize_on_device` with pinned loaders, the recipes'
    default), timed with CUDA synchronisation over `steps` copies. Without CUDA only the bytes
    per step are reported (pinning needs a CUDA device)."""
    shape = (batch, frames, 3, size, size)
    elements = int(np.prod(shape))
    out: dict = {"batch": list(shape), "mb_per_step": {"float32": elements * 4 / 1e6, "uint8": elements / 1e6}}
    if not torch.cuda.is_available():
        out["seconds_per_step"] = None
        out["why"] = "no CUDA device here: host-to-device time is measured where torch.cuda.is_available()"
        return out
    device = torch.device("cuda")
    mean = torch.tensor([0.481, 0.458, 0.408], device=device).view(1, 1, 3, 1, 1)
    std = torch.tensor([0.269, 0.261, 0.276], device=device).view(1, 1, 3, 1, 1)
    uint8 = torch.randint(0, 256, shape, dtype=torch.uint8)
    cases = {
        "float32_pageable": (torch.rand(shape), None),
        "float32_pinned": (torch.rand(shape).pin_memory(), None),
        "uint8_pinned_normalised_on_gpu": (uint8.pin_memory(), lambda x: (x.float() / 255 - mean) / std),
    }
    seconds = {}
    for name, (host, after) in cases.items():
        for timed in (False, True):  # a first untimed copy allocates the device memory
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(steps if timed else 1):
                moved = host.to(device, non_blocking=True)
                if after is not None:
                    moved = after(moved)
            torch.cuda.synchronize()
        seconds[name] = (time.perf_counter() - start) / steps
        del moved
    out["seconds_per_step"] = seconds
    out["device"] = torch.cuda.get_device_name()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--videos", type=int, default=4, help="videos per geometry")
    parser.add_argument(
        "--workers", type=int, default=1, help="DataLoader worker processes (rates are divided by this)"
    )
    parser.add_argument("--exact-repeats", type=int, default=2, help="passes over the videos when decoding on the fly")
    parser.add_argument("--cache-repeats", type=int, default=16, help="passes over the videos when reading the cache")
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 short video per geometry, few passes")
    parser.add_argument(
        "--h2d-only", action="store_true", help="only the host-to-device time per step (MELON's 16 x 64 x 224)"
    )
    args = parser.parse_args()
    h2d = host_to_device(16, 64, 224, 3 if args.quick else 10)
    if args.h2d_only:
        print(json.dumps({"benchmark": "loader_throughput", "host_to_device_melon_step": h2d}))
        return
    geometries = QUICK_GEOMETRIES if args.quick else GEOMETRIES
    if args.quick:
        args.videos, args.exact_repeats, args.cache_repeats = 1, 1 + 2 * args.workers, 1 + 4 * args.workers
    out: dict = {
        "benchmark": "loader_throughput",
        "workers": args.workers,
        "videos_per_geometry": args.videos,
        "jpeg_quality": JPEG_QUALITY,
        "geometries": {name: geo.name for name, geo in geometries.items()},
        "unit": "videos/s per worker",
        "host_to_device_melon_step": h2d,
    }
    with tempfile.TemporaryDirectory(dir=WORK if WORK.exists() else None) as tmp:
        for name, geo in geometries.items():
            root = Path(tmp) / name
            root.mkdir()
            paths = videos(geo, args.videos, root)
            for setting, frames_size in SETTINGS.items():
                row = (
                    measure_gve(root, paths, args)
                    if frames_size is None
                    else measure_video_text(root, paths, *frames_size, args)
                )
                rates = {
                    k: round(v / args.workers, 2)
                    if k in ("exact", "keyframe", "cache_raw", "cache_jpeg", "cache_raw_uint8")
                    else v
                    for k, v in row.items()
                }
                rates = {
                    k: {m: round(c, 4) for m, c in v.items()} if isinstance(v, dict) else round(v, 3)
                    for k, v in rates.items()
                }
                rates["cache_raw_over_exact"] = round(row["cache_raw"] / row["exact"], 1)
                out[f"{name}/{setting}"] = rates
    print(json.dumps(out))


if __name__ == "__main__":
    main()
