"""Evaluate an embedder on retrieval tasks (UVRB by default): embed each corpus and query set
once (cached), rank the corpus by cosine for every query blockwise, and compute each dataset's
metric (GVE Sec. 4.1: R@1, R@10 for CMRB and LoVR-TH, P@1 for MS-TI and MS-TV); then write
`results.json`, `results.md`, `results.png` and `per_query.json` (each query's term of its task's
metric, which a plan's paired comparisons test), with UVRB's ability aggregates when all 16 are
present, or a task list's own when each of its tasks names an `ability` (`grouped_ability_scores`).

A dual encoder with a pairwise head (X-CLIP, TS2-Net, UCoFiA, UATVR, PAU, tightTransf, SALI)
comes as a `HeadItemEncoder`: its representations are cached the same way, and the head scores
them with `SimilarityHead.score_blocks`, the training evaluator's blockwise scoring, on text ->
video and video -> text tasks (a head scores texts against videos, so other tasks are skipped
with that reason). Memory: each block of query rows holds at most `memory_mb` of scores
(`scored_search`) and the head at most `memory_mb` of pairwise working memory inside it; the
task's query and corpus representations are held whole. A head's test-time calibration with
training queries (`calibration_bank`, UCoFiA's SK-norm) has no training split here: it is not
applied, and the task's result says so (`note`)."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import torch

from lit_retrieval.errors import ConfigError
from lit_retrieval.metrics.blockwise import (
    BlockwiseResult,
    Relevance,
    blockwise_search,
    query_values,
    ranked_metrics,
    scored_search,
)
from lit_retrieval.metrics.paired_tasks import PER_QUERY_FILE
from lit_retrieval.models.heads.base import SimilarityHead, map_rep, rep_len
from lit_retrieval.search.cache import EmbeddingCache
from lit_retrieval.search.embedders import DualEncoderEmbedder, HeadItemEncoder, ItemEmbedder
from lit_retrieval.uvrb.abilities import ability_scores, grouped_ability_scores
from lit_retrieval.uvrb.datasets import UVRB_DATASETS
from lit_retrieval.uvrb.tasks import RetrievalTaskSpec, load_retrieval_task

log = logging.getLogger(__name__)


def pairwise_head(embedder: ItemEmbedder | HeadItemEncoder) -> SimilarityHead | None:
    """The head that scores the embedder's representations pair by pair, or `None` for an
    embedder of unit vectors (ranked by cosine)."""
    if isinstance(embedder, HeadItemEncoder) and not isinstance(embedder, DualEncoderEmbedder):
        return embedder.module.head
    return None


def evaluate_task(
    embedder: ItemEmbedder | HeadItemEncoder,
    spec: RetrievalTaskSpec,
    cache: EmbeddingCache,
    batch_size: int = 8,
    memory_mb: float = 256,
) -> dict[str, Any]:
    data = load_retrieval_task(spec)
    unsupported = {i.modality for i in data.queries + data.corpus} - embedder.modalities
    if unsupported:
        return {"skipped": f"the model does not embed {sorted(unsupported)} items", "metric": spec.metric}
    head = pairwise_head(embedder)
    sides = ({i.modality for i in data.queries}, {i.modality for i in data.corpus})
    if head is not None and sides not in (({"T"}, {"V"}), ({"V"}, {"T"})):
        reason = f"{type(head).__name__} scores texts against videos, not {'/'.join(sides[0])} queries"
        return {"skipped": f"{reason} against {'/'.join(sides[1])} items", "metric": spec.metric}
    if head is not None:
        try:
            head.before_evaluation("test")  # refuses a head whose test-time fit is missing (PAU)
        except RuntimeError as err:
            raise ConfigError(f"{type(head).__name__}: {err}") from None
    queries = cache.embed(embedder, data.queries, spec.prompt, batch_size, f"{spec.name}-queries")
    corpus = cache.embed(embedder, data.corpus, spec.corpus_instruction, batch_size, f"{spec.name}-corpus")
    relevance = Relevance.from_lists(data.relevant)
    extra = {}
    if head is None:
        result = blockwise_search(queries, corpus, relevance, k=10, memory_mb=memory_mb)
    else:
        result = pairwise_search(head, queries, corpus, sides[0] == {"T"}, relevance, memory_mb)
        if head.calibration_bank:
            extra["note"] = f"{type(head).__name__}'s calibration with training queries is not applied"
    metrics = ranked_metrics(result, ks=(1, 5, 10))
    values = query_values(result, spec.metric).tolist()
    return {
        "score": metrics[spec.metric],
        "metric": spec.metric,
        "queries": len(data.queries),
        "corpus": len(data.corpus),
        **metrics,
        **extra,
        # moved to per_query.json by `run_benchmark`; None: a query without a relevant item
        "per_query": {"ids": data.query_ids, "values": [None if math.isnan(v) else v for v in values]},
    }


@torch.no_grad()
def pairwise_search(
    head: SimilarityHead, queries: Any, corpus: Any, text_queries: bool, relevance: Relevance, memory_mb: float
) -> BlockwiseResult:
    """Ranks of the relevant items when `head` scores every (query, corpus item) pair: query rows
    in blocks (`scored_search`), each block through `score_blocks` within `memory_mb` of pairwise
    memory; video queries against text items score the transposed block (the head's text x video)."""
    budget = int(memory_mb * 2**20)
    rows = lambda start, stop: map_rep(queries, lambda t: t[start:stop])  # noqa: E731

    def score(start: int, stop: int) -> torch.Tensor:
        if text_queries:
            return head.score_blocks(rows(start, stop), corpus, budget)
        return head.score_blocks(corpus, rows(start, stop), budget).t()

    return scored_search(score, rep_len(queries), rep_len(corpus), relevance, k=10, memory_mb=memory_mb)


def run_benchmark(
    embedder: ItemEmbedder | HeadItemEncoder,
    specs: list[RetrievalTaskSpec],
    out_dir: str | Path,
    cache_dir: str | Path | None = None,
    batch_size: int = 8,
    memory_mb: float = 256,
) -> dict[str, Any]:
    cache = EmbeddingCache(cache_dir, progress=True)  # each dataset's embedding shown as it goes
    datasets = {}
    per_query = {}
    for spec in specs:
        datasets[spec.name] = evaluate_task(embedder, spec, cache, batch_size, memory_mb)
        if "per_query" in datasets[spec.name]:
            per_query[spec.name] = {"metric": spec.metric, **datasets[spec.name].pop("per_query")}
        log.info("%s: %s", spec.name, datasets[spec.name])
    scores = {n: r["score"] for n, r in datasets.items() if "score" in r}
    results: dict[str, Any] = {
        "fingerprint": embedder.fingerprint,
        "datasets": datasets,
        "cache": {"hits": cache.hits, "misses": cache.misses},
    }
    if set(scores) == set(UVRB_DATASETS):
        results["abilities"] = ability_scores(scores)
    elif scores and all(spec.ability for spec in specs if spec.name in scores):
        results["abilities"] = grouped_ability_scores(scores, {spec.name: spec.ability for spec in specs})
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    (out / PER_QUERY_FILE).write_text(json.dumps(per_query))
    (out / "results.md").write_text(markdown_table(results))
    plot_results(results, out / "results.png")
    return results


def markdown_table(results: dict[str, Any]) -> str:
    lines = ["| dataset | metric | score | R@1 | R@10 | MnR |", "| --- | --- | --- | --- | --- | --- |"]
    for name, r in results["datasets"].items():
        if "score" in r:
            lines.append(
                f"| {name} | {r['metric']} | {r['score']:.3f} | {r['R@1']:.3f} | {r['R@10']:.3f} | {r['MnR']:.1f} |"
            )
        else:
            lines.append(f"| {name} | {r['metric']} | — ({r['skipped']}) | | | |")
    if "abilities" in results:
        keys = list(results["abilities"])
        lines += [
            "",
            "| " + " | ".join(keys) + " |",
            "|" + " --- |" * len(keys),
            "| " + " | ".join(f"{results['abilities'][k]:.3f}" for k in keys) + " |",
        ]
    return "\n".join(lines) + "\n"


def plot_results(results: dict[str, Any], path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n, r in results["datasets"].items() if "score" in r]
    panels = 2 if "abilities" in results else 1
    fig, axes = plt.subplots(1, panels, figsize=(6 + 5 * (panels - 1) + 0.3 * len(names), 4), squeeze=False)
    axes[0][0].bar(names, [results["datasets"][n]["score"] for n in names])
    axes[0][0].set(ylabel="score (dataset metric)", ylim=(0, 1), title="per dataset")
    axes[0][0].tick_params(axis="x", rotation=60)
    if panels == 2:
        abilities = results["abilities"]
        names = [k for k in abilities if not k.startswith("AVG_")]
        axes[0][1].bar(names, [abilities[k] for k in names], color="tab:orange")
        axes[0][1].set(ylim=(0, 1), title=f"abilities (AVG {abilities['AVG_abilities']:.3f})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
