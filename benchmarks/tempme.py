"""TempMe's token merging: tokens per video before and after merging, and the step-time and
video-encoding saving against CLIP4Clip-meanP at equal frames. Prints one JSON line.

Both models use the same 12-block ViT with ViT-B/32's token geometry (224 px, 32 px patches: 50
tokens per frame, 12 frames per video) at a small width so it runs on a CPU; batch 8. TempMe is
timed with its default training (LoRA and frame positions only) and with every weight trained.
Medians of interleaved runs; compare the ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import warnings

import torch

from lit_retrieval.models.encoders import CLIPEncoder
from lit_retrieval.models.encoders.tiny import save_tiny_clip
from lit_retrieval.models.heads import MeanPHead, TempMeHead
from lit_retrieval.modules import DualEncoderRetrieval

BATCH, FRAMES, WIDTH, STEPS, ROUNDS = 8, 12, 128, 3, 3


def build(path: str, kind: str) -> DualEncoderRetrieval:
    torch.manual_seed(0)
    head = MeanPHead() if kind == "meanP" else TempMeHead(num_frames=FRAMES, train_backbone=kind == "tempme_full")
    return DualEncoderRetrieval(CLIPEncoder(pretrained=path), head)


def step_times(module: DualEncoderRetrieval, batch: dict) -> tuple[list[float], list[float]]:
    optimizer = torch.optim.AdamW([p for p in module.parameters() if p.requires_grad], lr=1e-4)
    train, encode = [], []
    for _ in range(STEPS):
        start = time.perf_counter()
        optimizer.zero_grad()
        module.training_step(batch, 0)["loss"].backward()
        optimizer.step()
        train.append(time.perf_counter() - start)
        with torch.no_grad():
            start = time.perf_counter()
            module.encoder.encode_video(batch["frames"], batch["frame_mask"])
            encode.append(time.perf_counter() - start)
    return train, encode


def main() -> None:
    global WIDTH
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--width", type=int, default=WIDTH, help="ViT width (ViT-B: 768)")
    WIDTH = parser.parse_args().width
    warnings.filterwarnings("ignore")
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        path = str(save_tiny_clip(tmp, image_size=224, patch_size=32, width=WIDTH, layers=12, embed_dim=WIDTH))
        kinds = ["meanP", "tempme_lora", "tempme_full"]
        modules = {k: build(path, k) for k in kinds}
        batch = {
            "index": torch.arange(BATCH),
            "skipped": [],
            "frames": torch.randn(BATCH, FRAMES, 3, 224, 224),
            "frame_mask": torch.ones(BATCH, FRAMES, dtype=torch.bool),
            "events": [[f"clip {i}: a red disc slides left", "then a blue box rises"] for i in range(BATCH)],
        }
        train = {k: [] for k in kinds}
        encode = {k: [] for k in kinds}
        for _ in range(ROUNDS):  # interleaved, so machine noise hits every model
            for kind, module in modules.items():
                t, e = step_times(module, batch)
                train[kind] += t[1:]
                encode[kind] += e[1:]
        counts = modules["tempme_lora"].head.merger.token_counts
        trainable = {k: sum(p.numel() for p in m.parameters() if p.requires_grad) for k, m in modules.items()}
    median = {k: statistics.median(v) for k, v in train.items()}
    median_encode = {k: statistics.median(v) for k, v in encode.items()}
    print(
        json.dumps(
            {
                "benchmark": "tempme",
                "batch": BATCH,
                "frames": FRAMES,
                "width": WIDTH,
                "tokens_per_video": {
                    "input": counts[0],
                    "after_each_block": counts[1:],
                    "output": counts[-1],
                    "ratio": round(counts[-1] / counts[0], 3),
                },
                "train_step_s": {k: round(v, 3) for k, v in median.items()},
                "train_step_ratio_vs_meanP": {k: round(v / median["meanP"], 2) for k, v in median.items()},
                "encode_video_s": {k: round(v, 3) for k, v in median_encode.items()},
                "encode_ratio_vs_meanP": {k: round(v / median_encode["meanP"], 2) for k, v in median_encode.items()},
                "trainable_parameters": trainable,
            }
        )
    )


if __name__ == "__main__":
    main()
