"""Gradient caching's memory/speed trade (`model.grad_cache`, lit_retrieval/modules/grad_cache.py): peak
memory and step time of one training step (forward, backward, AdamW) at a fixed batch, plain and at
several chunk sizes, for CLIP4Clip+MEA at MELON's geometry (batch 16, 64 frames, 248-token queries;
supp. B.1) and for GVE (text queries against 8-frame videos plus one hard negative each). Prints one
JSON line: a row per (model, chunk) and each row's ratios to the plain step of the same model.

Each configuration runs in a fresh process, so its peak is its own: on a GPU the peak allocated
memory (`torch.cuda.max_memory_allocated`), on a CPU the growth of the process's peak resident set
over a step (after the model, the batch, the gradients and AdamW's state exist; activations are
what differs). `chunk` is the video-side (GVE: target) rows per call; the text side (MEA's queries
with their 3 partial queries each; GVE's queries) takes `text_ratio` times as many.

    python benchmarks/grad_cache.py                      # CPU, tiny widths (about 2 minutes here)
    python benchmarks/grad_cache.py --size gpu --device cuda  # ViT-B/16 batch 64 x 64 frames; GVE-3B batch 64

The GPU rows are plain and chunks 64 and 8 (each GVE process first writes a random 3B model: about
a minute); benchmarks/device_check.sh runs them after its own parts.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
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

    from lit_retrieval.data.media import MediaItem
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


def child(args: argparse.Namespace) -> dict:
    """One configuration: `args.steps` timed steps after one warm-up step."""
    from lit_retrieval.modules.grad_cache import GradCacheConfig

    warnings.filterwarnings("ignore")
    device = torch.device(args.device)
    batch, frames = GEOMETRY[args.model][args.size]
    with tempfile.TemporaryDirectory() as tmp:
        setup = dual_setup if args.model == "clip4clip_mea" else gve_setup
        module, data = setup(Path(tmp), args.size, device, batch, frames)
        module.to(device).train()
        if args.chunk:
            module.grad_cache = GradCacheConfig(args.chunk * args.text_ratio, args.chunk)
        optimizer = torch.optim.AdamW([p for p in module.parameters() if p.requires_grad], lr=1e-5)
        bf16 = device.type == "cuda"

        def one_step() -> float:
            if bf16:
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                out = module.training_step(data, 0)
            out["loss"].backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=False)  # gradients stay allocated: not part of the difference
            if bf16:
                torch.cuda.synchronize(device)
            return time.perf_counter() - start

        one_step()  # gradients and AdamW's state exist from here on
        if bf16:
            torch.cuda.reset_peak_memory_stats(device)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        times = [one_step() for _ in range(args.steps)]
        if bf16:
            peak = torch.cuda.max_memory_allocated(device) / 2**20
        else:
            peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024  # KiB -> MiB
    return {"model": args.model, "chunk": args.chunk or None, "batch": batch, "frames": frames,
            "step_s": round(statistics.median(times), 4), "peak_mib": round(peak, 1)}  # fmt: skip


def run_child(args: argparse.Namespace, model: str, chunk: int) -> dict:
    command = [sys.executable, __file__, "--child", "--model", model, "--chunk", str(chunk)]
    command += ["--size", args.size, "--device", args.device, "--steps", str(args.steps)]
    command += ["--text-ratio", str(args.text_ratio)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:  # e.g. out of memory without caching: a result too
        return {"model": model, "chunk": chunk or None, "failed": (done.stderr.strip().splitlines() or ["?"])[-1][:300]}
    return json.loads(lines[-1])


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
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", choices=list(GEOMETRY), help=argparse.SUPPRESS)
    parser.add_argument("--chunk", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    rows = [run_child(args, model, chunk) for model in args.models for chunk in args.chunks or CHUNKS[args.size]]
    device = torch.cuda.get_device_name(0) if args.device.startswith("cuda") and torch.cuda.is_available() else "cpu"
    print(json.dumps({"benchmark": "grad_cache", "size": args.size, "device": device, "rows": with_ratios(rows)}))


if __name__ == "__main__":
    main()
