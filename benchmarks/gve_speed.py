"""GVE on CPU: training-step time and peak memory with and without gradient checkpointing, and
embedding throughput (items/s) for text and for 8-frame videos at batch 1 vs. batch 16.
Prints one JSON line.

The model is a random Qwen2.5-VL with the real geometry at a CPU-sized width (`--hidden-size`,
`--layers`), LoRA r 16 on the language model. A step embeds 8 text queries and 8 videos of 8
frames (1 fps over 8 s, 112 x 112 per frame after the processor: 64 merged tokens per frame
pair) and applies the InfoNCE of GVE Eq. 1. Peak memory is the resident-set growth of a fresh
process per setting (CPU has no allocator statistics); medians of repeated runs.
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

BATCH, STEPS = 8, 4


def _media(root: Path) -> tuple[list, list]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from media import write_noise_video

    from lit_retrieval.data.items import MediaItem

    videos = [
        MediaItem(video=str(write_noise_video(root / f"v{i}.mp4", seconds=8, width=112, height=112, seed=i)))
        for i in range(16)
    ]
    texts = [MediaItem(text=f"a small object number {i} moves across a plain background and stops") for i in range(16)]
    return texts, videos


def _embedder(model: str, checkpointing: bool, lora: bool = True):
    from lit_retrieval.models.gve import GVEEmbedder, InputConfig, AdapterConfig

    inputs = InputConfig(max_frames=8, video_min_pixels=112 * 112, video_max_pixels=112 * 112, max_tokens=4096)
    return GVEEmbedder(
        model,
        lora=AdapterConfig() if lora else None,
        inputs=inputs,
        gradient_checkpointing=checkpointing,
        dtype="float32",
        attn_implementation="sdpa",
    )


def train_steps(model: str, media_dir: str, checkpointing: bool) -> dict:
    """Run in a fresh process: median step time and resident-memory growth during the steps."""
    from lit_retrieval.losses.contrastive import MultimodalInfoNCE

    texts, videos = _media(Path(media_dir))
    embedder = _embedder(model, checkpointing).train()
    loss_fn = MultimodalInfoNCE(cross_device=False)
    optimizer = torch.optim.AdamW([p for p in embedder.parameters() if p.requires_grad], lr=1e-4)
    query, target = embedder.process(texts[:BATCH]), embedder.process(videos[:BATCH])
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times = []
    for _ in range(STEPS):
        start = time.perf_counter()
        optimizer.zero_grad()
        loss_fn(embedder(query), embedder(target))["loss"].backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    return {
        "step_s": statistics.median(times[1:]),
        "peak_growth_mb": peak / 1024,
        "tokens": int(target["input_ids"].numel()),
    }


def throughput(model: str, items: list, batch_size: int, repeats: int = 2) -> float:
    embedder = _embedder(model, False, lora=False).eval()
    embedder.embed(items[:batch_size], batch_size=batch_size)  # warm-up
    start = time.perf_counter()
    for _ in range(repeats):
        embedder.embed(items, batch_size=batch_size)
    return repeats * len(items) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--child", nargs=3, metavar=("MODEL", "MEDIA", "CHECKPOINTING"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    if args.child:
        print(json.dumps(train_steps(args.child[0], args.child[1], args.child[2] == "1")))
        return
    from lit_retrieval.models.gve.tiny import save_tiny_qwen25vl

    with tempfile.TemporaryDirectory() as tmp:
        model = str(
            save_tiny_qwen25vl(
                Path(tmp) / "model", hidden_size=args.hidden_size, layers=args.layers, max_pixels=112 * 112
            )
        )
        media = Path(tmp) / "media"
        media.mkdir()
        texts, videos = _media(media)
        runs = {}
        for checkpointing in ("0", "1"):
            out = subprocess.run(
                [sys.executable, __file__, "--child", model, str(media), checkpointing],
                capture_output=True,
                text=True,
                check=True,
            )
            runs[checkpointing] = json.loads(out.stdout.strip().splitlines()[-1])
        rates = {
            f"{kind}_b{b}_items_per_s": throughput(model, items, b)
            for kind, items in (("text", texts), ("video8f", videos))
            for b in (1, 16)
        }
    plain, ckpt = runs["0"], runs["1"]
    print(
        json.dumps(
            {
                "benchmark": "gve_speed",
                "hidden_size": args.hidden_size,
                "layers": args.layers,
                "batch": BATCH,
                "video_tokens_per_batch": plain["tokens"],
                "step_s": round(plain["step_s"], 4),
                "step_s_checkpointing": round(ckpt["step_s"], 4),
                "checkpointing_time_ratio": round(ckpt["step_s"] / plain["step_s"], 3),
                "peak_growth_mb": round(plain["peak_growth_mb"], 1),
                "peak_growth_mb_checkpointing": round(ckpt["peak_growth_mb"], 1),
                "checkpointing_memory_ratio": round(ckpt["peak_growth_mb"] / max(plain["peak_growth_mb"], 1e-9), 3),
                **{k: round(v, 2) for k, v in rates.items()},
                "video_batch16_speedup": round(rates["video8f_b16_items_per_s"] / rates["video8f_b1_items_per_s"], 2),
                "text_batch16_speedup": round(rates["text_b16_items_per_s"] / rates["text_b1_items_per_s"], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
