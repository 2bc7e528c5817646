"""Retrieve-then-rerank vs full pairwise scoring (`metrics.rerank`): seconds per query of a
tightTransf cross encoder scoring the whole gallery, and of an indexable retriever (exact
blockwise dot-product top K) plus the cross encoder on the top K only, at several gallery sizes
in one run. Prints one JSON line with the speed-ups and the retriever's recall ceiling.

Full scoring is timed on `--full-queries` queries (its cost is linear in the queries), the rerank
path on `--queries`. The cross encoder has random weights (`--width`, `--layers`, `--frames`):
the timing does not depend on what it learned. Retriever texts are their video's embedding plus
noise, so the ceiling is a retriever's, not a constant."""

from __future__ import annotations

import argparse
import json
import time
from types import SimpleNamespace

import torch

from lit_retrieval.metrics.rerank import rerank_ranks
from lit_retrieval.models.heads.tight import TightTransfHead
from lit_retrieval.modules.reranking import candidate_scorer


def retriever_embeddings(videos: int, queries: int, dim: int, noise: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Unit video vectors and, for the first `queries` videos, a noisy unit text vector each."""
    g = torch.Generator().manual_seed(0)
    gallery = torch.nn.functional.normalize(torch.randn(videos, dim, generator=g), dim=1)
    texts = gallery[:queries] + torch.randn(queries, dim, generator=g) * (noise / dim**0.5)
    return torch.nn.functional.normalize(texts, dim=1), gallery


def seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run(args: argparse.Namespace) -> dict:
    torch.manual_seed(0)
    head = TightTransfHead(layers=args.layers, max_frames=args.frames, dropout=0.0, init_from_text=False)
    head.bind(SimpleNamespace(embed_dim=args.width, text_blocks=lambda: None))
    head.eval()
    budget = args.memory_mb * 2**20
    rows = []
    for size in args.galleries:
        g = torch.Generator().manual_seed(size)
        text = torch.randn(args.queries, args.width, generator=g)
        gallery = {
            "frames": torch.randn(size, args.frames, args.width, generator=g),
            "mask": torch.ones(size, args.frames),
        }
        retriever_text, retriever_gallery = retriever_embeddings(size, args.queries, 256, args.noise)
        targets = torch.arange(args.queries)
        with torch.no_grad():
            full = seconds(lambda: head.score_blocks(text[: args.full_queries], gallery, budget)) / args.full_queries
            scorer = candidate_scorer(head, text, gallery, budget)
            holder = {}
            rerank = seconds(
                lambda: holder.update(result=rerank_ranks(retriever_text, retriever_gallery, targets, scorer, args.k))
            )
        rerank /= args.queries
        rows.append(
            {
                "gallery": size,
                "full_s_per_query": round(full, 4),
                "rerank_s_per_query": round(rerank, 5),
                "speedup": round(full / rerank, 1),
                "recall_ceiling": holder["result"].metrics()["rerank/recall_ceiling"],
            }
        )
    return {
        "benchmark": "rerank_speed",
        "head": f"tightTransf {args.layers} layers, width {args.width}, {args.frames} frames",
        "k": args.k,
        "threads": torch.get_num_threads(),
        "results": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--galleries", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--queries", type=int, default=32, help="queries of the rerank path")
    parser.add_argument("--full-queries", type=int, default=1, help="queries scored against the whole gallery")
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--frames", type=int, default=8)
    parser.add_argument("--noise", type=float, default=5.0, help="retriever text noise (sigma per unit norm)")
    parser.add_argument("--memory-mb", type=int, default=512)
    args = parser.parse_args()
    print(json.dumps(run(args)))


if __name__ == "__main__":
    main()
