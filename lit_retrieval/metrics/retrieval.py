"""`RetrievalMetrics`: a torchmetrics Metric over score-matrix rows, synchronised across ranks."""

from __future__ import annotations

import torch
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

from lit_retrieval.metrics.ranking import Ties, V2TRule, retrieval_metrics


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
