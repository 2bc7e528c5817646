"""Records every annotation parser produces (docs/architecture.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
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


def record_id(value: Any, source: str, record: str, what: str = "id") -> str:
    """An id given as a non-empty string or an integer, as a string; else an `AnnotationError`."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and value.strip():
        return value
    raise AnnotationError(source, record, f"{what} must be a non-empty string or an integer, got {value!r}")


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


def number_or_text(value: Any, source: str, record: str, what: str) -> float:
    """`value` as a float if it is a finite number, given as a JSON number or as text (`"2.0"`, `" 3 "`:
    every cell of a CSV or TSV is text), else an `AnnotationError` saying `what`. `nan` and `inf`
    parse as floats but would pass every interval comparison or none, so they are refused too."""
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise AnnotationError(source, record, f"{what} {value!r} is not a number") from None
        if not math.isfinite(number):
            raise AnnotationError(source, record, f"{what} {value!r} is not a finite number")
        return number
    return finite_number(value, source, record, what)


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
