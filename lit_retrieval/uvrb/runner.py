"""Evaluate an embedder on retrieval tasks (UVRB by default): embed each corpus and query set
once (cached), rank the corpus by cosine for every query blockwise, and compute each dataset's
metric (GVE Sec. 4.1: R@1, R@10 for CMRB and LoVR-TH, P@1 for MS-TI and MS-TV); then write
`results.json`, `results.md` and `results.png`, with UVRB's ability aggregates when all 16 are
present."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from lit_retrieval.metrics.blockwise import Relevance, blockwise_search, ranked_metrics
from lit_retrieval.search.cache import EmbeddingCache
from lit_retrieval.search.embedders import ItemEmbedder
from lit_retrieval.uvrb.abilities import ABILITIES, ability_scores
from lit_retrieval.uvrb.datasets import UVRB_DATASETS
from lit_retrieval.uvrb.tasks import RetrievalTaskSpec, load_retrieval_task

log = logging.getLogger(__name__)


def evaluate_task(
    embedder: ItemEmbedder, spec: RetrievalTaskSpec, cache: EmbeddingCache, batch_size: int = 8, memory_mb: float = 256
) -> dict[str, Any]:
    data = load_retrieval_task(spec)
    unsupported = {i.modality for i in data.queries + data.corpus} - embedder.modalities
    if unsupported:
        return {"skipped": f"the model does not embed {sorted(unsupported)} items", "metric": spec.metric}
    queries = cache.embed(embedder, data.queries, spec.prompt, batch_size, f"{spec.name}-queries")
    corpus = cache.embed(embedder, data.corpus, spec.corpus_instruction, batch_size, f"{spec.name}-corpus")
    result = blockwise_search(queries, corpus, Relevance.from_lists(data.relevant), k=10, memory_mb=memory_mb)
    metrics = ranked_metrics(result, ks=(1, 5, 10))
    return {
        "score": metrics[spec.metric],
        "metric": spec.metric,
        "queries": len(data.queries),
        "corpus": len(data.corpus),
        **metrics,
    }


def run_benchmark(
    embedder: ItemEmbedder,
    specs: list[RetrievalTaskSpec],
    out_dir: str | Path,
    cache_dir: str | Path | None = None,
    batch_size: int = 8,
    memory_mb: float = 256,
) -> dict[str, Any]:
    cache = EmbeddingCache(cache_dir, progress=True)  # each dataset's embedding shown as it goes
    datasets = {}
    for spec in specs:
        datasets[spec.name] = evaluate_task(embedder, spec, cache, batch_size, memory_mb)
        log.info("%s: %s", spec.name, datasets[spec.name])
    scores = {n: r["score"] for n, r in datasets.items() if "score" in r}
    results: dict[str, Any] = {
        "fingerprint": embedder.fingerprint,
        "datasets": datasets,
        "cache": {"hits": cache.hits, "misses": cache.misses},
    }
    if set(scores) == set(UVRB_DATASETS):
        results["abilities"] = ability_scores(scores)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
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
        keys = ("AVG_datasets", "AVG_abilities", *ABILITIES)
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
        axes[0][1].bar(list(ABILITIES), [abilities[k] for k in ABILITIES], color="tab:orange")
        axes[0][1].set(ylim=(0, 1), title=f"abilities (AVG {abilities['AVG_abilities']:.3f})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
