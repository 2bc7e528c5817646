"""The MELON analyses of an evaluation stage (`evaluation.analyses`, `AnalysesConfig`; MELON Sec. 5.3,
Tab. 5-6, Fig. 5-6), the evaluator's side: Avg-Event R@1 scores each event alone as a query, event
orders and query modes score the queries encoded another way (`RetrievalEvaluator.encoded_rows`),
and the per-query values (rank, number of events, duration, tokens) are merged over processes
before the metrics of `lit_retrieval.metrics.analyses` slice them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import lightning as L
import numpy as np
import torch

from lit_retrieval.data.text.queries import QueryMode, reorder_events
from lit_retrieval.errors import ConfigError
from lit_retrieval.metrics.analyses import avg_event_hits, avg_event_metrics, slice_groups, sliced_metrics
from lit_retrieval.metrics.ranking import text_to_video_ranks
from lit_retrieval.metrics.retrieval import RetrievalMetrics

if TYPE_CHECKING:  # the evaluator calls this module
    from lit_retrieval.modules.evaluation import EvalSplit, RetrievalEvaluator


def analyses(
    evaluator: RetrievalEvaluator, model: L.LightningModule, split: EvalSplit, ranks: torch.Tensor
) -> dict[str, float]:
    """The `AnalysesConfig` of this process's queries against the whole gallery, merged over ranks."""
    config = evaluator.config.analyses
    assert config is not None
    device, ties = split.index.device, evaluator.config.ties
    events, targets = split.events, split.targets
    num_events = torch.tensor([len(e) for e in events], dtype=torch.long, device=device)
    per_query = {"rank": ranks, "num_events": num_events, "duration": split.attributes["duration"].double()}
    if config.slices and config.token_edges:
        per_query["tokens"] = query_tokens(model, events, device)
    out: dict[str, float] = {}
    if config.avg_event:
        singles = [[d] for e in events for d in e]
        owner = torch.repeat_interleave(torch.arange(len(events), device=device), num_events)
        single_ranks = torch.cat(
            [
                text_to_video_ranks(scores, targets[owner[rows]], ties)
                for rows, scores in evaluator.encoded_rows(model, singles, split.gallery)
            ]
        )
        per_query["avg_event"] = avg_event_hits(single_ranks.to(device), owner, len(events))
    merged = evaluator.merge_queries(model, split, per_query)
    if config.slices:
        groups = slice_groups(
            merged["num_events"], merged["duration"], config.length_edges, merged.get("tokens"), config.token_edges
        )
        out.update(sliced_metrics(merged["rank"], groups))
    if config.avg_event:
        out.update(avg_event_metrics(merged["avg_event"], merged["num_events"]))
    variants: dict[str, tuple[list[list[str]], QueryMode | None]] = {}
    for order in config.event_orders:
        reordered = [
            reorder_events(e, order, np.random.default_rng([config.seed, int(i)])) for e, i in zip(events, split.index)
        ]
        variants[f"order/{order}"] = (reordered, None)
    for mode in config.query_modes:
        variants[f"query_mode/{mode}"] = (events, mode)
    for name, (variant_events, mode) in variants.items():
        metric = RetrievalMetrics(ties, evaluator.config.v2t_rule).to(device)
        for rows, scores in evaluator.encoded_rows(model, variant_events, split.gallery, mode):
            metric.update(scores, targets[rows], split.index[rows])
        out.update({f"{name}/{k}": v for k, v in metric.compute().items()})
    return out


def query_tokens(model: L.LightningModule, events: list[list[str]], device: torch.device) -> torch.Tensor:
    """Each query's length in the model's text tokens before truncation (`query_token_counts`),
    `[queries]`; a model that cannot count them is refused by name."""
    count = getattr(model, "query_token_counts", None)
    if count is None:
        raise ConfigError(f"analyses.token_edges: {type(model).__name__} does not count query tokens")
    return torch.tensor(count(events) if events else [], dtype=torch.long, device=device)
