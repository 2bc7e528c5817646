"""Retrieval tasks for GVE's multi-task training (GVE Sec. 3.3, A.4, Tab. 6-7).

A task is a named JSONL file of query -> target pairs with one declared format (`"T->V"`,
`"TI->V"`, `"I->V"`, `"V->V"`, `"T->I"`, `"T->T"`, ...), its own batch size and number of explicit
hard negatives per pair. One line per pair:

    {"id": "q17", "query": {"text": "a dog runs"}, "positive": {"video": "clips/a.mp4", "start": 2, "end": 9},
     "negatives": [{"video": "clips/b.mp4"}]}

An item is `{"text"?, "image"?, "video"?, "start"?, "end"?}` or a plain string (text). Media paths
are relative to `media_root` (default: the task file's folder). `id` is optional (default: the
line number). Every record is checked against the declared format when the file is read; a bad
line is an error naming the file, the line and the reason, or is dropped and counted under
`on_bad_record: skip`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from lit_retrieval.data.bad_records import BadRecordPolicy, RecordCollector
from lit_retrieval.data.items import ItemError, MediaItem, item_from_json, parse_format
from lit_retrieval.data.records import AnnotationError, record_id
from lit_retrieval.data.reading import loads_strict, read_text
from lit_retrieval.errors import ConfigError


@dataclass
class TaskSpec:
    """One training or evaluation task.

    Args:
        name: unique task name (logs, curriculum probabilities).
        path: the JSONL file.
        format: `query->target` modalities, e.g. `T->V` (GVE Tab. 6-7 notation).
        batch_size: pairs per batch and device (GVE Tab. 6-7 "BS").
        num_negatives: explicit hard negatives per pair (Tab. 6-7 "Neg."); each record must carry
            at least this many, the first ones are used.
        instruction: the query's instruction (system turn); `None` keeps the default system prompt.
        target_instruction: the target's instruction (default: none, as for GVE's corpus items).
        media_root: folder that relative media paths start from (default: the file's folder).
        max_records: keep a fixed-size random subset (A.4: "we sample a fixed number of instances").
        repeat: repeat the records this many times (A.4's up-sampling of high-value data).
        synthetic: a synthesized (UVRD) task; the GVE-i ablation leaves these out.
        negative_corpus: JSONL files of extra candidate targets (one item per line, media paths relative
            to each file's folder) for per-epoch mining (`data.negative_mining: prober`): GVE Sec. 3.3 mines
            "from a large external corpus"; the paper does not name it, so by default only the task's own
            targets are candidates (`lit_retrieval.data.gve.negatives`).
    """

    name: str
    path: str
    format: str
    batch_size: int = 32
    num_negatives: int = 0
    instruction: str | None = None
    target_instruction: str | None = None
    media_root: str | None = None
    max_records: int | None = None
    repeat: int = 1
    synthetic: bool = False
    negative_corpus: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        try:
            parse_format(self.format)
        except ValueError as err:
            raise ConfigError(f"task {self.name!r}: {err}") from None
        if self.batch_size < 1 or self.num_negatives < 0 or self.repeat < 1:
            raise ConfigError(f"task {self.name!r}: batch_size >= 1, num_negatives >= 0 and repeat >= 1 are required")


@dataclass(frozen=True)
class TaskRecord:
    """One query -> positive pair with its hard negatives."""

    record_id: str
    query: MediaItem
    positive: MediaItem
    negatives: tuple[MediaItem, ...] = ()


def _parse_line(line: str, where: str, spec: TaskSpec, root: Path, query_format: str, target_format: str) -> TaskRecord:
    try:
        raw = loads_strict(line)
    except ValueError as err:
        raise ItemError(f"{where}: not valid JSON ({err})") from None
    if not isinstance(raw, dict) or "query" not in raw or "positive" not in raw:
        raise ItemError(f"{where}: a record needs 'query' and 'positive'")
    query = item_from_json(raw["query"], f"{where} query", root)
    positive = item_from_json(raw["positive"], f"{where} positive", root)
    if query.modality != query_format:
        raise ItemError(f"{where}: query is {query.modality} but task {spec.name!r} is {spec.format}")
    if positive.modality != target_format:
        raise ItemError(f"{where}: positive is {positive.modality} but task {spec.name!r} is {spec.format}")
    raw_negatives = raw.get("negatives", [])
    if not isinstance(raw_negatives, list):
        raise ItemError(f"{where}: 'negatives' must be a list")
    if len(raw_negatives) < spec.num_negatives:
        raise ItemError(f"{where}: {len(raw_negatives)} negatives, task {spec.name!r} needs {spec.num_negatives}")
    negatives = tuple(
        item_from_json(n, f"{where} negative {k}", root) for k, n in enumerate(raw_negatives[: spec.num_negatives])
    )
    for k, negative in enumerate(negatives):
        if negative.modality != target_format:
            raise ItemError(f"{where}: negative {k} is {negative.modality}, targets are {target_format}")
    try:
        given_id = record_id(raw.get("id", where.rsplit(":", 1)[-1]), where, "-")
    except AnnotationError as err:
        raise ItemError(f"{where}: {err.reason}") from None
    return TaskRecord(given_id, query, positive, negatives)


def read_task(
    spec: TaskSpec, on_bad_record: BadRecordPolicy = "raise", seed: int = 0, file_negatives: bool = True
) -> list[TaskRecord]:
    """All records of a task file, checked against its format, subsampled and repeated as set.
    `file_negatives: false` reads no negatives (they are mined during training instead)."""
    path = Path(spec.path)
    if not path.is_file():
        raise AnnotationError(str(path), spec.name, "task file not found")
    root = Path(spec.media_root) if spec.media_root else path.parent
    query_format, target_format = parse_format(spec.format)
    collector = RecordCollector(on_bad_record)
    records: list[TaskRecord] = []
    # ids may repeat: training pairs are not a gallery, and a repeated pair is up-sampling
    for number, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            read = spec if file_negatives else replace(spec, num_negatives=0)
            records.append(_parse_line(line, f"{path}:{number}", read, root, query_format, target_format))
        except ItemError as err:
            collector.reject(AnnotationError(str(path), f"line {number}", str(err).split(": ", 1)[-1]))
    collector.report(f"task {spec.name}")
    if not records:
        raise AnnotationError(str(path), spec.name, "no usable records")
    if spec.max_records is not None and spec.max_records < len(records):
        keep = np.sort(
            np.random.default_rng([seed, len(records)]).choice(len(records), spec.max_records, replace=False)
        )
        records = [records[i] for i in keep]
    return records * spec.repeat


def write_task(path: str | Path, records: list[dict]) -> Path:
    """Write task records (dicts in the format above) as JSONL."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")
    return path
