"""`lit-retrieval sali-stats`: SALI Tab. 1's statistics of any annotation + shot cache, per dataset and split.

    lit-retrieval sali-stats CONFIG.yaml [CONFIG.yaml ...] [--splits train val test] [--json]
    lit-retrieval sali-stats --captions FILE [FILE ...] [--rule CONFIG.yaml] [--json]

Each CONFIG is a training config (one per dataset, e.g. configs/sali/cm_clip4clip.yaml): its data
module reads the annotation and its `data.shots` the shot cache (videos missing from the cache are
detected and cached, as `fit` would), its `model.init_args.spans` gives the relational rule (the
default `SpanSplitter` when absent) and `model.init_args.evaluation.relational.min_shots` Rel-Multi's
threshold (the split's median when absent). Per split (SALI Tab. 1 and Sec. 2):

- `videos`, `queries` (one query per video: its events joined, as the evaluation encodes it);
- `median_shots` ("Shots: median shot count per video"), `mean_shots`;
- `relational`, `relational_%`: queries with an interpersonal verb and two person mentions;
- `min_shots` and `rel_multi`: relational queries whose video has at least `min_shots` shots.

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

import numpy as np

from lit_retrieval.data.text.queries import concat_query
from lit_retrieval.data.reading import read_csv
from lit_retrieval.data.text.spans import SpanSplitter
from lit_retrieval.errors import ConfigError, UsageError

ROLES = ("train", "val", "test")
# (video id, caption) columns: Condensed Movies' descriptions.csv, MSR-VTT's JSFusion test CSV
CAPTION_COLUMNS = (("videoid", "description"), ("video_id", "sentence"))
# the paper's relational figure for each kind of caption file (a comparison, not a target)
PAPER_SHARES = {
    "description": "5.0 % of the 10,621 obtainable clips (Sec. 2), about 6 % of CM (Sec. 4)",
    "sentence": "61 of MSR-VTT 1k-A (Tab. 4)",
}


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


def training_config(path: str) -> Any:
    """The training config at `path` as `fit` parses it: the trainer's parser, so Lightning is imported
    only by the runs that read a config (`--captions` alone and `--help` do not)."""
    from lit_retrieval.commands.cache_frames import load_config

    return load_config([path])


def spans_from_config(config: Any) -> SpanSplitter:
    spans = _option(config, "spans")
    return SpanSplitter(**spans.as_dict()) if spans is not None else SpanSplitter()


def dataset_statistics(path: str, roles: list[str]) -> dict[str, dict[str, float]]:
    """Per configured split (role) of the training config at `path`: `split_statistics`."""
    from lit_retrieval.commands.cache_frames import build_datamodule

    config = training_config(path)
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


def read_captions(path: str) -> tuple[int, list[str], str]:
    """(data rows, each video's first non-empty caption, the caption column) of a release caption
    file (`CAPTION_COLUMNS`)."""
    rows = read_csv(path, ())
    columns = set(rows[0]) if rows else set()
    found = [pair for pair in CAPTION_COLUMNS if set(pair) <= columns]
    if not found:
        raise UsageError(
            path,
            "not a caption file: needs data rows with the columns videoid,description (Condensed Movies "
            f"descriptions.csv) or video_id,sentence (MSR-VTT JSFusion test CSV); header: {sorted(columns)}",
        )
    id_column, text_column = found[0]
    captions: dict[str, str] = {}
    for row in rows:
        text = row[text_column].strip()
        if text and text.lower() != "nan":
            captions.setdefault(row[id_column].strip(), text)
    return len(rows), list(captions.values()), text_column


def caption_statistics(path: str, spans: SpanSplitter) -> dict[str, float]:
    """The relational share of the caption file at `path` under `spans`' rule (SALI Sec. 2)."""
    rows, captions, column = read_captions(path)
    flags = [spans.split(caption).relational for caption in captions]
    return {
        "rows": rows,
        "queries": len(captions),
        "relational": sum(flags),
        "relational_%": 100 * sum(flags) / len(captions) if captions else 0.0,
        "paper": PAPER_SHARES[column],
    }


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
    results = {path: dataset_statistics(path, args.splits) for path in args.configs}
    spans = spans_from_config(training_config(args.rule)) if args.rule else SpanSplitter()
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
