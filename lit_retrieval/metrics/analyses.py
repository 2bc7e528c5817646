"""The MELON analyses as evaluation options (Sec. 5.3, Fig. 5 and 6; supp. B.2, Tab. 5 and 6).

`AnalysesConfig` says which analyses run with an evaluation stage; the functions here turn per-query
ranks into the summaries that join `metrics.json`:

- Avg-Event R@1 (Sec. 5.3): each single event of a ground-truth query is used alone as a query;
  a video's value is the fraction of its events that retrieve it at rank 1, and Avg-Event R@1 is
  the mean over videos (with a fixed K this equals the mean over event positions of their R@1).
- slices (Fig. 5): text-to-video R@K of the full queries by number of events and by video length,
  and with `token_edges` by query length in the text tower's tokens (MELON Sec. 1: CLIP's 77
  positions truncate long multi-event queries; Long-CLIP's 248 keep them).
- event orders (Tab. 6) and query encodings (Tab. 5): the whole evaluation repeated with the
  query's events reversed/shuffled, or encoded with the other query mode.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from lit_retrieval.data.text.queries import EventOrder, QueryMode
from lit_retrieval.errors import ConfigError
from lit_retrieval.metrics.ranking import summarize_ranks


@dataclass
class AnalysesConfig:
    """Analyses run after the standard metrics of the listed `stages`.

    Args:
        stages: evaluation stages that run them (`val`, `test`).
        avg_event: Avg-Event R@1, overall and per number of events (MELON Fig. 6).
        slices: text-to-video metrics by number of events and by video length (Fig. 5).
        length_edges: bucket edges in seconds. The default follows the paper's groups: under
            5 min, 5-10 min, 10-30 min, 30 min and longer (Sec. 5.3 and supp. A).
        token_edges: with `slices`, query-length bucket edges in tokens (the concatenated query
            under the encoder's tokenizer, before truncation): `[77]` splits the queries CLIP's
            77 positions hold (`tokens_1-77`) from those it truncates (`tokens_78+`). Empty (the
            default): no token slices. A query of exactly `e` tokens fits `e` positions, so an
            edge closes its bucket.
        event_orders: `reversed` and/or `shuffled` query events (Tab. 6); a shuffled query never
            keeps the original order when K >= 2.
        query_modes: query encodings evaluated besides the model's own (`concat`, `events`; Tab. 5).
        seed: seed of the shuffled orders (with the query's index: the same on every run).
    """

    stages: list[str] = field(default_factory=lambda: ["test"])
    avg_event: bool = False
    slices: bool = False
    length_edges: list[float] = field(default_factory=lambda: [300.0, 600.0, 1800.0])
    token_edges: list[int] = field(default_factory=list)
    event_orders: list[EventOrder] = field(default_factory=list)
    query_modes: list[QueryMode] = field(default_factory=list)
    seed: int = 0

    def __post_init__(self) -> None:
        unknown = set(self.stages) - {"val", "test"}
        if unknown:
            raise ConfigError(f"analyses.stages may hold val and test, got {sorted(unknown)}")
        if list(self.length_edges) != sorted(set(self.length_edges)) or any(e <= 0 for e in self.length_edges):
            raise ConfigError(
                f"analyses.length_edges must be positive and strictly increasing, got {self.length_edges}"
            )
        edges = list(self.token_edges)
        if edges != sorted(set(edges)) or any(isinstance(e, bool) or not isinstance(e, int) or e < 1 for e in edges):
            raise ConfigError(f"analyses.token_edges must be positive integers, strictly increasing, got {edges}")


# the name before the config-naming convention; checkpoints pickled it in their hyper-parameters
EvalAnalyses = AnalysesConfig


def length_bucket_names(edges: list[float]) -> list[str]:
    """Names of the buckets `[0, e1), [e1, e2), ..., [ek, inf)` in seconds."""
    bounds = [0.0, *edges]
    names = [f"{lo:g}-{hi:g}s" for lo, hi in zip(bounds, edges)]
    return [*names, f"{bounds[-1]:g}s+"]


def token_bucket_names(edges: list[int]) -> list[str]:
    """Names of the query-length buckets `[1, e1], [e1 + 1, e2], ..., [ek + 1, inf)` in tokens."""
    bounds = [0, *edges]
    names = [f"{lo + 1}-{hi}" for lo, hi in zip(bounds, edges)]
    return [*names, f"{bounds[-1] + 1}+"]


def slice_groups(
    num_events: torch.Tensor,
    durations: torch.Tensor,
    edges: list[float],
    tokens: torch.Tensor | None = None,
    token_edges: list[int] | None = None,
) -> dict[str, torch.Tensor]:
    """Boolean masks over the queries: `events_K`, `length_A-Bs` and, with `tokens`, `tokens_A-B`."""
    groups = {f"events_{int(k)}": num_events == k for k in torch.unique(num_events).tolist()}
    bucket = torch.bucketize(
        durations.double(), torch.tensor(edges, dtype=torch.float64, device=durations.device), right=True
    )
    for b, name in enumerate(length_bucket_names(edges)):
        groups[f"length_{name}"] = bucket == b
    if tokens is not None and token_edges:
        bucket = torch.bucketize(tokens.long(), torch.tensor(token_edges, dtype=torch.long, device=tokens.device))
        for b, name in enumerate(token_bucket_names(token_edges)):
            groups[f"tokens_{name}"] = bucket == b
    return groups


def sliced_metrics(ranks: torch.Tensor, groups: dict[str, torch.Tensor]) -> dict[str, float]:
    """Text-to-video metrics of each group of queries (`slice_groups`), with query counts."""
    out: dict[str, float] = {}
    for name, chosen in groups.items():
        count = int(chosen.sum())
        out[f"slices/{name}/n"] = float(count)
        if count:
            out.update({f"slices/{name}/t2v/{k}": v for k, v in summarize_ranks(ranks[chosen]).items()})
    return out


def avg_event_hits(single_ranks: torch.Tensor, owner: torch.Tensor, num_queries: int) -> torch.Tensor:
    """Per full query, the fraction of its single-event queries ranked first, `[num_queries]`."""
    hits = torch.zeros(num_queries, dtype=torch.float64, device=single_ranks.device)
    counts = torch.zeros(num_queries, dtype=torch.float64, device=single_ranks.device)
    hits.index_add_(0, owner, (single_ranks <= 1).double())
    counts.index_add_(0, owner, torch.ones_like(single_ranks, dtype=torch.float64))
    return hits / counts.clamp_min(1.0)


def avg_event_metrics(hits: torch.Tensor, num_events: torch.Tensor) -> dict[str, float]:
    """Avg-Event R@1 (percent), overall and per number of events (MELON Fig. 6)."""
    out = {"avg_event/t2v/R@1": float(hits.mean() * 100)}
    for k in torch.unique(num_events).tolist():
        out[f"avg_event/events_{int(k)}/t2v/R@1"] = float(hits[num_events == k].mean() * 100)
    return out
