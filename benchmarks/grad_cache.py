"""Gradient caching's memory/speed trade (`model.grad_cache`, lit_retrieval/modules/grad_cache.py): peak
memory and step time of one training step (forward, backward, AdamW) at a fixed batch, plain and at
several chunk sizes, for CLIP4Clip+MEA at MELON's geometry (batch 16, 64 frames, 248-token queries;
supp. B.1) and for GVE (text queries against 8-frame videos plus one hard negative each). Prints one
JSON line: a row per (model, chunk) and each row's ratios to the plain step of the same model.

Peak memory, of a step after a warm-up step (the model, the batch, the gradients and AdamW's state
exist then; activations are what differs): on a GPU the peak allocation over what was allocated
before the step; on a CPU, each configuration in a fresh process, the largest resident set sampled
during the step over the one before it. Step time: one process per model runs every chunk's steps
interleaved, round after round, and reports each chunk's median (machine noise hits them alike).
`chunk` is the video-side (GVE: target) rows per call; the text side (MEA's queries
with their 3 partial queries each; GVE's queries) takes `text_ratio` times as many.

    python benchmarks/grad_cache.py                      # CPU, tiny widths (about 2 minutes here)
    python benchmarks/grad_cache.py --size gpu --device cuda  # ViT-B/16 batch 64 x 64 frames; GVE-3B batch 64

The GPU rows are plain and chunks 64 and 8, one process per model (GVE's first writes a random 3B
model: about a minute); benchmarks/device_check.sh runs them after its own parts.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import torch

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
GEOMETRY = {  # model -> size -> (batch, frames)
    "clip4clip_mea": {"tiny": (16, 64), "gpu": (64, 64)},
    "gve": {"tiny": (16, 8), "gpu": (64, 8)},
}
CHUNKS = {"tiny": [0, 16, 4, 1], "gpu": [0, 64, 8]}  # 0: no caching


def dual_setup(root: Path, size: str, device: torch.device, batch: int, frames: int):
    from device_check import clip4clip_mea_model, video_batch

    module = clip4clip_mea_model(root, size == "tiny", max_text_len=248)  # MELON's Long-CLIP text length
    text = "walks and then turns " * 6
    events = [[f"event {k} of video {i}: a person {text}" for k in range(4)] for i in range(batch)]
    data = {**video_batch(batch, frames, module.encoder.image_size, device), "events": events}
    return module, data


def gve_setup(root: Path, size: str, device: torch.device, batch: int, frames: int):
    from gve_gpu import write_model, write_video

    from lit_retrieval.data.items import MediaItem
    from lit_retrieval.models.gve import AdapterConfig, InputConfig
    from lit_retrieval.modules import EmbedderConfig, GVERetrieval

    bf16 = device.type == "cuda"
    dtype = torch.bfloat16 if bf16 else torch.float32
    model_dir = write_model(root / "model", "3b" if size == "gpu" else "tiny", dtype)
    video = write_video(root / "clip.mp4")
    config = EmbedderConfig(
        str(model_dir),
        lora=AdapterConfig(),
        inputs=InputConfig(max_frames=frames),
        gradient_checkpointing=size == "gpu",
        dtype="bfloat16" if bf16 else "float32",
    )
    torch.manual_seed(0)
    module = GVERetrieval(config, cross_device=False)
    queries = [MediaItem(text=f"query {i}: a person walks a dog along the beach at sunset") for i in range(batch)]
    targets = [MediaItem(video=str(video), start=float(i % 3), end=float(i % 3) + 5.0) for i in range(2 * batch)]
    process = module.embedder.process
    data = {
        side: {k: v.to(device) for k, v in process(items).items()}
        for side, items in (("query", queries), ("target", targets))
    }
    data.update(
        num_negatives=1, ids=[str(i) for i in range(batch)], task="t2v", target_keys=torch.arange(batch, device=device)
    )
    return module, data


class PeakRSS(threading.Thread):
    """The process's largest resident set (MiB) while running, sampled every 0.5 ms from /proc."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak, self.running = rss_mib(), True

    def run(self) -> None:
        while self.running:
            self.peak = max(self.peak, rss_mib())
            time.sleep(0.0005)


def rss_mib() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def prepared(args: argparse.Namespace, tmp: Path):
    """The model (on the device, training), its batch and a step function that runs one step
    (forward, backward, AdamW) under `grad_cache` chunk `c` (0: plain) and returns its seconds."""
    from lit_retrieval.modules.grad_cache import GradCacheConfig

    warnings.filterwarnings("ignore")
    device = torch.device(args.device)
    batch, frames = GEOMETRY[args.model][args.size]
    setup = dual_setup if args.model == "clip4clip_mea" else gve_setup
    module, data = setup(tmp, args.size, device, batch, frames)
    module.to(device).train()
    optimizer = torch.optim.AdamW([p for p in module.parameters() if p.requires_grad], lr=1e-5)
    cuda = device.type == "cuda"

    def one_step(chunk: int) -> float:
        module.grad_cache = GradCacheConfig(chunk * args.text_ratio, chunk) if chunk else None
        if cuda:
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            out = module.training_step(data, 0)
        out["loss"].backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)  # gradients stay allocated: not part of the difference
        if cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter() - start

    return one_step, cuda


def memory_child(args: argparse.Namespace) -> dict:
    """Peak memory of one step at `args.chunk`, after a warm-up step (gradients and AdamW's state
    exist then): the GPU's peak allocation, or the CPU process's resident-set growth over the step
    (freed heap handed back first, so that the growth is the step's)."""
    with tempfile.TemporaryDirectory() as tmp:
        one_step, cuda = prepared(args, Path(tmp))
        one_step(args.chunk)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            one_step(args.chunk)
            peak = (torch.cuda.max_memory_allocated() - base) / 2**20
        else:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
            sampler = PeakRSS()
            base = sampler.peak
            sampler.start()
            one_step(args.chunk)
            sampler.running = False
            sampler.join()
            peak = sampler.peak - base
    return {"peak_mib": round(peak, 1)}


def timing_child(args: argparse.Namespace) -> dict:
    """Median step time of every chunk in `args.chunks`, their steps interleaved (round after round
    over the chunks) so that machine noise hits all of them alike; a chunk out of memory says so. On
    a GPU also each chunk's peak allocation over the step (exact per step, so one process serves)."""
    times: dict[int, list[float]] = {c: [] for c in args.chunks}
    peaks: dict[int, float] = {}
    failed: dict[int, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        one_step, cuda = prepared(args, Path(tmp))
        for round_ in range(args.steps + 1):  # round 0 warms up
            for chunk in [c for c in args.chunks if c not in failed]:
                if cuda:
                    torch.cuda.reset_peak_memory_stats()
                    base = torch.cuda.memory_allocated()
                try:
                    seconds = one_step(chunk)
                except torch.OutOfMemoryError as err:
                    failed[chunk] = f"out of memory: {str(err).splitlines()[0][:200]}"
                    torch.cuda.empty_cache()
                    continue
                if round_:
                    times[chunk].append(seconds)
                    if cuda:
                        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
                        peaks[chunk] = round(max(peaks.get(chunk, 0.0), peak), 1)
    steps = {str(c): failed.get(c) or round(statistics.median(times[c]), 4) for c in args.chunks}
    return {"step_s": steps, "peak_mib": {str(c): v for c, v in peaks.items()}}


def run_child(args: argparse.Namespace, model: str, extra: list[str]) -> dict:
    command = [sys.executable, __file__, "--model", model, "--size", args.size, "--device", args.device]
    command += ["--steps", str(args.steps), "--text-ratio", str(args.text_ratio), *extra]
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:  # e.g. out of memory without caching: a result too
        return {"failed": (done.stderr.strip().splitlines() or ["?"])[-1][:300]}
    return json.loads(lines[-1])


def measure(args: argparse.Namespace, model: str) -> list[dict]:
    """One row per chunk of `model`: step time (one process, interleaved) and peak memory (on a
    GPU from the same process; on a CPU a fresh process per chunk, its resident set its own)."""
    chunks = args.chunks or CHUNKS[args.size]
    timing = run_child(args, model, ["--child", "timing", "--chunks", *map(str, chunks)])
    batch, frames = GEOMETRY[model][args.size]
    rows = []
    for chunk in chunks:
        row = {"model": model, "chunk": chunk or None, "batch": batch, "frames": frames}
        step = timing.get("step_s", {}).get(str(chunk), timing.get("failed"))
        if not isinstance(step, float):
            rows.append({**row, "failed": step})
            continue
        if str(chunk) in timing.get("peak_mib", {}):
            peak = {"peak_mib": timing["peak_mib"][str(chunk)]}
        else:
            peak = run_child(args, model, ["--child", "memory", "--chunk", str(chunk)])
        rows.append({**row, **peak, "step_s": step})
    return rows


def with_ratios(rows: list[dict]) -> list[dict]:
    """Each row's peak memory and step time over its model's first row that ran: the plain step,
    or (where that ran out of memory) the cached step of the largest chunk; `ratio_to` names it."""
    for model in {r["model"] for r in rows}:
        ran = [r for r in rows if r["model"] == model and "failed" not in r]
        for row in ran:
            row["ratio_to"] = f"chunk {ran[0]['chunk']}" if ran[0]["chunk"] else "plain"
            row["memory_ratio"] = round(row["peak_mib"] / max(ran[0]["peak_mib"], 1e-9), 3)
            row["time_ratio"] = round(row["step_s"] / ran[0]["step_s"], 3)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=["tiny", "gpu"], default="tiny")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--models", nargs="+", default=list(GEOMETRY), choices=list(GEOMETRY))
    parser.add_argument("--chunks", nargs="+", type=int, help="video-side chunks (0: plain); default by --size")
    parser.add_argument("--text-ratio", type=int, default=4, help="text-side rows per chunk over video-side rows")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds allowed to one configuration")
    parser.add_argument("--child", choices=["memory", "timing"], help=argparse.SUPPRESS)
    parser.add_argument("--model", choices=list(GEOMETRY), help=argparse.SUPPRESS)
    parser.add_argument("--chunk", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(memory_child(args) if args.child == "memory" else timing_child(args)))
        return
    rows = [row for model in args.models for row in measure(args, model)]
    device = torch.cuda.get_device_name(0) if args.device.startswith("cuda") and torch.cuda.is_available() else "cpu"
    print(json.dumps({"benchmark": "grad_cache", "size": args.size, "device": device, "rows": with_ratios(rows)}))


if __name__ == "__main__":
    main()
