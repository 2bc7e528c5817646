"""Blockwise exact evaluation of N x M retrieval (`metrics.blockwise`): peak memory and time for
100,000 queries x 100,000 videos of 512-d embeddings, and, on a 5,000 x 5,000 subset, the same
metrics as the full-matrix path (`metrics.ranking.retrieval_metrics`). Prints one JSON line.
The large run happens in a fresh process whose peak resident set (embeddings and runtime
included) is reported. Texts are their video's embedding plus noise (sigma 5 per unit norm), so
R@1 is far from trivial."""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import torch

from lit_retrieval.metrics.blockwise import Relevance, blockwise_search, ranked_metrics
from lit_retrieval.metrics.ranking import retrieval_metrics


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def embeddings(n: int, dim: int, noise: float = 5.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Videos and their texts, generated in place (no full-size temporaries)."""
    g = torch.Generator().manual_seed(0)
    videos = torch.randn(n, dim, generator=g)
    videos /= videos.norm(dim=1, keepdim=True)
    texts = torch.randn(n, dim, generator=g).mul_(noise / dim**0.5).add_(videos)
    texts /= texts.norm(dim=1, keepdim=True)
    return texts, videos


def large_run(n: int, dim: int, memory_mb: float) -> dict:
    baseline = peak_mb()  # interpreter, torch and the package imported
    texts, videos = embeddings(n, dim)
    start = time.perf_counter()
    metrics = ranked_metrics(
        blockwise_search(texts, videos, Relevance.single(torch.arange(n)), k=10, memory_mb=memory_mb)
    )
    return {
        "seconds": round(time.perf_counter() - start, 1),
        "peak_rss_mb": round(peak_mb(), 1),
        "rss_after_imports_mb": round(baseline, 1),
        "R@1": round(metrics["R@1"], 4),
        "R@10": round(metrics["R@10"], 4),
        "MdR": metrics["MdR"],
        "MnR": round(metrics["MnR"], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--memory-mb", type=float, default=256)
    parser.add_argument("--subset", type=int, default=5000)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(large_run(args.n, args.dim, args.memory_mb)))
        return
    sub = args.subset
    texts, videos = embeddings(sub, args.dim)
    targets = torch.arange(sub)
    full = retrieval_metrics(texts @ videos.t(), targets)
    small = ranked_metrics(blockwise_search(texts, videos, Relevance.single(targets), memory_mb=16))
    same = (
        all(abs(small[f"R@{k}"] * 100 - full[f"t2v/R@{k}"]) < 1e-9 for k in (1, 5, 10))
        and small["MdR"] == full["t2v/MdR"]
        and abs(small["MnR"] - full["t2v/MnR"]) < 1e-9
    )
    child = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            "--n",
            str(args.n),
            "--dim",
            str(args.dim),
            "--memory-mb",
            str(args.memory_mb),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    large = json.loads(child.stdout.strip().splitlines()[-1])
    print(
        json.dumps(
            {
                "benchmark": "blockwise_eval",
                "n": args.n,
                "dim": args.dim,
                "memory_mb_budget": args.memory_mb,
                "full_matrix_would_need_mb": round(args.n * args.n * 4 / 2**20),
                **large,
                "subset": sub,
                "subset_equal_to_full_matrix": same,
                "subset_R@1": round(small["R@1"], 4),
                "subset_MnR": round(small["MnR"], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
