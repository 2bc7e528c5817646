"""A UVRB (or any retrieval) task in the runner's layout, made from one file of query -> video pairs.

UVRB's released file layout could not be read from here (docs/datasets.md, "UVRB"), so the converter starts from
the fields the runner needs, which any release of a retrieval set carries in some form: one row per relevant
(query, video) pair, in JSONL, a JSON list or a CSV with a header. A row holds

    query_id                  optional: rows sharing it are one query with several relevant videos
                              (default: one query per row, `q<line>`)
    text / image / video      the query: text, an image, a video, or text with an image or a video (GVE's
                              TXT / CMP / VIS tasks); one of them at least
    query_start / query_end   optional: seconds of the query video (a clip as the query, LoVR-C2V)
    target                    the relevant video's path (the corpus item)
    target_id                 optional: the corpus id (default: the path without its folder and extension)
    target_start / target_end optional: seconds of the target (a moment of a longer video)

Column names are renamed with `fields` (`{"text": "caption", "target": "video_path"}`). Media paths relative to
the pairs file are rewritten relative to the output folder, so the task reads the same files. Written:
`corpus.jsonl` (each video once), `queries.jsonl`, `qrels.jsonl` (score 1 per pair), the format of
`uvrb/tasks.py`. A row without a query or a target, a query id repeated with other content, or a corpus id given
two different videos is an `AnnotationError` naming the file and line; nothing is written then.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from lit_retrieval.data.reading import read_csv, read_json, read_json_lines
from lit_retrieval.data.records import AnnotationError

QUERY_FIELDS = ("text", "image", "video", "query_start", "query_end")
ROW_FIELDS = ("query_id", *QUERY_FIELDS, "target", "target_id", "target_start", "target_end")
MEDIA = ("image", "video", "target")


def read_pairs(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """(line or position, row) of a pairs file: JSONL (`.jsonl`), a JSON list (`.json`), or a CSV with a header."""
    if path.suffix == ".jsonl":
        return [(f"line {n}", row) for n, row in read_json_lines(path)]
    if path.suffix == ".json":
        rows = read_json(path)
        if not isinstance(rows, list):
            raise AnnotationError(str(path), "-", f"expected a JSON list of pairs, got a {type(rows).__name__}")
        return [(f"item {n}", row) for n, row in enumerate(rows)]
    return [(f"line {n}", row) for n, row in enumerate(read_csv(path, ()), start=2)]


def _value(row: dict[str, Any], fields: dict[str, str], name: str) -> Any:
    value = row.get(fields.get(name, name))
    return None if value in (None, "") else value


def _media(value: str, source: Path, out: Path) -> str:
    """A media path relative to the pairs file, rewritten relative to the output folder (absolute: kept)."""
    return value if os.path.isabs(value) else os.path.relpath(source.parent / value, out)


def _seconds(value: Any, where: tuple[str, str], name: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise AnnotationError(*where, f"{name} must be seconds, got {value!r}") from None


def convert_pairs(source: str | Path, out: str | Path, fields: dict[str, str] | None = None) -> dict[str, int]:
    """Write the task of the pairs file `source` to the folder `out`; the counts of queries, videos and pairs."""
    source, out, fields = Path(source), Path(out), dict(fields or {})
    unknown = sorted(set(fields) - set(ROW_FIELDS))
    if unknown:
        raise AnnotationError(
            str(source), "-", f"unknown field(s) {unknown} to rename; the converter reads {ROW_FIELDS}"
        )
    queries: dict[str, dict[str, Any]] = {}
    corpus: dict[str, dict[str, Any]] = {}
    qrels: list[tuple[str, str]] = []
    for position, row in read_pairs(source):
        where = (str(source), position)
        if not isinstance(row, dict):
            raise AnnotationError(*where, f"expected an object, got {row!r}")
        query = {k: _value(row, fields, k) for k in QUERY_FIELDS if _value(row, fields, k) is not None}
        if not {"text", "image", "video"} & set(query):
            raise AnnotationError(*where, "no query: needs text, image or video")
        target = _value(row, fields, "target")
        if target is None:
            raise AnnotationError(*where, "no target video")
        for name in ("image", "video"):
            if name in query:
                query[name] = _media(str(query[name]), source, out)
        item = {"video": _media(str(target), source, out)}
        for name, key in (("target_start", "start"), ("target_end", "end")):
            if _value(row, fields, name) is not None:
                item[key] = _seconds(_value(row, fields, name), where, name)
        for name, key in (("query_start", "start"), ("query_end", "end")):
            if name in query:
                query[key] = _seconds(query.pop(name), where, name)
        query_id = str(_value(row, fields, "query_id") or f"q{len(qrels) + 1}")
        corpus_id = str(_value(row, fields, "target_id") or Path(str(target)).stem)
        if queries.setdefault(query_id, query) != query:
            raise AnnotationError(
                *where, f"query {query_id!r} repeated with other content: {query} vs {queries[query_id]}"
            )
        if corpus.setdefault(corpus_id, item) != item:
            raise AnnotationError(*where, f"corpus id {corpus_id!r} names two videos: {item} vs {corpus[corpus_id]}")
        if (query_id, corpus_id) not in qrels:
            qrels.append((query_id, corpus_id))
    out.mkdir(parents=True, exist_ok=True)
    _write(out / "queries.jsonl", [{"id": k, **v} for k, v in queries.items()])
    _write(out / "corpus.jsonl", [{"id": k, **v} for k, v in corpus.items()])
    _write(out / "qrels.jsonl", [{"query_id": q, "corpus_id": c, "score": 1} for q, c in qrels])
    return {"queries": len(queries), "videos": len(corpus), "pairs": len(qrels)}


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    """JSONL, written whole (a temporary file renamed over `path`)."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    os.replace(partial, path)
