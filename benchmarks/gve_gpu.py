"""GVE training throughput on one GPU: a Qwen2.5-VL-3B-sized model with random weights (bf16,
flash-attention-2 when installed, gradient checkpointing, LoRA r 16), batch 8 of text queries
against 8-frame videos (640 x 360 frames, 200 x 28^2 pixel budget: about 720 visual tokens each).
Prints one JSON line: training tokens/s, step time, peak GPU memory.

Meant for a lent GPU machine (`benchmarks/device_check.sh` calls it); `--size tiny --device cpu`
runs the same code path on a CPU in seconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

from lit_retrieval.data.items import MediaItem
from lit_retrieval.losses.contrastive import MultimodalInfoNCE
from lit_retrieval.models.gve import GVEEmbedder, InputConfig, AdapterConfig
from lit_retrieval.models.gve.tiny import special_token_ids, tiny_config, tiny_processor


def qwen25vl_3b_config(processor) -> Qwen2_5_VLConfig:
    """Qwen2.5-VL-3B-Instruct's published architecture, with the test tokenizer's special ids."""
    return Qwen2_5_VLConfig(
        vocab_size=151936,
        hidden_size=2048,
        intermediate_size=11008,
        num_hidden_layers=36,
        num_attention_heads=16,
        num_key_value_heads=2,
        max_position_embeddings=128000,
        rope_theta=1000000.0,
        rope_scaling={"type": "mrope", "mrope_section": [16, 24, 24]},
        vision_config=dict(
            depth=32,
            hidden_size=1280,
            intermediate_size=3420,
            num_heads=16,
            out_hidden_size=2048,
            patch_size=14,
            spatial_merge_size=2,
            temporal_patch_size=2,
            window_size=112,
            fullatt_block_indexes=[7, 15, 23, 31],
            tokens_per_second=2,
        ),
        **special_token_ids(processor),
        tie_word_embeddings=True,
    )


def write_model(out: Path, size: str, dtype: torch.dtype) -> Path:
    processor = tiny_processor(min_pixels=4 * 784, max_pixels=256 * 784)
    config = qwen25vl_3b_config(processor) if size == "3b" else tiny_config(processor, hidden_size=64, layers=2)
    torch.manual_seed(0)
    with torch.device("meta" if size == "3b" else "cpu"):
        model = Qwen2_5_VLForConditionalGeneration(config)
    if size == "3b":  # random weights materialised directly in bf16 on the CPU, then saved
        model = model.to_empty(device="cpu").to(dtype)
        with torch.no_grad():
            for param in model.parameters():
                param.normal_(0.0, 0.02)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out


def write_video(path: Path, seconds: int = 8) -> Path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from media import write_noise_video

    return write_noise_video(path, seconds=seconds, fps=4, width=640, height=360)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", choices=["3b", "tiny"], default="3b")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    device = torch.device(args.device)
    bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = write_model(Path(tmp) / "model", args.size, torch.bfloat16 if bf16 else torch.float32)
        video = write_video(Path(tmp) / "clip.mp4")
        embedder = (
            GVEEmbedder(
                str(model_dir),
                lora=AdapterConfig(),
                inputs=InputConfig(),
                gradient_checkpointing=True,
                dtype="bfloat16" if bf16 else "float32",
                attn_implementation="auto",
            )
            .to(device)
            .train()
        )
        texts = [
            MediaItem(text=f"query {i}: a person walks a dog along the beach at sunset") for i in range(args.batch)
        ]
        videos = [MediaItem(video=str(video), start=0.0, end=8.0)] * args.batch
        query = {k: v.to(device) for k, v in embedder.process(texts).items()}
        target = {k: v.to(device) for k, v in embedder.process(videos).items()}
        tokens = int(query["attention_mask"].sum() + target["attention_mask"].sum())
        loss_fn = MultimodalInfoNCE(cross_device=False)
        optimizer = torch.optim.AdamW([p for p in embedder.parameters() if p.requires_grad], lr=3e-5, weight_decay=0.1)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        times = []
        for _ in range(args.steps):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            loss_fn(embedder(query), embedder(target))["loss"].backward()
            optimizer.step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - start)
        step = statistics.median(times[1:] if len(times) > 1 else times)
        print(
            json.dumps(
                {
                    "benchmark": "gve_gpu",
                    "size": args.size,
                    "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                    "dtype": "bf16" if bf16 else "fp32",
                    "attention": embedder.base_model.config._attn_implementation,
                    "batch": args.batch,
                    "tokens_per_step": tokens,
                    "step_s": round(step, 4),
                    "train_tokens_per_s": round(tokens / step, 1),
                    "peak_memory_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
                    if device.type == "cuda"
                    else None,
                }
            )
        )


if __name__ == "__main__":
    main()
