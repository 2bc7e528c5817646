"""Records every annotation parser produces (DESIGN.md "Layers and their contracts")."""

from __future__ import annotations

from dataclasses import dataclass, field


class AnnotationError(ValueError):
    """A malformed annotation record; the message names the file and the record."""

    def __init__(self, source: str, record: str, reason: str) -> None:
        super().__init__(f"{source}: record {record!r}: {reason}")
        self.source = source
        self.record = record
        self.reason = reason


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
    """A video with its events. `path` is relative to the annotation's video root."""

    video_id: str
    path: str
    duration: float
    split: str
    events: tuple[Event, ...]
    cuts: tuple[float, ...] = field(default=())

    @property
    def descriptions(self) -> list[str]:
        return [e.description for e in self.events]
