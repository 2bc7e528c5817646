"""Retrieve-then-rerank on `test` (`evaluation.rerank`), the evaluator's side: the retriever's
vectors of each batch (`retriever_reps`: CLIP4Clip's meanP, parameter-free and indexable, on the
module's own text and frame features), the head's scores of each query's candidates
(`candidate_scorer`), and the re-ranked metrics merged over processes (`reranked`); the ranks
themselves are `lit_retrieval.metrics.rerank`'s."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import lightning as L
import torch

from lit_retrieval.metrics.rerank import CandidateScorer, RerankResult, rerank_ranks
from lit_retrieval.models.heads.base import SimilarityHead, map_rep, rep_device
from lit_retrieval.models.heads.meanp import MeanPHead
from lit_retrieval.precision import full_precision, full_precision_scoring

if TYPE_CHECKING:  # the evaluator calls this module
    from lit_retrieval.modules.evaluation import EvalSplit, RetrievalEvaluator


def retriever_reps(
    evaluator: RetrievalEvaluator, model: L.LightningModule, batch: dict[str, Any], stage: str
) -> dict[str, torch.Tensor] | None:
    """With `rerank` on `test`, the retriever's unit vectors of a batch's queries and videos:
    CLIP4Clip's meanP (parameter-free, indexable) on the module's own text and frame features,
    encoded in the evaluation's precision; `None` otherwise."""
    if evaluator.config.rerank is None or stage != "test":
        return None
    meanp = MeanPHead()
    with evaluator.encoding(model):
        text = model.encode_queries(batch["events"])
        video = model.encoder.encode_video(batch["frames"], batch["frame_mask"])
    return {"text": meanp.encode_text(text), "video": meanp.encode_video(video)}


def reranked(evaluator: RetrievalEvaluator, model: L.LightningModule, split: EvalSplit) -> dict[str, float]:
    """`rerank/t2v/...` and `rerank/recall_ceiling` of this process's queries (the retriever's
    top K scored by the head), merged over processes."""
    config, evaluation = evaluator.config.rerank, evaluator.config
    assert config is not None
    if split.retriever is None:
        raise ValueError(f"evaluation.rerank: {type(model).__name__} collects no retriever vectors")
    scorer = candidate_scorer(model.head, split.text, split.gallery, evaluation.budget_bytes)
    retriever_text, retriever_gallery = split.retriever["text"], split.retriever["video"]
    local = rerank_ranks(
        retriever_text, retriever_gallery, split.targets, scorer, config.k, evaluation.ties, evaluation.memory_mb
    )
    merged = evaluator.merge_queries(model, split, {"ranks": local.ranks, "inside": local.inside.double()})
    return RerankResult(merged["ranks"].cpu(), merged["inside"].cpu() > 0, local.k).metrics()


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
