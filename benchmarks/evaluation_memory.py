"""Peak memory of the evaluator's metrics (`metrics.retrieval`, issue 57 item 8) at N queries x N
videos: `blockwise_metrics` (the evaluator's path: row blocks of `--memory-mb`, no matrix held) and
`RetrievalMetrics` (the path before: every row kept, concatenated and indexed on `compute`, the
whole matrix gathered to every rank under DDP). Each size runs in a fresh process whose peak
resident set above the imports and embeddings is reported. The full path runs only where its
matrix fits (`--full-up-to`); above, its peak is extrapolated from the measured bytes per score.
Prints one JSON line."""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import torch

from lit_retrieval.metrics.retrieval import RetrievalMetrics, blockwise_metrics


def peak_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def blocks_of(texts: torch.Tensor, videos: torch.Tensor, rows: int):
    def blocks():
        for start in range(0, len(texts), rows):
            yield slice(start, start + rows), texts[start : start + rows] @ videos.T

    return blocks


def measure(n: int, dim: int, memory_mb: int, path: str) -> dict:
    g = torch.Generator().manual_seed(0)
    videos = torch.nn.functional.normalize(torch.randn(n, dim, generator=g), dim=1)
    texts = torch.nn.functional.normalize(videos + torch.randn(n, dim, generator=g) * (3 / dim**0.5), dim=1)
    targets = torch.arange(n)
    blocks = blocks_of(texts, videos, max(1, memory_mb * 2**20 // (4 * n)))

    warm = blocks_of(texts[:64], videos[:64], 16)  # BLAS and the kernels loaded before the baseline
    blockwise_metrics(warm, targets[:64], targets[:64], 64, "optimistic", 0, synced=False)
    before, start = peak_bytes(), time.perf_counter()
    if path == "blockwise":
        metrics, _ = blockwise_metrics(blocks, targets, targets, n, "optimistic", memory_mb * 2**20, synced=False)
    else:
        metric = RetrievalMetrics()
        for index, scores in blocks():
            metric.update(scores, targets[index], targets[index])
        metrics = metric.compute()
    return {
        "peak_above_inputs_mb": round((peak_bytes() - before) / 2**20, 1),
        "seconds": round(time.perf_counter() - start, 1),
        "t2v/R@1": round(metrics["t2v/R@1"], 3),
        "v2t/R@1": round(metrics["v2t/R@1"], 3),
    }


def in_fresh_process(n: int, dim: int, memory_mb: int, path: str) -> dict:
    args = ["--child", path, "--n", str(n), "--dim", str(dim), "--memory-mb", str(memory_mb)]
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--memory-mb", type=int, default=256)
    parser.add_argument("--full-up-to", type=int, default=10_000)
    parser.add_argument("--child", choices=["blockwise", "full"])
    parser.add_argument("--n", type=int)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.n, args.dim, args.memory_mb, args.child)))
        return
    out: dict = {"dim": args.dim, "memory_mb": args.memory_mb, "sizes": {}}
    bytes_per_score = None
    for n in args.sizes:
        row = {"blockwise": in_fresh_process(n, args.dim, args.memory_mb, "blockwise")}
        if n <= args.full_up_to:
            row["full"] = in_fresh_process(n, args.dim, args.memory_mb, "full")
            bytes_per_score = row["full"]["peak_above_inputs_mb"] * 2**20 / n**2
        elif bytes_per_score is not None:
            row["full_extrapolated_mb"] = round(bytes_per_score * n**2 / 2**20)
        out["sizes"][str(n)] = row
    out["full_bytes_per_score"] = bytes_per_score
    print(json.dumps(out))


if __name__ == "__main__":
    main()
