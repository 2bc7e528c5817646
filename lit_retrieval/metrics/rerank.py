"""Retrieve-then-rerank: an indexable retriever picks each query's top K videos, a pairwise scorer
re-scores only those (InternVideo2's `k_test` re-ranking with its matching head).

A query's final list is its K candidates in the pairwise scorer's order, followed by the other
videos in the retriever's order. So a positive inside the top K has rank 1 + the candidates the
scorer puts above it (ties by the tie rule among the candidates); a positive outside it keeps its
retriever rank (at least K + 1). With K covering the gallery every video is a candidate and the
ranks equal full pairwise scoring. The recall ceiling is the share of queries whose video is
inside the top K: the re-ranked R@K can never exceed it.

The retriever's top K come from `blockwise_search` (exact, memory-bounded); the pairwise scorer
sees `query_rows` x K pairs at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from lit_retrieval.errors import ConfigError
from lit_retrieval.metrics.blockwise import Relevance, blockwise_search
from lit_retrieval.metrics.ranking import Ties, row_slices, summarize_ranks, tie_rank

CandidateScorer = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""(query rows `[n]`, their candidate video columns `[n, K]`) -> pairwise scores `[n, K]`."""


@dataclass
class RerankConfig:
    """`evaluation.rerank`: the head scores each query's top `k` videos of the retriever.
    `full_scoring: false` skips the full pairwise scoring on test (its `t2v/...`, `v2t/...`
    metrics), the cost the re-ranking avoids; only the re-ranked metrics are then reported."""

    k: int = 100
    full_scoring: bool = True

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ConfigError(f"evaluation.rerank.k must be >= 1, got {self.k}")


@dataclass
class RerankResult:
    ranks: torch.Tensor  # [Q] float64 text-to-video rank of each query's video
    inside: torch.Tensor  # [Q] bool: the video is among the retriever's top K
    k: int

    def metrics(self) -> dict[str, float]:
        """`rerank/t2v/R@1`, ... and `rerank/recall_ceiling` (percent of queries with their video
        inside the top K)."""
        out = {f"rerank/t2v/{key}": value for key, value in summarize_ranks(self.ranks).items()}
        out["rerank/recall_ceiling"] = float(self.inside.double().mean() * 100)
        return out


def rerank_ranks(
    queries: torch.Tensor,
    gallery: torch.Tensor,
    targets: torch.Tensor,
    score_candidates: CandidateScorer,
    k: int,
    ties: Ties = "optimistic",
    memory_mb: float = 256.0,
    query_rows: int = 1024,
) -> RerankResult:
    """Ranks of `targets` (query i's video column) after re-ranking the retriever's top `k`
    (`queries` [Q, D] . `gallery` [V, D]) with `score_candidates` (module docstring)."""
    if k < 1:
        raise ValueError(f"rerank k must be >= 1, got {k}")
    targets = targets.long().cpu()
    search = blockwise_search(queries, gallery, Relevance.single(targets), k=k, memory_mb=memory_mb, ties=ties)
    k = search.topk.shape[1]
    ranks = torch.empty(len(targets), dtype=torch.float64)
    inside = torch.zeros(len(targets), dtype=torch.bool)
    for rows in row_slices(len(targets), query_rows):
        candidates = search.topk[rows]
        scores = score_candidates(torch.arange(rows.start, rows.stop), candidates).double().cpu()
        hit = candidates == targets[rows, None]
        positive = scores.masked_fill(~hit, float("-inf")).amax(1, keepdim=True)
        greater = (scores > positive).sum(1).double()
        equal = (scores == positive).sum(1).double() - 1
        inside[rows] = hit.any(1)
        outside = search.ranks[rows].clamp_min(k + 1)
        ranks[rows] = torch.where(inside[rows], tie_rank(greater, equal, ties), outside)
    return RerankResult(ranks, inside, k)
