"""Vectorised retrieval ranks and summaries from a full score matrix (rows = texts, cols = videos).

Ranks are 1-based. Tie rule (`ties`): "optimistic" counts only strictly higher scores (rank = 1 +
#greater), "pessimistic" also counts equal-scored negatives, "average" counts half of them. Unlike
torchmetrics' retrieval metrics, negative scores are ordinary scores here (docs/melon.md, "Retrieval metrics").

Video-to-text with several captions per video (`V2TRule`), text-to-video always one query per
caption:

- `strict` (ours, the default, keys `v2t/...`): a video's rank is the rank of its *best-scored*
  caption among all captions (1 + #other-video captions scoring above it), the usual "first correct
  caption" rule;
- `group_max` (CLIP4Clip's `metrics.py`, `tensor_video_to_text_sim`, keys `v2t_group_max/...`): the
  captions are grouped by video and each group scores a video by its best caption (the max over the
  group's captions), so a video's rank is 1 + #other videos whose best caption beats its own best
  caption. An other video with many close captions counts once, so this rank is never worse than
  `strict`'s. CLIP4Clip breaks ties by sort order; here the tie rule applies to tied groups.

Videos without any caption get no video-to-text rank (and form no group).

A score matrix is a tensor or a `ScoreRows` (rows produced on demand, e.g. re-scored ones,
`lit_retrieval.metrics.rescoring`); every function reads it `chunk` rows at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Union

import torch

Ties = Literal["optimistic", "pessimistic", "average"]
V2TRule = Literal["strict", "group_max"]
V2T_PREFIX: dict[str, str] = {"strict": "v2t", "group_max": "v2t_group_max"}
RECALL_KS = (1, 5, 10)


@dataclass
class ScoreRows:
    """A `[texts, videos]` score matrix whose rows are computed on demand: `rows(index)` gives the
    rows at `index` (a slice or a long tensor), so a derived matrix never exists in full."""

    shape: tuple[int, int]
    rows: Callable[[slice | torch.Tensor], torch.Tensor]


Scores = Union[torch.Tensor, ScoreRows]


def take_rows(scores: Scores, index: slice | torch.Tensor) -> torch.Tensor:
    return scores[index] if isinstance(scores, torch.Tensor) else scores.rows(index)


def row_slices(num_rows: int, chunk: int) -> list[slice]:
    return [slice(start, min(num_rows, start + chunk)) for start in range(0, num_rows, chunk)]


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
    scores: Scores, targets: torch.Tensor, ties: Ties = "optimistic", chunk: int = 4096
) -> torch.Tensor:
    """Rank of video `targets[i]` in row i of `scores` [Q, V], as float [Q]."""
    ranks = []
    for index in row_slices(scores.shape[0], chunk):
        rows = take_rows(scores, index)
        positive = rows.gather(1, targets[index].to(rows.device).unsqueeze(1))
        greater = (rows > positive).sum(1).double()
        equal = (rows == positive).sum(1).double() - 1
        ranks.append(tie_rank(greater, equal, ties))
    return torch.cat(ranks) if ranks else torch.zeros(0, dtype=torch.float64, device=targets.device)


def positive_scores(scores: Scores, targets: torch.Tensor, chunk: int) -> torch.Tensor:
    """`scores[i, targets[i]]` for every row, `[Q]`."""
    parts = [
        take_rows(scores, index).gather(1, targets[index].unsqueeze(1)).squeeze(1)
        for index in row_slices(len(targets), chunk)
    ]
    return torch.cat(parts) if parts else torch.zeros(0, device=targets.device)


def video_to_text_ranks(
    scores: Scores, targets: torch.Tensor, ties: Ties = "optimistic", chunk: int = 4096, rule: V2TRule = "strict"
) -> torch.Tensor:
    """Per video with at least one caption, its rank under `rule` (module docstring), as float."""
    num_videos = scores.shape[1]
    positive = positive_scores(scores, targets, chunk)
    best = torch.full((num_videos,), float("-inf"), dtype=positive.dtype, device=targets.device)
    best = best.scatter_reduce(0, targets, positive, reduce="amax")
    has_caption = torch.zeros(num_videos, dtype=torch.bool, device=targets.device)
    has_caption[targets] = True
    if rule == "strict":
        greater, equal = strict_counts(scores, targets, positive, best, chunk)
    elif rule == "group_max":
        greater, equal = group_max_counts(scores, targets, best, chunk)
    else:
        raise ValueError(f"unknown video-to-text rule {rule!r}; choose strict or group_max")
    return tie_rank(greater, equal, ties)[has_caption]


def strict_counts(
    scores: Scores, targets: torch.Tensor, positive: torch.Tensor, best: torch.Tensor, chunk: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per video, the captions of other videos above / level with its best caption."""
    num_videos = len(best)
    positives_at_best = torch.zeros(num_videos, dtype=torch.float64, device=best.device)
    positives_at_best.index_add_(0, targets, (positive == best[targets]).double())
    greater = torch.zeros(num_videos, dtype=torch.float64, device=best.device)
    equal = torch.zeros(num_videos, dtype=torch.float64, device=best.device)
    for index in row_slices(len(targets), chunk):
        rows = take_rows(scores, index)
        greater += (rows > best).sum(0).double()
        equal += (rows == best).sum(0).double()
    return greater, equal - positives_at_best


def group_max_counts(
    scores: Scores, targets: torch.Tensor, best: torch.Tensor, chunk: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per video v, the other videos' caption groups whose best caption is above / level with v's
    best caption (CLIP4Clip's group maximum). The rows are read `chunk` at a time in group order;
    the last group of a block carries its flags into the next block, where it may continue."""
    num_videos = len(best)
    order = torch.argsort(targets, stable=True)
    grouped = targets[order]
    greater = torch.zeros(num_videos, dtype=torch.float64, device=best.device)
    equal = torch.zeros(num_videos, dtype=torch.float64, device=best.device)

    def count(videos: torch.Tensor, above: torch.Tensor, level: torch.Tensor) -> None:
        own = torch.arange(len(videos), device=best.device)
        above[own, videos] = False  # a video's own group is not a competitor
        level[own, videos] = False
        greater.add_(above.sum(0).double())
        equal.add_((level & ~above).sum(0).double())

    carry: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
    for index in row_slices(len(order), chunk):
        videos, local = torch.unique_consecutive(grouped[index], return_inverse=True)
        rows = take_rows(scores, order[index])
        above = group_any(rows > best, local, len(videos))
        level = group_any(rows == best, local, len(videos))
        if carry is not None and carry[0][0] == videos[0]:  # the carried group continues here
            above[0] |= carry[1][0]
            level[0] |= carry[2][0]
        elif carry is not None:
            count(*carry)
        count(videos[:-1], above[:-1], level[:-1])
        carry = (videos[-1:], above[-1:], level[-1:])
    if carry is not None:
        count(*carry)
    return greater, equal


def group_any(flags: torch.Tensor, groups: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Per group, whether any of its rows is set: `[num_groups, columns]` from `[rows, columns]`."""
    counts = torch.zeros(num_groups, flags.shape[1], device=flags.device).index_add_(0, groups, flags.float())
    return counts > 0


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
    scores: Scores, targets: torch.Tensor | None = None, ties: Ties = "optimistic", v2t_rule: V2TRule = "strict"
) -> dict[str, float]:
    """Both directions from a text x video matrix; `targets[i]` is text i's video (default: i).

    Keys: `t2v/R@1`, ..., `t2v/MnR`, and `v2t/R@1`, ..., `v2t/MnR` (`strict` rule) or
    `v2t_group_max/R@1`, ... (`group_max`, module docstring).
    """
    if len(scores.shape) != 2:
        raise ValueError(f"scores must be [texts, videos], got shape {tuple(scores.shape)}")
    device = scores.device if isinstance(scores, torch.Tensor) else None
    if targets is None:
        if scores.shape[0] != scores.shape[1]:
            raise ValueError(f"a non-square {tuple(scores.shape)} matrix needs text-to-video targets")
        targets = torch.arange(scores.shape[0], device=device)
    targets = targets.to(device=device, dtype=torch.long)
    if targets.shape != (scores.shape[0],):
        raise ValueError(f"targets must have one entry per text row ({scores.shape[0]}), got {tuple(targets.shape)}")
    if targets.numel() and (targets.min() < 0 or targets.max() >= scores.shape[1]):
        raise ValueError(f"targets must index the {scores.shape[1]} video columns")
    if isinstance(scores, torch.Tensor) and not torch.isfinite(scores).all():
        raise ValueError("scores contain NaN or infinite values")
    out = {f"t2v/{k}": v for k, v in summarize_ranks(text_to_video_ranks(scores, targets, ties)).items()}
    v2t = video_to_text_ranks(scores, targets, ties, rule=v2t_rule)
    out.update({f"{V2T_PREFIX[v2t_rule]}/{k}": v for k, v in summarize_ranks(v2t).items()})
    return out
