"""Cost of every similarity head on a tiny CPU CLIP, relative to CLIP4Clip-meanP. Prints one JSON line.

- train_step_ratio: forward + backward + optimiser step of a DualEncoderRetrieval with the head
  (batch 16, 12 frames of 32 px, InfoNCE), median of interleaved runs, over meanP's.
- eval_ratio: scoring a 1,000 x 1,000 split from precomputed encoder features (the head's video
  and text representations, then `score_blocks` under the default 2 GiB budget), over meanP's.
- peak_mb chunked / unchunked: peak resident memory added while scoring a 300 x 300 split with a
  64 MiB block budget vs. a single block, each in a fresh process: the kernel's peak-RSS mark is
  reset just before scoring (/proc/self/clear_refs) and read after (VmHWM - VmRSS before).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
from pathlib import Path
import time
import warnings

import numpy as np
import torch

from lit_retrieval.models.encoders import CLIPEncoder
from lit_retrieval.models.encoders.tiny import tiny_clip_config
from lit_retrieval.models.features import TextFeatures, VideoFeatures
from lit_retrieval.models.heads import (
    MeanPHead,
    MeVTRHead,
    PAUHead,
    SeqLSTMHead,
    SeqTransfHead,
    TempMeHead,
    TightTransfHead,
    TS2NetHead,
    UATVRHead,
    UCoFiAHead,
    XCLIPHead,
)
from lit_retrieval.modules import DualEncoderRetrieval

HEADS = {
    "meanP": lambda: MeanPHead(),
    "seqLSTM": lambda: SeqLSTMHead(),
    "seqTransf": lambda: SeqTransfHead(),
    "tightTransf": lambda: TightTransfHead(),
    "xclip": lambda: XCLIPHead(max_words=77, max_frames=12),
    "ts2net": lambda: TS2NetHead(max_frames=12),
    "mevtr": lambda: MeVTRHead(num_events=4),
    "ucofia": lambda: UCoFiAHead(max_frames=12, max_words=77),
    "uatvr": lambda: UATVRHead(),
    "pau": lambda: PAUHead(),
    "tempme": lambda: TempMeHead(num_frames=FRAMES, merge_layers=[1], merge_frames=[2]),  # the 2-block tiny ViT
}
BATCH, FRAMES, SIZE, WORDS, STEPS = 16, 12, 32, 32, 5


def encoder() -> CLIPEncoder:
    torch.manual_seed(0)
    return CLIPEncoder(config=tiny_clip_config(image_size=SIZE).to_dict())


def train_step_seconds(name: str) -> list[float]:
    module = DualEncoderRetrieval(encoder(), HEADS[name]())
    optimizer = torch.optim.AdamW([p for p in module.parameters() if p.requires_grad], lr=1e-4)
    rng = np.random.default_rng(0)
    batch = {
        "index": torch.arange(BATCH),
        "skipped": [],
        "frames": torch.randn(BATCH, FRAMES, 3, SIZE, SIZE),
        "frame_mask": torch.ones(BATCH, FRAMES, dtype=torch.bool),
        "events": [[f"event {rng.integers(1000)} with a red disc moving left"] * 3 for _ in range(BATCH)],
    }
    times = []
    for k in range(STEPS + 1):
        start = time.perf_counter()
        optimizer.zero_grad()
        module.training_step(batch, k)["loss"].backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return times[1:]


def features(num: int, dim: int = 64) -> tuple[TextFeatures, VideoFeatures]:
    g = torch.Generator().manual_seed(0)
    text = TextFeatures(
        pooled=torch.randn(num, dim, generator=g),
        tokens=torch.randn(num, WORDS, dim, generator=g),
        mask=torch.ones(num, WORDS, dtype=torch.bool),
    )
    video = VideoFeatures(
        frames=torch.randn(num, FRAMES, dim, generator=g),
        mask=torch.ones(num, FRAMES, dtype=torch.bool),
        patches=torch.randn(num, FRAMES, (SIZE // 8) ** 2, dim, generator=g),
    )
    return text, video


@torch.no_grad()
def eval_seconds(name: str, num: int = 1000) -> float:
    head = HEADS[name]()
    head.bind(encoder())
    head.eval()
    text, video = features(num)
    start = time.perf_counter()
    head.score_blocks(head.encode_text(text), head.encode_video(video), 2 * 2**30)
    return time.perf_counter() - start


@torch.no_grad()
def _peak(name: str, budget: int, queue: mp.Queue) -> None:
    torch.set_num_threads(2)
    head = HEADS[name]()
    head.bind(encoder())
    head.eval()
    text, video = features(300)
    rep_t, rep_v = head.encode_text(text), head.encode_video(video)
    before = _status_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak-RSS mark
    head.score_blocks(rep_t, rep_v, budget)
    queue.put((_status_kb("VmHWM") - before) / 1024)


def _status_kb(field: str) -> int:
    line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith(field + ":"))
    return int(line.split()[1])


def peak_mb(name: str, budget: int) -> float:
    context = mp.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_peak, args=(name, budget, queue))
    process.start()
    process.join()
    return round(queue.get(), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--heads", nargs="+", choices=list(HEADS), default=list(HEADS), help="meanP is always measured (the reference)"
    )
    names = list(dict.fromkeys(["meanP", *parser.parse_args().heads]))
    warnings.filterwarnings("ignore")
    torch.set_num_threads(2)
    steps = {name: [] for name in names}
    for _ in range(2):  # interleave the heads so machine noise hits all of them
        for name in names:
            steps[name] += train_step_seconds(name)
    train = {name: float(np.median(t)) for name, t in steps.items()}
    evals = {name: eval_seconds(name) for name in names}
    results = {}
    for name in names:
        results[name] = {
            "train_step_s": round(train[name], 3),
            "train_step_ratio": round(train[name] / train["meanP"], 2),
            "eval_1000_s": round(evals[name], 3),
            "eval_ratio": round(evals[name] / evals["meanP"], 1),
        }
        if not HEADS[name]().indexable:
            results[name]["peak_mb_300_chunked_64mb"] = peak_mb(name, 64 * 2**20)
            results[name]["peak_mb_300_unchunked"] = peak_mb(name, 2**40)
    print(json.dumps({"benchmark": "heads", "batch": BATCH, "frames": FRAMES, "results": results}))


if __name__ == "__main__":
    main()
