"""Retrieve-then-rerank on `test` (`evaluation.rerank`), as functions of plain inputs the evaluator calls:
the retriever's vectors of a batch (`retriever_reps`: CLIP4Clip's meanP, parameter-free and indexable,
on the module's own text and frame features), the head's scores of each query's candidates
(`candidate_scorer`), and the ranks of one process's queries (`rerank_split`); the evaluator merges
them over processes. The ranks themselves are `lit_retrieval.metrics.rerank`'s."""

from __future__ import annotations

from typing import Any

import torch

from lit_retrieval.metrics.ranking import Ties
from lit_retrieval.metrics.rerank import CandidateScorer, RerankResult, rerank_ranks
from lit_retrieval.models.heads.base import SimilarityHead, map_rep, rep_device
from lit_retrieval.models.heads.meanp import MeanPHead
from lit_retrieval.precision import full_precision, full_precision_scoring


def retriever_reps(text: torch.Tensor, video: torch.Tensor) -> dict[str, torch.Tensor]:
    """The retriever's unit vectors of a batch's queries and videos: CLIP4Clip's meanP on the
    module's text features and per-frame video features."""
    meanp = MeanPHead()
    return {"text": meanp.encode_text(text), "video": meanp.encode_video(video)}


def rerank_split(
    head: SimilarityHead,
    text: Any,
    gallery: Any,
    retriever: dict[str, torch.Tensor],
    targets: torch.Tensor,
    k: int,
    ties: Ties,
    memory_mb: int,
) -> RerankResult:
    """The ranks of one process's queries (`text`, `retriever["text"]`) when the retriever's top `k`
    of the gallery (`retriever["video"]`, the head's `gallery`) are re-scored by `head`."""
    scorer = candidate_scorer(head, text, gallery, memory_mb * 2**20)
    return rerank_ranks(retriever["text"], retriever["video"], targets, scorer, k, ties, memory_mb)


def candidate_scorer(head: SimilarityHead, text: Any, gallery: Any, budget_bytes: int) -> CandidateScorer:
    """`head`'s float32 scores of each query's candidate videos (`lit_retrieval.metrics.rerank`):
    aligned (text, video) pairs through `score_pairs`, at most `budget_bytes` of pairwise working
    memory at a time, where the head has a pair form of its own; else one query's candidates at a
    time through `score` (the generic `score_pairs` would score every pair of the block)."""
    paired = type(head).score_pairs is not SimilarityHead.score_pairs
    pick = lambda rep, index: map_rep(rep, lambda t: full_precision(t[index.to(t.device)]))  # noqa: E731

    def score(rows: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        n, k = candidates.shape
        with full_precision_scoring(head, rep_device(gallery)):
            if not paired:
                return torch.cat(
                    [head.score(pick(text, rows[i : i + 1]), pick(gallery, candidates[i])) for i in range(n)]
                )
            queries, videos = rows.repeat_interleave(k), candidates.flatten()
            per_pair = head.pair_bytes(pick(text, queries[:1]), pick(gallery, videos[:1]))
            step = max(1, budget_bytes // max(1, per_pair))
            parts = [
                head.score_pairs(pick(text, queries[start : start + step]), pick(gallery, videos[start : start + step]))
                for start in range(0, len(queries), step)
            ]
            return torch.cat(parts).view(n, k)

    return score
