"""Retrieval metrics over score-matrix rows that each rank scores for its own queries.

`RetrievalMetrics` (a torchmetrics Metric) keeps the rows and gathers them to every rank: the whole
query x gallery matrix on every rank, 40 GB in fp32 at 10^5 x 10^5. `blockwise_metrics` computes the
same metrics (strict video-to-text rule) from the row blocks without keeping them: a first pass
gives each row's text-to-video rank and positive score, the ranks merge these (O(queries) values) into
each video's best caption score, and a second pass counts per video the captions above / level
with it (the blocks kept from the first pass while they fit the evaluation's memory budget, else scored
again), summed over the ranks. Memory per rank: the first pass's blocks kept up to the budget, one
block and its comparison temporaries (about 3.4 x the budget measured, docs/benchmarks.md), and
O(queries + videos) values; never O(queries x videos).
"""

from __future__ import annotations

import torch
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

from collections.abc import Callable, Iterable

from lit_retrieval.distributed import gather_lengths, sum_over_ranks
from lit_retrieval.metrics.ranking import V2T_PREFIX, Ties, V2TRule, retrieval_metrics, summarize_ranks, tie_rank
from lit_retrieval.metrics.ranking import text_to_video_ranks

Blocks = Iterable[tuple[slice, torch.Tensor]]


def first_occurrence(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted unique `ids` and, for each, the position of its first occurrence in `ids`."""
    unique, inverse = torch.unique(ids, return_inverse=True)
    first = torch.full((len(unique),), len(ids), device=ids.device, dtype=torch.long)
    first = first.scatter_reduce(0, inverse, torch.arange(len(ids), device=ids.device), reduce="amin")
    return unique, first


class RetrievalMetrics(Metric):
    """Accumulates rows of the text x gallery score matrix and computes R@1/5/10, Rsum, MdR, MnR
    in both directions (see `lit_retrieval.metrics.ranking`; `v2t_rule`: the multi-caption V2T rule).

    Each process updates with its own query rows scored against the *whole* gallery (same column
    order on every rank) and the gallery column of each query's video. Rows are concatenated across
    processes on `compute`; `query_ids` removes the duplicate rows a distributed sampler adds to
    even out shards, and orders the rows.
    """

    full_state_update = False
    higher_is_better = None

    def __init__(self, ties: Ties = "optimistic", v2t_rule: V2TRule = "strict", **kwargs) -> None:
        super().__init__(**kwargs)
        self.ties = ties
        self.v2t_rule = v2t_rule
        self.add_state("scores", default=[], dist_reduce_fx="cat")
        self.add_state("targets", default=[], dist_reduce_fx="cat")
        self.add_state("query_ids", default=[], dist_reduce_fx="cat")

    def update(self, scores: torch.Tensor, targets: torch.Tensor, query_ids: torch.Tensor | None = None) -> None:
        if query_ids is None:
            seen = sum(len(t) for t in self.targets)
            query_ids = torch.arange(seen, seen + len(targets), device=scores.device)
        self.scores.append(scores.detach().float())
        self.targets.append(targets.long())
        self.query_ids.append(query_ids.long())

    def compute(self) -> dict[str, float]:
        scores = dim_zero_cat(self.scores)
        targets = dim_zero_cat(self.targets)
        ids = dim_zero_cat(self.query_ids)
        _, first = first_occurrence(ids)
        return retrieval_metrics(scores[first], targets[first], self.ties, self.v2t_rule)


def blockwise_metrics(
    blocks: Callable[[], Blocks],
    targets: torch.Tensor,
    query_ids: torch.Tensor,
    num_videos: int,
    ties: Ties,
    budget_bytes: int,
    synced: bool = True,
) -> tuple[dict[str, float], torch.Tensor]:
    """`retrieval_metrics` (strict video-to-text rule) of the rows `blocks()` yields (row slice,
    `[rows, num_videos]` scores; it is called again for the second pass unless the first pass's blocks
    fit `budget_bytes`), and this rank's text-to-video ranks. `targets` / `query_ids`: this rank's
    rows'; with `synced` the rows of every rank are merged (a query id met twice, the distributed
    sampler's padding, counts once), which every rank must join."""
    device = targets.device
    ranks, positives, kept, kept_bytes = [], [], [], 0
    for rows, scores in blocks():
        row_targets = targets[rows].to(scores.device)
        ranks.append(text_to_video_ranks(scores, row_targets, ties))
        positives.append(scores.gather(1, row_targets[:, None]).squeeze(1).double())
        kept_bytes += scores.numel() * scores.element_size()
        kept = kept + [(rows, scores)] if kept is not None and kept_bytes <= budget_bytes else None
    local_ranks = torch.cat(ranks).to(device) if ranks else torch.zeros(0, dtype=torch.float64, device=device)
    positive = torch.cat(positives).to(device) if positives else torch.zeros(0, dtype=torch.float64, device=device)
    if synced:
        all_ids, offset = gather_lengths(query_ids.long())
        all_targets, all_ranks, all_positive = (gather_lengths(t)[0] for t in (targets.long(), local_ranks, positive))
    else:
        all_ids, offset, all_targets, all_ranks, all_positive = (
            query_ids.long(),
            0,
            targets.long(),
            local_ranks,
            positive,
        )
    _, first = first_occurrence(all_ids)
    counted = torch.zeros(len(all_ids), dtype=torch.bool, device=device)
    counted[first] = True
    mine = counted[offset : offset + len(targets)]  # this rank's rows that count (first occurrences)
    unique_targets, unique_positive = all_targets[first], all_positive[first]
    best = torch.full((num_videos,), float("-inf"), dtype=torch.float64, device=device)
    best = best.scatter_reduce(0, unique_targets, unique_positive, reduce="amax")
    greater = torch.zeros(num_videos, dtype=torch.float64, device=device)
    equal = torch.zeros(num_videos, dtype=torch.float64, device=device)
    for rows, scores in kept if kept is not None else blocks():
        counts = mine[rows].to(scores.device)
        counting = scores if bool(counts.all()) else scores[counts]
        column_best = best.to(scores.device, scores.dtype)  # exact: the maxima of float32 scores
        greater += (counting > column_best).sum(0).to(device, torch.float64)
        equal += (counting == column_best).sum(0).to(device, torch.float64)
    if synced:
        sum_over_ranks(greater)
        sum_over_ranks(equal)
    at_best = torch.zeros(num_videos, dtype=torch.float64, device=device)
    at_best.index_add_(0, unique_targets, (unique_positive == best[unique_targets]).double())
    has_caption = torch.zeros(num_videos, dtype=torch.bool, device=device)
    has_caption[unique_targets] = True
    out = {f"t2v/{k}": v for k, v in summarize_ranks(all_ranks[first]).items()}
    v2t = tie_rank(greater, equal - at_best, ties)[has_caption]
    out.update({f"{V2T_PREFIX['strict']}/{k}": v for k, v in summarize_ranks(v2t).items()})
    return out, local_ranks
