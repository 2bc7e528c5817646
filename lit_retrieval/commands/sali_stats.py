"""`lit-retrieval sali-stats`: SALI Tab. 1's statistics of any annotation + shot cache, per dataset and split.

    lit-retrieval sali-stats CONFIG.yaml [CONFIG.yaml ...] [--splits train val test] [--json]

Each CONFIG is a training config (one per dataset, e.g. configs/sali/cm_clip4clip.yaml): its data
module reads the annotation and its `data.shots` the shot cache (videos missing from the cache are
detected and cached, as `fit` would), its `model.init_args.spans` gives the relational rule (the
default `SpanSplitter` when absent) and `model.init_args.evaluation.relational.min_shots` Rel-Multi's
threshold (the split's median when absent). Per split (SALI Tab. 1 and Sec. 2):

- `videos`, `queries` (one query per video: its events joined, as the evaluation encodes it);
- `median_shots` ("Shots: median shot count per video"), `mean_shots`;
- `relational`, `relational_%`: queries with an interpersonal verb and two person mentions;
- `min_shots` and `rel_multi`: relational queries whose video has at least `min_shots` shots.

The paper's figures to compare with: 5.0 % relational over the 10,621 obtainable CM videos (Sec. 2),
"about 6 %" of CM (Sec. 4), a median of 34 shots on CM and 4 on ActivityNet, 48 Rel-Multi queries in
CM's official test movies (Tab. 1, Sec. 4).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from lit_retrieval.commands.cache_frames import build_datamodule, load_config
from lit_retrieval.data.queries import concat_query
from lit_retrieval.data.spans import SpanSplitter
from lit_retrieval.errors import ConfigError

ROLES = ("train", "val", "test")


def split_statistics(relational: list[bool], shots: list[int], min_shots: int | None) -> dict[str, float]:
    """Tab. 1's figures of one split from each query's relational flag and its video's shot count."""
    if not shots:
        return {"videos": 0, "queries": 0}
    counts = np.asarray(shots, dtype=np.float64)
    flags = np.asarray(relational, dtype=bool)
    threshold = float(min_shots) if min_shots is not None else float(np.median(counts))
    return {
        "videos": len(shots),
        "queries": len(flags),
        "median_shots": float(np.median(counts)),
        "mean_shots": float(counts.mean()),
        "relational": int(flags.sum()),
        "relational_%": float(100 * flags.mean()),
        "min_shots": threshold,
        "rel_multi": int((flags & (counts >= threshold)).sum()),
    }


def _option(config: Any, *keys: str) -> Any:
    """`config.model.init_args.<keys...>` of a parsed config, None where any level is absent."""
    node = getattr(config, "model", None)
    for key in ("init_args", *keys):
        node = node.get(key) if node is not None and hasattr(node, "get") else None
    return node


def spans_from_config(config: Any) -> SpanSplitter:
    spans = _option(config, "spans")
    return SpanSplitter(**spans.as_dict()) if spans is not None else SpanSplitter()


def dataset_statistics(path: str, roles: list[str]) -> dict[str, dict[str, float]]:
    """Per configured split (role) of the training config at `path`: `split_statistics`."""
    config = load_config([path])
    datamodule = build_datamodule(config)
    if getattr(datamodule, "shots", None) is None:
        raise ConfigError(f"{path}: no data.shots section: the statistics need each video's shots")
    spans = spans_from_config(config)
    min_shots = _option(config, "evaluation", "relational", "min_shots")
    datamodule.setup()
    out = {}
    for role in roles:
        dataset = datamodule.datasets.get(role)
        if dataset is None:
            continue
        flags = [spans.split(concat_query(record.descriptions)).relational for record in dataset.records]
        out[datamodule.splits[role]] = split_statistics(flags, [len(s) for s in dataset.shots], min_shots)
    return out


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="lit-retrieval sali-stats", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("configs", nargs="+", help="one training config per dataset (its data and data.shots)")
    parser.add_argument("--splits", nargs="+", choices=ROLES, default=list(ROLES), help="splits to count")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = parser.parse_args(argv)
    results = {path: dataset_statistics(path, args.splits) for path in args.configs}
    if args.json:
        print(json.dumps(results))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title="SALI Tab. 1 statistics")
    columns = ("videos", "median_shots", "mean_shots", "relational", "relational_%", "min_shots", "rel_multi")
    for name in ("config", "split", *columns):
        table.add_column(name)
    for path, splits in results.items():
        for split, stats in splits.items():
            table.add_row(path, split, *(f"{stats[c]:g}" if c in stats else "-" for c in columns))
    Console(width=160).print(table)
    return 0
