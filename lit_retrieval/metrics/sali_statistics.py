"""SALI Tab. 1's statistics of a dataset (annotation + shots) and the relational share of release
caption files (SALI Sec. 2 and 4); `lit-retrieval sali-stats` prints them.

Per split: `videos`, `queries` (one query per video: its events joined, as the evaluation encodes
it); `median_shots` ("Shots: median shot count per video"), `mean_shots`; `relational`,
`relational_%` (queries with an interpersonal verb and two person mentions); `min_shots` and
`rel_multi` (relational queries whose video has at least `min_shots` shots).

Caption files: a Condensed Movies `descriptions.csv` (columns `videoid`, `description`) or an MSR-VTT
JSFusion test CSV (`video_id`, `sentence`). As the data modules read them, each video's first
non-empty caption is its query (repeats of a video and empty or "nan" captions are dropped); `rows`
counts the file's data rows, and `paper` the paper's figure for that kind of file, printed beside ours
as a comparison (the rule is chosen by meaning, never fitted to it; docs/sali.md says why they differ).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lit_retrieval.data.text.queries import concat_query
from lit_retrieval.data.reading import read_csv
from lit_retrieval.data.text.spans import SpanSplitter
from lit_retrieval.errors import ConfigError, UsageError

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


def dataset_statistics(
    datamodule: Any, spans: SpanSplitter, min_shots: int | None, roles: list[str], where: str
) -> dict[str, dict[str, float]]:
    """`split_statistics` per configured split (role) of a video-text data module with `shots`
    (`where`: the config it came from, named when it has none)."""
    if getattr(datamodule, "shots", None) is None:
        raise ConfigError(f"{where}: no data.shots section: the statistics need each video's shots")
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
