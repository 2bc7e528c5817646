"""A user's own corpus as a table: one row per caption, in CSV, TSV, JSON Lines or Parquet.

Layout: one file (or one file per split), the format from its extension (`.csv`; `.tsv`/`.tab`;
`.jsonl`/`.ndjson`; `.parquet`/`.pq`), a header row (CSV, TSV) or one JSON object a line. Columns,
each renameable (`TableColumns`; by default the first present of the common names):

- video: the file, relative to the video root (or absolute): `video`, `file_name` (the Hugging Face
  Hub's `metadata.csv`/`.jsonl`/`.parquet`), `filepath` (open_clip's `--csv-img-key` default), `path`
  (VLM2Vec), `video_path`;
- caption: the query: `caption` (video2dataset, InternVideo2), `text` (VLM2Vec), `title` (open_clip's
  `--csv-caption-key` default), `sentence`;
- start, end (optional; both or neither in a row): the clip of the file the caption describes, in
  seconds. The clip is sampled alone (`VideoRecord.window`), and its id is `{video}#{start}-{end}`;
- duration (optional): the file's duration in seconds; without the column it is read from each
  video's header (one open per video at setup: write the column for a large corpus);
- split: the split of the row; with one table per split (the Hub's layout: a `metadata.csv` in each
  split's folder) every row takes the split of its file and the column is not read.

Numbers may be JSON numbers or text (`"2.0"`: every CSV cell is text; `number_or_text`). Rows that
share a video (and clip) are one video with one query per caption (`VideoRecord`: the multi-caption
rule; `evaluation.v2t_rule` chooses how video-to-text ranks them).

Bad rows, each an `AnnotationError` naming the file and the row (`row N`: the N-th data row, the header
not counted), or dropped and counted under `on_bad_record: skip`: an empty caption or video cell, a
number that is not one, a clip outside `0 <= start < end <= duration`, a split that is not one of the
configured splits, a repeated (video, caption) row of one split, a video given two durations. A missing
column is one line listing the columns found (a wrong separator shows as one long column); a video file
that is missing or has no readable duration follows `on_bad_video` (`raise`: one line naming the row;
`skip`: its rows are dropped and counted). A video in the training split and in an evaluation split is
refused by the data module's split-overlap check, naming the row.
"""

from __future__ import annotations

import csv
import json
import logging
import posixpath
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.records import (
    AnnotationError,
    Event,
    VideoRecord,
    checked_interval,
    number_or_text,
    positive_duration,
    text_field,
)
from lit_retrieval.data.reading import read_csv, read_json_lines
from lit_retrieval.errors import ConfigError

TableFormat = Literal["csv", "tsv", "jsonl", "parquet"]
FORMATS: dict[str, TableFormat] = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".tab": "tsv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
}
SEPARATORS = {"csv": ",", "tsv": "\t"}
# the column names looked for, in order, when a column is not named (module docstring)
DEFAULT_NAMES: dict[str, tuple[str, ...]] = {
    "video": ("video", "file_name", "filepath", "path", "video_path"),
    "caption": ("caption", "text", "title", "sentence"),
    "start": ("start",),
    "end": ("end",),
    "duration": ("duration",),
    "split": ("split",),
}
REQUIRED = ("video", "caption")
log = logging.getLogger(__name__)


def table_format(path: str | Path) -> TableFormat:
    """The format of a table from its file's extension; another extension is a `ConfigError`."""
    found = FORMATS.get(Path(path).suffix.lower())
    if found is None:
        raise ConfigError(f"data.table: {path}: the extension must be one of {sorted(FORMATS)} (it names the format)")
    return found


@dataclass(frozen=True)
class TableColumns:
    """The column of each field (`None`: the first present of `DEFAULT_NAMES`; an optional field
    absent from the table is left out)."""

    video: str | None = None
    caption: str | None = None
    start: str | None = None
    end: str | None = None
    duration: str | None = None
    split: str | None = None

    def resolve(self, found: list[str], source: str) -> dict[str, str]:
        """Field -> column name for this table's columns `found`; a named or required column that is
        missing is an `AnnotationError` listing the columns found."""
        out, missing = {}, []
        for field in (f.name for f in fields(self)):
            named = getattr(self, field)
            candidates = (named,) if named is not None else DEFAULT_NAMES[field]
            column = next((c for c in candidates if c in found), None)
            if column is not None:
                out[field] = column
            elif named is not None or field in REQUIRED:
                missing.append(f"{field}: {named!r}" if named is not None else f"{field}: one of {list(candidates)}")
        if ("start" in out) != ("end" in out):
            missing.append("end" if "start" in out else "start")
        if missing:
            reason = f"missing column(s) {', '.join(missing)} (columns found: {found}); name them with data.*_column"
            if len(found) == 1 and any(sep in found[0] for sep in (",", "\t", ";", "|")):
                reason += " or set data.separator (the header reads as one column)"
            raise AnnotationError(source, "-", reason)
        return out


def read_table(
    path: str | Path, format: TableFormat | None = None, separator: str | None = None
) -> tuple[list[str], list[dict[str, Any]]]:
    """(the columns found, the rows) of a table, strictly (`read_csv`'s and `read_json_lines`' rules; a
    Parquet file through pyarrow); a missing or unreadable file is an `AnnotationError`."""
    path = Path(path)
    format = format or table_format(path)
    if format in SEPARATORS:
        rows: list[dict[str, Any]] = list(read_csv(path, (), separator or SEPARATORS[format]))
        return (list(rows[0]) if rows else []), rows
    if format == "jsonl":
        rows = []
        for number, (line, value) in enumerate(read_json_lines(path), start=1):
            if not isinstance(value, dict):
                raise AnnotationError(str(path), f"row {number}", f"line {line} is not a JSON object")
            rows.append(value)
        columns = list(dict.fromkeys(key for row in rows for key in row))
        return columns, rows
    return _read_parquet(path)


def _read_parquet(path: Path) -> tuple[list[str], list[dict[str, Any]]]:
    import pyarrow.parquet as pq

    if not path.is_file():
        raise AnnotationError(str(path), "-", "annotation file not found")
    try:
        table = pq.read_table(path)
    except Exception as err:  # pyarrow raises ArrowInvalid, OSError and others on a damaged file
        raise AnnotationError(str(path), "-", f"not a readable Parquet file ({err})") from None
    return list(table.column_names), table.to_pylist()


def table_rows(records: Iterable[VideoRecord]) -> list[dict[str, Any]]:
    """One row per query of `records` (each event's description a caption of the record's video, or of
    its clip: `start`/`end` when it has a `window`), with the duration and split: the table of a
    corpus (`lit-retrieval synth --table`). Two events of one record with the same text are one row,
    since the table refuses a repeated (video, caption) row."""
    rows = []
    for record in records:
        clip = {"start": record.window[0], "end": record.window[1]} if record.window else {}
        for caption in dict.fromkeys(record.descriptions):  # a text twice in one record is one caption
            row = {"video": record.path, "caption": caption, **clip}
            rows.append({**row, "duration": round(record.duration, 4), "split": record.split})
    return rows


def write_table(rows: Iterable[dict[str, Any]], path: str | Path) -> Path:
    """Write `rows` as the table format of `path`'s extension, atomically; the columns are every key of
    the rows, in order of first appearance, and a row without one leaves its cell empty (null)."""
    path = Path(path)
    format, rows = table_format(path), list(rows)
    columns = list(dict.fromkeys(key for row in rows for key in row))
    rows = [{column: row.get(column) for column in columns} for row in rows]
    tmp = path.with_name(path.name + ".tmp")
    if format in SEPARATORS:
        with tmp.open("w", encoding="utf-8", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=columns, delimiter=SEPARATORS[format])
            writer.writeheader()
            writer.writerows(rows)
    elif format == "jsonl":
        tmp.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), tmp)
    tmp.replace(path)
    return path


@dataclass
class _Video:
    """What the first row of a video (clip) fixed: its record id, duration and row."""

    duration: float
    row: str


class TableParser:
    """Turns a table's rows into one `VideoRecord` per caption (module docstring).

    Args:
        columns: the column of each field.
        splits: the split names a row may carry (the data module's configured splits).
        video_root: where videos are checked for (and their durations read).
        on_bad_video: `raise` on a row whose video is missing or unreadable, or `skip` its rows.
        duration_of: the duration of a video file (its header), for tables without a duration column.
        format, separator: override the format of the extension and its separator.
    """

    def __init__(
        self,
        columns: TableColumns,
        splits: Collection[str],
        video_root: Path,
        on_bad_video: Literal["raise", "skip"],
        duration_of: Callable[[Path], float],
        format: TableFormat | None = None,
        separator: str | None = None,
    ) -> None:
        self.columns = columns
        self.splits = sorted(splits)
        self.video_root = video_root
        self.on_bad_video = on_bad_video
        self.duration_of = duration_of
        self.format = format
        self.separator = separator
        self.skipped_videos: list[str] = []
        self.first_rows: dict[tuple[str, str], str] = {}  # (video path, split) -> the first row naming it
        # (video path, duration read from the video) -> its duration (0: only checked to exist), or why none
        self._videos: dict[tuple[str, bool], float | str] = {}

    def load(
        self, path: str | Path, collector: RecordCollector, split: str | None = None, prefix: str = ""
    ) -> list[VideoRecord]:
        """The records of one table. `split`: the split of every row (a table per split; a split
        column is then not read), else each row's split column; `prefix`: the table's folder under the
        video root, prepended to relative video paths."""
        source = str(path)
        found, rows = read_table(path, self.format, self.separator)
        if not rows:
            raise AnnotationError(source, "-", "the table has no rows")
        columns = self.columns.resolve(found, source)
        if "split" not in columns and split is None:
            raise AnnotationError(
                source, "-", f"no split column (columns found: {found}); name it with data.split_column"
            )
        videos: dict[str, _Video] = {}
        pairs: dict[tuple[str, str, str], str] = {}  # (record id, split, caption) -> its first row
        records = []
        for number, row in enumerate(rows, start=1):
            where = f"row {number}"
            record = collector.parse(self.row_record, row, columns, split, prefix, source, where)
            if record is None:
                continue
            first = videos.setdefault(record.video_id, _Video(record.duration, where))
            key = (record.video_id, record.split, record.descriptions[0])
            if first.duration != record.duration:
                reason = (
                    f"video {record.path!r} has duration {record.duration:g} here, {first.duration:g} on {first.row}"
                )
                collector.reject(AnnotationError(source, where, reason))
            elif key in pairs:
                reason = (
                    f"repeats {pairs[key]}: the same video {record.path!r} and caption {key[2]!r} in split {key[1]!r}"
                )
                collector.reject(AnnotationError(source, where, reason))
            else:
                pairs[key] = where
                self.first_rows.setdefault((record.path, record.split), where)
                records.append(record)
        if self.skipped_videos:
            log.warning(
                "%s: left out the rows of %d missing or unreadable video(s) (on_bad_video: skip), first: %s",
                source,
                len(self.skipped_videos),
                self.skipped_videos[0],
            )
        return records

    def row_record(
        self, row: dict[str, Any], columns: dict[str, str], split: str | None, prefix: str, source: str, where: str
    ) -> VideoRecord | None:
        """The record of one row; None when its video is missing and `on_bad_video` is `skip`."""

        def cell(field: str) -> Any:
            value = row.get(columns[field])
            return None if value is None or (isinstance(value, str) and not value.strip()) else value

        if cell("video") is None:
            raise AnnotationError(source, where, f"empty video (column {columns['video']!r})")
        if cell("caption") is None:
            raise AnnotationError(source, where, f"empty caption (column {columns['caption']!r})")
        written = text_field(cell("video"), source, where, f"the video (column {columns['video']!r})")
        caption = text_field(cell("caption"), source, where, f"the caption (column {columns['caption']!r})")
        path = written if posixpath.isabs(written) or not prefix else posixpath.join(prefix, written)
        if split is None:
            split = text_field(cell("split"), source, where, f"the split (column {columns['split']!r})")
        if split not in self.splits:
            reason = f"split {split!r} is not one of the configured splits {self.splits} (data.*_split)"
            raise AnnotationError(source, where, reason)
        duration = self._duration(
            path, cell("duration") if "duration" in columns else None, columns.get("duration"), source, where
        )
        if duration is None:
            return None
        window = None
        video_id = path
        if "start" in columns and (cell("start") is not None or cell("end") is not None):
            start = number_or_text(cell("start"), source, where, f"start (column {columns['start']!r})")
            end = number_or_text(cell("end"), source, where, f"end (column {columns['end']!r})")
            window = checked_interval(start, end, duration, source, where)
            video_id = f"{path}#{start:g}-{end:g}"
        span = window or (0.0, duration)
        return VideoRecord(video_id, path, duration, str(split), (Event(caption, (span,)),), window=window)

    def _duration(self, path: str, given: Any, column: str | None, source: str, where: str) -> float | None:
        """The row's duration: its cell in the duration `column`, else (no such column) the video's
        header; a missing (or, read for its duration, unreadable) video raises or, under
        `on_bad_video: skip`, gives None."""
        key = (path, column is None)
        if key not in self._videos:
            self._videos[key] = self._probe(path, column is None)
        known = self._videos[key]
        if isinstance(known, str):
            if self.on_bad_video == "skip":
                if path not in self.skipped_videos:
                    self.skipped_videos.append(path)
                return None
            raise AnnotationError(source, where, f"{known} (data.on_bad_video: skip leaves its rows out)")
        if column is None:
            return known
        if given is None:
            raise AnnotationError(source, where, f"empty duration (column {column!r})")
        return positive_duration(number_or_text(given, source, where, "duration"), source, where)

    def _probe(self, path: str, read_duration: bool) -> float | str:
        file = self.video_root / path
        if not file.is_file():
            return f"video {file} not found"
        if not read_duration:
            return 0.0
        try:
            duration = float(self.duration_of(file))
        except (OSError, ValueError, RuntimeError) as err:  # RuntimeError: VideoDecodeError
            return f"no duration column and video {file} gives none ({err})"
        return duration if duration > 0 else f"no duration column and video {file} gives {duration:g} s"
