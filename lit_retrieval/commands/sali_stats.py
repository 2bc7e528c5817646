"""`lit-retrieval sali-stats`: SALI Tab. 1's statistics of any annotation + shot cache, per dataset and split.

    lit-retrieval sali-stats CONFIG.yaml [CONFIG.yaml ...] [--splits train val test] [--json]
    lit-retrieval sali-stats --captions FILE [FILE ...] [--rule CONFIG.yaml] [--json]

Each CONFIG is a training config (one per dataset, e.g. configs/sali/cm_clip4clip.yaml): its data
module reads the annotation and its `data.shots` the shot cache (videos missing from the cache are
detected and cached, as `fit` would), its `model.init_args.spans` gives the relational rule (the
default `SpanSplitter` when absent) and `model.init_args.evaluation.relational.min_shots` Rel-Multi's
threshold (the split's median when absent). Per split (SALI Tab. 1 and Sec. 2):

videos, queries, median and mean shots, relational queries and their share, and Rel-Multi
(`lit_retrieval.metrics.sali_statistics` defines each).

`--captions` counts the relational share of release caption files without videos or shots: a
Condensed Movies `descriptions.csv` (columns `videoid`, `description`) or an MSR-VTT JSFusion test
CSV (`video_id`, `sentence`). As the data modules read them, each video's first non-empty caption
is its query (repeats of a video and empty or "nan" captions are dropped); `rows` counts the
file's data rows, and `paper` the paper's figure for that kind of file, printed beside ours as a
comparison (the rule is chosen by meaning, never fitted to it; docs/sali.md says why they differ).
The rule is `--rule CONFIG.yaml`'s `model.init_args.spans`, else the default.

The paper's figures to compare with: 5.0 % relational over the 10,621 obtainable CM videos (Sec. 2),
"about 6 %" of CM (Sec. 4), n=61 relational captions in MSR-VTT 1k-A (Tab. 4), a median of 34 shots on
CM and 4 on ActivityNet, 48 Rel-Multi queries in CM's official test movies (Tab. 1, Sec. 4).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from lit_retrieval.data.text.spans import SpanSplitter
from lit_retrieval.metrics.sali_statistics import caption_statistics, dataset_statistics

ROLES = ("train", "val", "test")


def training_config(paths: list[str]) -> Any:
    """The parsed training config; Lightning is imported only by the runs that read one (`--captions`
    alone and `--help` do not)."""
    from lit_retrieval.retrieval_cli import training_config as parsed

    return parsed(paths)


def config_spans(config: Any) -> SpanSplitter:
    """The relational rule a training config sets (`model.init_args.spans`), else the default."""
    from lit_retrieval.retrieval_cli import model_option

    spans = model_option(config, "spans")
    return SpanSplitter(**spans.as_dict()) if spans is not None else SpanSplitter()


def config_statistics(path: str, roles: list[str]) -> dict[str, dict[str, float]]:
    """`dataset_statistics` of the data module, rule and Rel-Multi threshold of the config at `path`."""
    from lit_retrieval.retrieval_cli import build_datamodule, model_option

    config = training_config([path])
    min_shots = model_option(config, "evaluation", "relational", "min_shots")
    return dataset_statistics(build_datamodule(config), config_spans(config), min_shots, roles, path)


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="lit-retrieval sali-stats", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("configs", nargs="*", help="one training config per dataset (its data and data.shots)")
    parser.add_argument("--captions", nargs="+", default=[], help="release caption files: relational share only")
    parser.add_argument("--rule", help="training config whose model.init_args.spans is the rule for --captions")
    parser.add_argument("--splits", nargs="+", choices=ROLES, default=list(ROLES), help="splits to count")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = parser.parse_args(argv)
    if not args.configs and not args.captions:
        parser.error("give training configs or --captions FILE")
    results = {path: config_statistics(path, args.splits) for path in args.configs}
    spans = config_spans(training_config([args.rule])) if args.rule else SpanSplitter()
    results.update({path: {"captions": caption_statistics(path, spans)} for path in args.captions})
    if args.json:
        print(json.dumps(results))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title="SALI Tab. 1 statistics")
    columns = (
        "videos",
        "queries",
        "median_shots",
        "mean_shots",
        "relational",
        "relational_%",
        "min_shots",
        "rel_multi",
    )
    for name in ("file", "split", *columns, "paper"):
        table.add_column(name)
    for path, splits in results.items():
        for split, stats in splits.items():
            cells = (f"{stats[c]:g}" if c in stats else "-" for c in columns)
            table.add_row(path, split, *cells, stats.get("paper", "-"))
    Console(width=160).print(table)
    return 0
