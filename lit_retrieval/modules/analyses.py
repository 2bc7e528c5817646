"""The MELON analyses of an evaluation stage (`evaluation.analyses`, `AnalysesConfig`; MELON Sec. 5.3,
Tab. 5-6, Fig. 5-6), as functions of plain inputs the evaluator calls: the per-query values the slices
read (`per_query_values`), the single-event queries of Avg-Event R@1 and which query each belongs to
(`single_event_queries`), the queries encoded another way (`query_variants`: event orders, query
modes), and the metrics of the values merged over processes (`merged_analyses`). The evaluator encodes
and scores the queries these name, and merges the values; `lit_retrieval.metrics.analyses` slices them."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from lit_retrieval.data.text.queries import QueryMode, reorder_events
from lit_retrieval.errors import ConfigError
from lit_retrieval.metrics.analyses import AnalysesConfig, avg_event_metrics, slice_groups, sliced_metrics


def per_query_values(
    events: list[list[str]],
    ranks: torch.Tensor,
    durations: torch.Tensor,
    config: AnalysesConfig,
    count_tokens: Callable[[list[list[str]]], list[int]] | None,
    model_name: str,
) -> dict[str, torch.Tensor]:
    """Each query's text-to-video rank, number of events, video duration and (with token slices)
    its length in the text tower's tokens (`count_tokens` of the model named `model_name`), `[queries]` each."""
    device = ranks.device
    values = {
        "rank": ranks,
        "num_events": torch.tensor([len(e) for e in events], dtype=torch.long, device=device),
        "duration": durations.double(),
    }
    if config.slices and config.token_edges:
        values["tokens"] = token_counts(events, count_tokens, device, model_name)
    return values


def token_counts(
    events: list[list[str]],
    count_tokens: Callable[[list[list[str]]], list[int]] | None,
    device: torch.device,
    model_name: str,
) -> torch.Tensor:
    """Each query's length in the model's text tokens before truncation, `[queries]`; a model that
    cannot count them (`count_tokens` None) is refused by name."""
    if count_tokens is None:
        raise ConfigError(f"analyses.token_edges: {model_name} does not count query tokens")
    return torch.tensor(count_tokens(events) if events else [], dtype=torch.long, device=device)


def single_event_queries(events: list[list[str]], device: torch.device) -> tuple[list[list[str]], torch.Tensor]:
    """Avg-Event R@1's queries, each event of each query alone, and the query each came from."""
    owner = torch.repeat_interleave(
        torch.arange(len(events), device=device),
        torch.tensor([len(e) for e in events], dtype=torch.long, device=device),  # long also when there are none
    )
    return [[d] for e in events for d in e], owner


def query_variants(
    events: list[list[str]], index: torch.Tensor, config: AnalysesConfig
) -> dict[str, tuple[list[list[str]], QueryMode | None]]:
    """The queries encoded another way, by metric prefix: each `event_orders` order (a query's
    random order seeded by (`seed`, its dataset index)) and each `query_modes` mode."""
    variants: dict[str, tuple[list[list[str]], QueryMode | None]] = {}
    for order in config.event_orders:
        reordered = [
            reorder_events(e, order, np.random.default_rng([config.seed, int(i)])) for e, i in zip(events, index)
        ]
        variants[f"order/{order}"] = (reordered, None)
    for mode in config.query_modes:
        variants[f"query_mode/{mode}"] = (events, mode)
    return variants


def merged_analyses(merged: dict[str, torch.Tensor], config: AnalysesConfig) -> dict[str, float]:
    """The length / event-count / token slices and Avg-Event R@1 of every process's per-query values."""
    out: dict[str, float] = {}
    if config.slices:
        groups = slice_groups(
            merged["num_events"], merged["duration"], config.length_edges, merged.get("tokens"), config.token_edges
        )
        out.update(sliced_metrics(merged["rank"], groups))
    if config.avg_event:
        out.update(avg_event_metrics(merged["avg_event"], merged["num_events"]))
    return out
