"""Exact retrieval evaluation of N queries x M gallery items without an N x M matrix.

Query rows are scored in blocks whose score matrix stays within `memory_mb`; from each block only
the top-k gallery indices and the exact rank of every relevant item are kept, so 100,000 x
100,000 runs in bounded memory. Ranks follow `lit_retrieval.metrics.ranking`'s tie rules:
`optimistic` counts strictly higher scores, `pessimistic` also equal ones (other than the item),
`average` half of those.
Relevant items may be several per query (`Relevance`); other relevant items above one count
against its rank, as in a ranked list. Scores are float32 (float64 inputs stay float64), with
autocast off, whatever precision the embeddings come in (`lit_retrieval.precision`).
`scored_search` ranks the same way from any scorer's rows (a pairwise head's blocks, UVRB).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from lit_retrieval.metrics.ranking import Ties, tie_rank
from lit_retrieval.precision import autocast_off, full_precision


@dataclass
class Relevance:
    """Relevant gallery columns per query in CSR form: query i's are `items[offsets[i]:offsets[i+1]]`."""

    items: torch.Tensor  # [P] long
    offsets: torch.Tensor  # [N + 1] long

    @classmethod
    def from_lists(cls, lists: list[list[int]]) -> Relevance:
        counts = torch.tensor([len(x) for x in lists], dtype=torch.long)
        offsets = torch.zeros(len(lists) + 1, dtype=torch.long)
        offsets[1:] = counts.cumsum(0)
        items = torch.tensor([j for x in lists for j in x], dtype=torch.long)
        return cls(items, offsets)

    @classmethod
    def single(cls, targets: torch.Tensor) -> Relevance:
        return cls(targets.long(), torch.arange(len(targets) + 1))

    @property
    def owners(self) -> torch.Tensor:
        """The query of each relevant item, `[P]`."""
        return torch.repeat_interleave(torch.arange(len(self.offsets) - 1), self.offsets.diff())


@dataclass
class BlockwiseResult:
    topk: torch.Tensor  # [N, k] gallery indices, best first
    topk_scores: torch.Tensor  # [N, k]
    ranks: torch.Tensor  # [P] float rank of each relevant item, aligned with `Relevance.items`
    relevance: Relevance


def blockwise_search(
    queries: torch.Tensor,
    gallery: torch.Tensor,
    relevance: Relevance | None = None,
    k: int = 10,
    memory_mb: float = 256.0,
    ties: Ties = "optimistic",
) -> BlockwiseResult:
    """Top-k by inner product for every query, and the exact ranks of the relevant items."""
    queries, gallery = full_precision(queries), full_precision(gallery)
    gallery_t = gallery.t()

    def score(start: int, stop: int) -> torch.Tensor:
        with autocast_off(queries.device):
            return queries[start:stop] @ gallery_t

    return scored_search(score, queries.shape[0], gallery.shape[0], relevance, k, memory_mb, ties)


RowScores = Callable[[int, int], torch.Tensor]
"""(first query, stop) -> the score rows `[stop - first, M]` of those queries against the gallery."""


def scored_search(
    score: RowScores,
    n: int,
    m: int,
    relevance: Relevance | None = None,
    k: int = 10,
    memory_mb: float = 256.0,
    ties: Ties = "optimistic",
) -> BlockwiseResult:
    """`blockwise_search` of `n` queries against `m` gallery items for any scorer (a pairwise
    head's `score_blocks`, UVRB): query rows are asked of `score` so that a block's scores stay
    within `memory_mb`, and only their top-k and the relevant items' ranks are kept."""
    if relevance is not None and len(relevance.offsets) != n + 1:
        raise ValueError(f"relevance has {len(relevance.offsets) - 1} queries, expected {n}")
    if relevance is not None and relevance.items.numel() and (relevance.items.min() < 0 or relevance.items.max() >= m):
        raise ValueError(f"relevant items must index the {m} gallery rows")
    k = min(k, m)
    rows = max(1, int(memory_mb * 2**20 // (m * 10)))  # scores, two bool comparisons, a gathered copy
    topk = torch.empty(n, k, dtype=torch.long)
    topk_scores = torch.empty(n, k)
    ranks = torch.empty(0 if relevance is None else relevance.items.numel(), dtype=torch.float64)
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        scores = score(start, stop)
        if not torch.isfinite(scores).all():
            raise ValueError(f"non-finite scores for queries {start}-{stop - 1}")
        best = scores.topk(k, dim=1)
        topk_scores = topk_scores.to(scores.dtype)  # float64 scores stay float64
        topk[start:stop], topk_scores[start:stop] = best.indices.cpu(), best.values.cpu()
        if relevance is None:
            continue
        lo, hi = int(relevance.offsets[start]), int(relevance.offsets[stop])
        one_each = hi - lo == stop - start and bool((relevance.offsets[start : stop + 1].diff() == 1).all())
        for chunk in range(lo, hi, rows):
            end = min(hi, chunk + rows)
            owners = relevance.owners[chunk:end] - start
            items = relevance.items[chunk:end].to(scores.device)
            mine = scores if one_each else scores[owners.to(scores.device)]  # one relevant item per row: no copy
            own = mine.gather(1, items[:, None])
            greater = (mine > own).sum(1).double()
            ranks[chunk:end] = tie_rank(greater, (mine == own).sum(1).double() - 1, ties).cpu()
    return BlockwiseResult(topk, topk_scores, ranks, relevance or Relevance.from_lists([[]] * n))


def query_values(result: BlockwiseResult, metric: str) -> torch.Tensor:
    """Each query's term of `metric` (`R@k`, `hit@k` or `P@1`) as `ranked_metrics` averages it, NaN
    for a query without a relevant item: the per-query values a paired test compares."""
    name, _, k = ("hit@1" if metric == "P@1" else metric).partition("@")
    if name not in ("R", "hit") or not k.isdigit():
        raise ValueError(f"metric must be R@k, hit@k or P@1, got {metric!r}")
    rel = result.relevance
    counts = rel.offsets.diff()
    within = torch.zeros(len(counts), dtype=torch.float64).index_add_(0, rel.owners, (result.ranks <= int(k)).double())
    values = within / counts.clamp(min=1) if name == "R" else (within > 0).double()
    return torch.where(counts > 0, values, torch.full_like(values, float("nan")))


def ranked_metrics(result: BlockwiseResult, ks: tuple[int, ...] = (1, 5, 10)) -> dict[str, float]:
    """Fractions in [0, 1] averaged over queries with at least one relevant item:
    `R@k` = share of a query's relevant items ranked within k; `P@1` = whether the top item is
    relevant; `hit@k` = whether any relevant item is within k; `MdR`/`MnR` of the best-ranked
    relevant item."""
    rel = result.relevance
    counts = rel.offsets.diff()
    keep = counts > 0
    if not keep.any():
        raise ValueError("no query has a relevant item")
    owners = rel.owners
    n = len(counts)
    out: dict[str, float] = {}
    for k in ks:
        out[f"R@{k}"] = float(query_values(result, f"R@{k}")[keep].mean())
        out[f"hit@{k}"] = float(query_values(result, f"hit@{k}")[keep].mean())
    best = torch.full((n,), float("inf"), dtype=torch.float64).scatter_reduce(0, owners, result.ranks, reduce="amin")[
        keep
    ]
    out["P@1"] = out["hit@1"] if 1 in ks else float((best == 1).double().mean())
    out["MdR"] = float(torch.quantile(best.double(), 0.5))
    out["MnR"] = float(best.double().mean())
    return out
