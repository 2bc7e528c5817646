"""Vectorised retrieval ranks and summaries from a full score matrix (rows = texts, cols = videos).

Ranks are 1-based. Tie rule (`ties`): "optimistic" counts only strictly higher scores (rank = 1 +
#greater), "pessimistic" also counts equal-scored negatives, "average" counts half of them. Unlike
torchmetrics' retrieval metrics, negative scores are ordinary scores here (docs/melon.md, "Retrieval metrics").

Video-to-text with several captions per video: a video's rank is the rank of its *best-scored*
caption among all captions (1 + #other-video captions scoring above it), the usual "first correct
caption" rule; this is stricter than CLIP4Clip's group-maximum rule (CLIP4Clip's metrics.py). Videos
without any caption get no video-to-text rank.
"""

from __future__ import annotations

from typing import Literal

import torch

Ties = Literal["optimistic", "pessimistic", "average"]
RECALL_KS = (1, 5, 10)


def tie_rank(greater: torch.Tensor, equal_negatives: torch.Tensor, ties: Ties) -> torch.Tensor:
    if ties == "optimistic":
        extra = torch.zeros_like(greater)
    elif ties == "pessimistic":
        extra = equal_negatives
    elif ties == "average":
        extra = equal_negatives / 2
    else:
        raise ValueError(f"unknown tie rule {ties!r}; choose optimistic, pessimistic or average")
    return 1.0 + greater + extra


def text_to_video_ranks(
    scores: torch.Tensor, targets: torch.Tensor, ties: Ties = "optimistic", chunk: int = 4096
) -> torch.Tensor:
    """Rank of video `targets[i]` in row i of `scores` [Q, V], as float [Q]."""
    ranks = []
    for rows, tgt in zip(scores.split(chunk), targets.split(chunk)):
        positive = rows.gather(1, tgt.unsqueeze(1))
        greater = (rows > positive).sum(1).double()
        equal = (rows == positive).sum(1).double() - 1
        ranks.append(tie_rank(greater, equal, ties))
    return torch.cat(ranks) if ranks else scores.new_zeros(0, dtype=torch.float64)


def video_to_text_ranks(
    scores: torch.Tensor, targets: torch.Tensor, ties: Ties = "optimistic", chunk: int = 4096
) -> torch.Tensor:
    """Per video with at least one caption, the rank of its best caption in column `v`, as float."""
    num_videos = scores.shape[1]
    positive = scores.gather(1, targets.unsqueeze(1)).squeeze(1)
    best = torch.full((num_videos,), float("-inf"), dtype=scores.dtype, device=scores.device)
    best = best.scatter_reduce(0, targets, positive, reduce="amax")
    has_caption = torch.zeros(num_videos, dtype=torch.bool, device=scores.device)
    has_caption[targets] = True
    positives_at_best = torch.zeros(num_videos, dtype=torch.float64, device=scores.device)
    positives_at_best.index_add_(0, targets, (positive == best[targets]).double())
    greater = torch.zeros(num_videos, dtype=torch.float64, device=scores.device)
    equal = torch.zeros(num_videos, dtype=torch.float64, device=scores.device)
    for rows in scores.split(chunk):
        greater += (rows > best).sum(0).double()
        equal += (rows == best).sum(0).double()
    return tie_rank(greater, equal - positives_at_best, ties)[has_caption]


def summarize_ranks(ranks: torch.Tensor, ks: tuple[int, ...] = RECALL_KS) -> dict[str, float]:
    """R@K (percent), Rsum (sum of the R@K), MdR and MnR (numpy's median: mean of middle two)."""
    if ranks.numel() == 0:
        raise ValueError("no ranks to summarise (empty score matrix)")
    ranks = ranks.double()
    out = {f"R@{k}": float((ranks <= k).double().mean() * 100) for k in ks}
    out["Rsum"] = sum(out[f"R@{k}"] for k in ks)
    out["MdR"] = float(torch.quantile(ranks, 0.5))
    out["MnR"] = float(ranks.mean())
    return out


def retrieval_metrics(
    scores: torch.Tensor, targets: torch.Tensor | None = None, ties: Ties = "optimistic"
) -> dict[str, float]:
    """Both directions from a text x video matrix; `targets[i]` is text i's video (default: i).

    Keys: `t2v/R@1`, ..., `t2v/MnR`, `v2t/R@1`, ..., `v2t/MnR`.
    """
    if scores.ndim != 2:
        raise ValueError(f"scores must be [texts, videos], got shape {tuple(scores.shape)}")
    if targets is None:
        if scores.shape[0] != scores.shape[1]:
            raise ValueError(f"a non-square {tuple(scores.shape)} matrix needs text-to-video targets")
        targets = torch.arange(scores.shape[0], device=scores.device)
    targets = targets.to(device=scores.device, dtype=torch.long)
    if targets.shape != (scores.shape[0],):
        raise ValueError(f"targets must have one entry per text row ({scores.shape[0]}), got {tuple(targets.shape)}")
    if targets.numel() and (targets.min() < 0 or targets.max() >= scores.shape[1]):
        raise ValueError(f"targets must index the {scores.shape[1]} video columns")
    if not torch.isfinite(scores).all():
        raise ValueError("scores contain NaN or infinite values")
    out = {f"t2v/{k}": v for k, v in summarize_ranks(text_to_video_ranks(scores, targets, ties)).items()}
    out.update({f"v2t/{k}": v for k, v in summarize_ranks(video_to_text_ranks(scores, targets, ties)).items()})
    return out
