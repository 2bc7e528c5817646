"""Retrieval tasks in the general corpus / queries / relevance form (any modality on either side,
several relevant items per query), read from JSONL:

    <dir>/corpus.jsonl   {"id": "v1", "video": "videos/v1.mp4"}            (any item fields)
    <dir>/queries.jsonl  {"id": "q1", "text": "a man rides a horse"}      (or image / video / both)
    <dir>/qrels.jsonl    {"query_id": "q1", "corpus_id": "v1", "score": 1}

Field names are configurable per task (`fields`), because UVRB's own file layout could not be
inspected here; media paths are relative to `dir` unless absolute. Relevance
scores <= 0 are not relevant. Errors name the file, the line and the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from lit_retrieval.data.items import ItemError, MediaItem, item_from_json
from lit_retrieval.data.records import AnnotationError, finite_number, record_id
from lit_retrieval.data.reading import read_json_lines, read_text
from lit_retrieval.errors import ConfigError
from lit_retrieval.uvrb.datasets import UVRB_DATASETS


@dataclass
class FieldMap:
    """Names of the fields in the task files."""

    id: str = "id"
    text: str = "text"
    image: str = "image"
    video: str = "video"
    start: str = "start"
    end: str = "end"
    query_id: str = "query_id"
    corpus_id: str = "corpus_id"
    score: str = "score"


@dataclass
class RetrievalTaskSpec:
    """One evaluation dataset. `prompt` and `metric` default to UVRB's (GVE Tab. 5) for UVRB names."""

    name: str
    dir: str
    corpus: str = "corpus.jsonl"
    queries: str = "queries.jsonl"
    qrels: str = "qrels.jsonl"
    fields: FieldMap = field(default_factory=FieldMap)
    prompt: str | None = None
    corpus_instruction: str | None = None
    metric: str | None = None
    ability: str | None = None  # the ability a task outside UVRB counts toward (`grouped_ability_scores`)

    def __post_init__(self) -> None:
        known = UVRB_DATASETS.get(self.name)
        self.prompt = self.prompt if self.prompt is not None else (known.prompt if known else None)
        self.metric = self.metric or (known.metric if known else "R@1")
        if self.metric not in ("R@1", "R@5", "R@10", "P@1"):
            raise ConfigError(f"task {self.name!r}: metric must be R@1, R@5, R@10 or P@1, got {self.metric!r}")

    def paths(self) -> tuple[Path, Path, Path]:
        root = Path(self.dir)
        return root / self.corpus, root / self.queries, root / self.qrels


@dataclass
class RetrievalData:
    query_ids: list[str]
    queries: list[MediaItem]
    corpus_ids: list[str]
    corpus: list[MediaItem]
    relevant: list[list[int]]  # per query, corpus positions


def _lines(path: Path):
    if not path.is_file():
        raise AnnotationError(str(path), path.name, "file not found")
    yield from read_json_lines(path)


def _items(path: Path, fields: FieldMap, root: Path) -> tuple[list[str], list[MediaItem]]:
    ids, items, seen = [], [], set()
    names = {
        "text": fields.text,
        "image": fields.image,
        "video": fields.video,
        "start": fields.start,
        "end": fields.end,
    }
    for number, raw in _lines(path):
        if not isinstance(raw, dict) or fields.id not in raw:
            raise AnnotationError(str(path), f"line {number}", f"needs an '{fields.id}' field")
        item_id = record_id(raw[fields.id], str(path), f"line {number}", f"'{fields.id}'")
        if item_id in seen:
            raise AnnotationError(str(path), f"line {number}", f"duplicate id {item_id!r}")
        seen.add(item_id)
        try:
            item = item_from_json({k: raw[v] for k, v in names.items() if v in raw}, f"{path}:{number}", root)
        except ItemError as err:
            raise AnnotationError(str(path), f"line {number}", str(err).split(": ", 1)[-1]) from None
        ids.append(item_id)
        items.append(item)
    return ids, items


def load_retrieval_task(spec: RetrievalTaskSpec) -> RetrievalData:
    corpus_path, queries_path, qrels_path = spec.paths()
    root = Path(spec.dir)
    corpus_ids, corpus = _items(corpus_path, spec.fields, root)
    query_ids, queries = _items(queries_path, spec.fields, root)
    where_corpus = {c: i for i, c in enumerate(corpus_ids)}
    where_query = {q: i for i, q in enumerate(query_ids)}
    relevant: list[list[int]] = [[] for _ in queries]
    f = spec.fields
    for number, raw in _lines(qrels_path):
        where = f"line {number}"
        if not isinstance(raw, dict) or f.query_id not in raw or f.corpus_id not in raw:
            raise AnnotationError(
                str(qrels_path), where, f"needs '{f.query_id}', '{f.corpus_id}' and a numeric '{f.score}'"
            )
        q = record_id(raw[f.query_id], str(qrels_path), where, f"'{f.query_id}'")
        c = record_id(raw[f.corpus_id], str(qrels_path), where, f"'{f.corpus_id}'")
        score = finite_number(raw.get(f.score, 1), str(qrels_path), where, f"'{f.score}'")
        if q not in where_query or c not in where_corpus:
            missing = f"query {q!r}" if q not in where_query else f"corpus item {c!r}"
            raise AnnotationError(str(qrels_path), f"line {number}", f"unknown {missing}")
        if score > 0 and where_corpus[c] not in relevant[where_query[q]]:
            relevant[where_query[q]].append(where_corpus[c])
    without = [query_ids[i] for i, r in enumerate(relevant) if not r]
    if without:
        raise AnnotationError(str(qrels_path), without[0], f"{len(without)} queries have no relevant item")
    return RetrievalData(query_ids, queries, corpus_ids, corpus, relevant)


def read_task_list(path: str, root: str | None, only: list[str] | None) -> list[RetrievalTaskSpec]:
    """The tasks of a task-list YAML; a file that is not such a list is a `ConfigError` naming it."""
    try:
        raw = yaml.safe_load(read_text(path)) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML ({' '.join(str(err).split())})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("tasks", []), list):
        raise ConfigError(f"{path}: expected a mapping with a 'tasks' list")
    base = Path(root or raw.get("root", "."))
    specs = []
    for k, entry in enumerate(raw.get("tasks", [])):
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("name"), str)
            or not isinstance(entry.get("fields", {}), dict)
        ):
            raise ConfigError(f"{path}: task {k}: expected a mapping with a 'name' (and optional 'fields' mapping)")
        entry = dict(entry)
        entry["dir"] = str(base / entry.get("dir", entry["name"]))
        try:
            entry["fields"] = FieldMap(**entry.get("fields", {}))
            specs.append(RetrievalTaskSpec(**entry))
        except (TypeError, ValueError) as err:
            raise ConfigError(f"{path}: task {entry['name']!r}: {err}") from None
    if not specs:
        raise ConfigError(f"{path}: no tasks (the 'tasks' list is empty)")
    if only:
        unknown = set(only) - {s.name for s in specs}
        if unknown:
            raise ConfigError(f"{path}: unknown task(s) {sorted(unknown)} given to --only")
        specs = [s for s in specs if s.name in only]
    for spec in specs:
        for file in spec.paths():
            if file.is_file() and not read_text(str(file)).strip():
                raise ConfigError(f"{file}: empty file (task {spec.name!r} needs corpus, queries and relevance lines)")
    return specs
