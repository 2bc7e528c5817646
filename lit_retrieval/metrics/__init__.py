"""Retrieval metrics: `ranking` (R@k, MdR, MnR of a score matrix; numpy and torch only) and `RetrievalMetrics`
(a torchmetrics Metric), imported on first use (PEP 562): torchmetrics imports transformers, which
`lit-retrieval metrics` does not need."""

from typing import Any

from lit_retrieval.metrics.ranking import retrieval_metrics, text_to_video_ranks, video_to_text_ranks

__all__ = ["RetrievalMetrics", "retrieval_metrics", "text_to_video_ranks", "video_to_text_ranks"]


def __getattr__(name: str) -> Any:
    if name != "RetrievalMetrics":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from lit_retrieval.metrics.retrieval import RetrievalMetrics

    return RetrievalMetrics
