"""Records every annotation parser produces (docs/architecture.md)."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lit_retrieval.errors import InputError


class AnnotationError(InputError, ValueError):
    """A malformed annotation record; the message names the file and the record (`"-"`: the
    whole file)."""

    def __init__(self, source: str, record: str, reason: str) -> None:
        super().__init__(f"{source}: {reason}" if record == "-" else f"{source}: record {record!r}: {reason}")
        self.source = source
        self.record = record
        self.reason = reason


def read_text(path: str | Path) -> str:
    """The text of an annotation file, decoded as strict UTF-8 (a byte-order mark is allowed); a
    missing, unreadable or non-UTF-8 file is an `AnnotationError`."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise AnnotationError(str(path), "-", "annotation file not found") from None
    except OSError as err:
        raise AnnotationError(str(path), "-", f"cannot read the file ({err.strerror or err})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise AnnotationError(str(path), "-", f"not UTF-8 text (byte {err.start}: {data[err.start:err.start + 4]!r})") from None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def loads_strict(text: str, constants: bool = False) -> Any:
    """`json.loads` under the strict reading every parser uses: a repeated key in one object
    (`json` would silently keep the last) and NaN/Infinity (unless `constants`, for a caller that
    names the offending value itself) are `ValueError`s, as is nesting too deep to parse."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=None if constants else _no_constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def parse_json(text: str, source: str, record: str = "-", constants: bool = False) -> Any:
    """`loads_strict(text)`; invalid JSON is an `AnnotationError` naming `source` and `record`."""
    try:
        return loads_strict(text, constants)
    except ValueError as err:  # json.JSONDecodeError included
        raise AnnotationError(source, record, f"not valid JSON ({err})") from None


def record_id(value: Any, source: str, record: str, what: str = "id") -> str:
    """An id given as a non-empty string or an integer, as a string; else an `AnnotationError`."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and value.strip():
        return value
    raise AnnotationError(source, record, f"{what} must be a non-empty string or an integer, got {value!r}")


def read_json(path: str | Path) -> Any:
    """The parsed JSON of an annotation file (strict UTF-8, `parse_json`'s rules); a missing,
    non-UTF-8 or unparsable file is an `AnnotationError`."""
    return parse_json(read_text(path), str(path))


def read_json_lines(path: str | Path, record: str = "line") -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) of every non-blank line of a JSONL file (`parse_json`'s rules)."""
    for number, line in enumerate(read_text(path).splitlines(), start=1):
        if line.strip():
            yield number, parse_json(line, str(path), f"{record} {number}")


def read_csv(path: str | Path, required: tuple[str, ...]) -> list[dict[str, str]]:
    """Rows of a CSV file with a header (strict UTF-8). A missing file or column, a row with fewer
    or more fields than the header, or unreadable CSV is an `AnnotationError` naming the line."""
    source = str(path)
    reader = csv.DictReader(io.StringIO(read_text(path), newline=""))
    try:
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise AnnotationError(source, "-", f"missing column(s) {missing} (header: {reader.fieldnames})")
        rows = []
        for row in reader:
            if None in row:
                raise AnnotationError(source, f"line {reader.line_num}", f"more fields than the header's {len(reader.fieldnames)}")
            if any(row[c] is None for c in reader.fieldnames):
                raise AnnotationError(source, f"line {reader.line_num}", f"fewer fields than the header's {len(reader.fieldnames)}")
            rows.append(row)
        return rows
    except csv.Error as err:
        raise AnnotationError(source, f"line {reader.line_num}", f"not valid CSV ({err})") from None


def text_field(value: Any, source: str, record: str, what: str) -> str:
    """`value` if it is a non-empty string (stripped), else an `AnnotationError` saying `what`."""
    if not isinstance(value, str) or not value.strip():
        raise AnnotationError(source, record, f"{what} must be a non-empty string, got {value!r}")
    return value.strip()


def positive_duration(value: Any, source: str, record: str) -> float:
    """`value` as a finite duration > 0 seconds, else an `AnnotationError`."""
    duration = finite_number(value, source, record, "duration")
    if duration <= 0:
        raise AnnotationError(source, record, f"duration must be positive, got {duration:g}")
    return duration


def finite_number(value: Any, source: str, record: str, what: str) -> float:
    """`value` as a float if it is a finite JSON number, else an `AnnotationError` saying `what`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise AnnotationError(source, record, f"{what} must be a finite number, got {value!r}")
    return float(value)


def checked_interval(start: float, end: float, duration: float | None, source: str, record: str) -> tuple[float, float]:
    """`(start, end)` if `0 <= start < end <= duration` (1 ms tolerance), else `AnnotationError`."""
    if start < 0 or end <= start:
        raise AnnotationError(source, record, f"interval [{start:g}, {end:g}] needs 0 <= start < end")
    if duration is not None and end > duration + 1e-3:
        raise AnnotationError(source, record, f"interval end {end:g} is past the duration {duration:g}")
    return (start, end)


@dataclass(frozen=True)
class Event:
    """One event of a multi-event video: a description and one or more time intervals (seconds).

    MELON allows one description to cover several distinct intervals (MELON Sec. 1), so
    `intervals` is a tuple of `(start, end)` pairs; `start`/`end` are the span they cover.
    """

    description: str
    intervals: tuple[tuple[float, float], ...]
    theme: str = ""
    event_id: str = ""

    @property
    def start(self) -> float:
        return min(s for s, _ in self.intervals)

    @property
    def end(self) -> float:
        return max(e for _, e in self.intervals)


@dataclass(frozen=True)
class VideoRecord:
    """A video with its events. `path` is relative to the annotation's video root.

    Records of one evaluation split that share a `video_id` are one gallery video with one query
    per record (a multi-caption test set: one record per caption). `window` (seconds) is the part
    of the file the record shows, e.g. a YouCook2 segment of a whole recipe video: frames are
    sampled within it; `None` is the whole file (or `[0, duration]` with `trim_to_annotation`).
    """

    video_id: str
    path: str
    duration: float
    split: str
    events: tuple[Event, ...]
    cuts: tuple[float, ...] = field(default=())
    window: tuple[float, float] | None = None

    @property
    def descriptions(self) -> list[str]:
        return [e.description for e in self.events]
