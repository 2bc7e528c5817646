"""Cost of an MEA training step against a standard one (MELON Eq. 9 vs. Eq. 2 alone) with the same
tiny CPU CLIP, batch of 16, 64 frames and 248 text positions: forward, backward and optimiser step.
Steps of the two kinds alternate so machine noise hits both alike. Prints one JSON line.

The ratio depends on the text encoder's share of a step, since MEA encodes 3 partial queries per
video (in the same text forward) and no extra video. Two frame sizes are measured: 32 px frames
(17 tokens per frame, text-heavy) and 64 px frames (65 tokens per frame, closer to Long-CLIP-B/16,
where a 224 px frame has 197 tokens and video dominates even more)."""

from __future__ import annotations

import json
import time
import warnings

import numpy as np
import torch

from lit_retrieval.data.datasets.synthetic import make_event_pool
from lit_retrieval.models.encoders import CLIPEncoder
from lit_retrieval.models.encoders.tiny import tiny_clip_config
from lit_retrieval.models.heads import MeanPHead
from lit_retrieval.modules import DualEncoderRetrieval, MEAConfig

BATCH, FRAMES, TEXT_LEN, STEPS = 16, 64, 248, 6
SIZES = (32, 64)


def make_batch(rng: np.random.Generator, size: int) -> dict:
    pool = [e.description for e in make_event_pool(200, rng)]
    events = [[pool[i] for i in rng.choice(len(pool), size=rng.integers(3, 6), replace=False)] for _ in range(BATCH)]
    return {
        "index": torch.arange(BATCH),
        "events": events,
        "frames": torch.randn(BATCH, FRAMES, 3, size, size),
        "frame_mask": torch.ones(BATCH, FRAMES, dtype=torch.bool),
        "skipped": [],
    }


def make_module(mea: MEAConfig | None, size: int) -> tuple[DualEncoderRetrieval, torch.optim.Optimizer]:
    torch.manual_seed(0)
    config = tiny_clip_config(image_size=size, max_positions=TEXT_LEN).to_dict()
    module = DualEncoderRetrieval(CLIPEncoder(config=config, max_text_len=TEXT_LEN), MeanPHead(), mea=mea)
    return module, torch.optim.AdamW(module.parameters(), lr=1e-4)


def step(module: DualEncoderRetrieval, optimizer: torch.optim.Optimizer, batch: dict, index: int) -> float:
    start = time.perf_counter()
    optimizer.zero_grad()
    module.training_step(batch, index)["loss"].backward()
    optimizer.step()
    return time.perf_counter() - start


def measure(size: int) -> dict:
    batch = make_batch(np.random.default_rng(0), size)
    standard, mea = make_module(None, size), make_module(MEAConfig(), size)
    for k in range(2):  # warm-up
        step(*standard, batch, k), step(*mea, batch, k)
    times = {"standard": [], "mea": []}
    for k in range(STEPS):
        times["standard"].append(step(*standard, batch, k))
        times["mea"].append(step(*mea, batch, k))
    median = {k: float(np.median(v)) for k, v in times.items()}
    return {
        "standard_s": round(median["standard"], 3),
        "mea_s": round(median["mea"], 3),
        "ratio": round(median["mea"] / median["standard"], 3),
    }


def main() -> None:
    warnings.filterwarnings("ignore")  # self.log outside a Trainer
    torch.set_num_threads(2)
    results = {f"{size}px": measure(size) for size in SIZES}
    print(
        json.dumps(
            {
                "benchmark": "mea_step",
                "batch": BATCH,
                "frames": FRAMES,
                "text_positions": TEXT_LEN,
                "partial_queries_per_video": 3,
                **results,
                "target_ratio": 1.6,
            }
        )
    )


if __name__ == "__main__":
    main()
