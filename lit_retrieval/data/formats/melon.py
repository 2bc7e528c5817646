"""MELON annotations (Hur et al.; MELON Sec. 3), read tolerantly.

No public MELON release was found, so the layout below is what the paper describes (each event a
JSON object with Theme, Description, Timestamp; 3-5 events per video; a description may cover
several intervals) and the parser accepts the plausible variants:

- the file: `{"videos": [record, ...]}`, a list of records, or `{video_id: record}` where a record
  may also be the bare list of its events;
- keys in any letter case; their names are configurable (`MelonFields`) once the release shows;
- `Timestamp`: `"MM:SS - MM:SS"`, `"HH:MM:SS-HH:MM:SS"`, seconds (`"35.0-130"`, `[35.0, 130]`),
  `{"start": .., "end": ..}`, or a list of any of these (several intervals); a string may also
  list intervals separated by `,` or `;`.

Events keep their order in the file (the query concatenates them in that order). A video without
a `duration` gets the duration of its file when a prober is given (PyAV reads the container
header), else it is a bad record. Every bad record raises `AnnotationError` naming the file and
the record, or is dropped under the `skip` policy.

The construction rules (`MelonRules`, `video_violations`; MELON Sec. 3 and supp. C.1): 3 to 5
events per video ("K ranges from 3 to 5") that do not overlap (touching intervals do not), and at
least 2 minutes of video, annotated and, given the files, measured. `lit-retrieval validate-melon`
reports them through `lit_retrieval.melon_build.validation`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.records import AnnotationError, Event, VideoRecord, checked_interval, text_field
from lit_retrieval.data.reading import read_json
from lit_retrieval.data.media.video import VideoDecodeError, video_duration
from lit_retrieval.errors import UsageError

RANGE = re.compile(r"^\s*([0-9:.]+)\s*(?:-|–|~|to)\s*([0-9:.]+)\s*$")


@dataclass
class MelonFields:
    """Key names of a MELON record and event (matched case-insensitively). `events` lists the keys
    tried in turn for a record's events."""

    video_id: str = "video_id"
    path: str = "path"
    duration: str = "duration"
    split: str = "split"
    events: list[str] = field(default_factory=lambda: ["events", "summaries", "event_summaries"])
    theme: str = "theme"
    description: str = "description"
    timestamp: str = "timestamp"


def clock_seconds(text: str) -> float:
    """`"HH:MM:SS(.f)"`, `"MM:SS(.f)"` or `"SS(.f)"` as seconds; `ValueError` otherwise."""
    parts = text.strip().split(":")
    if not 1 <= len(parts) <= 3 or any(not p or not re.fullmatch(r"\d+(\.\d*)?", p) for p in parts):
        raise ValueError(f"not a time: {text!r}")
    seconds = 0.0
    for part in parts:
        seconds = seconds * 60 + float(part)
    return seconds


def _time(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"not a time: {value!r}")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ValueError(f"not a time: {value!r}")
        return float(value)
    if isinstance(value, str):
        return clock_seconds(value)
    raise ValueError(f"not a time: {value!r}")


def parse_timestamp(value: Any) -> list[tuple[float, float]]:
    """Every interval a MELON `Timestamp` value holds, as `(start, end)` seconds, in order given."""
    if isinstance(value, str):
        pieces = [p for p in re.split(r"[,;]", value) if p.strip()]
        if not pieces:
            raise ValueError("empty timestamp")
        out = []
        for piece in pieces:
            match = RANGE.match(piece)
            if not match:
                raise ValueError(f"cannot read {piece.strip()!r} as 'start - end'")
            out.append((clock_seconds(match.group(1)), clock_seconds(match.group(2))))
        return out
    if isinstance(value, dict):
        keys = {k.lower(): v for k, v in value.items()}
        if "start" not in keys or "end" not in keys:
            raise ValueError(f"an interval object needs 'start' and 'end', got {sorted(value)}")
        return [(_time(keys["start"]), _time(keys["end"]))]
    if isinstance(value, list) and value:
        scalar = all(isinstance(v, (int, float)) or (isinstance(v, str) and not RANGE.match(v)) for v in value)
        if scalar:
            if len(value) != 2:
                raise ValueError(f"an interval needs [start, end], got {value!r}")
            return [(_time(value[0]), _time(value[1]))]
        return [interval for item in value for interval in parse_timestamp(item)]
    raise ValueError(f"unreadable timestamp {value!r}")


def _lower_keys(raw: dict) -> dict[str, Any]:
    return {str(k).lower(): v for k, v in raw.items()}


def _records(data: Any, source: str) -> list[tuple[str | None, Any]]:
    """(video id if the layout gives it outside the record, raw record) pairs."""
    if isinstance(data, list):
        return [(None, r) for r in data]
    if isinstance(data, dict):
        if isinstance(data.get("videos"), list):
            return [(None, r) for r in data["videos"]]
        return [(str(k), v) for k, v in data.items()]
    raise AnnotationError(source, "-", "expected a list of videos or an object keyed by video id")


class MelonParser:
    """Turns MELON files into `VideoRecord`s (see the module docstring for what is accepted)."""

    def __init__(
        self,
        fields: MelonFields | None = None,
        video_ext: str = ".mp4",
        duration_of: Callable[[str], float] | None = None,
    ) -> None:
        self.fields = fields or MelonFields()
        self.video_ext = video_ext
        self.duration_of = duration_of

    def load(
        self, path: str | Path, split: str | None = None, collector: RecordCollector | None = None
    ) -> list[VideoRecord]:
        """Records of one file; `split` (a file per split) overrides the records' split field."""
        collector = collector or RecordCollector()
        source = str(path)
        data = read_json(path)
        videos = [
            collector.parse(self.parse_video, outer_id, raw, source, position, split)
            for position, (outer_id, raw) in enumerate(_records(data, source))
        ]
        return collector.unique([v for v in videos if v is not None], source, one_record_per_video=True)

    def parse_video(
        self, outer_id: str | None, raw: Any, source: str, position: int, file_split: str | None
    ) -> VideoRecord:
        f = self.fields
        if isinstance(raw, list):
            raw = {f.events[0]: raw}
        if not isinstance(raw, dict):
            raise AnnotationError(
                source, outer_id or f"#{position}", "a video record must be an object or a list of events"
            )
        keys = _lower_keys(raw)
        video_id = outer_id or keys.get(f.video_id.lower())
        if isinstance(video_id, int) and not isinstance(video_id, bool):
            video_id = str(video_id)
        record = video_id if isinstance(video_id, str) and video_id else f"#{position}"
        if not video_id:
            raise AnnotationError(source, record, f"missing field {f.video_id!r}")
        video_id = text_field(video_id, source, record, repr(f.video_id))
        path = keys.get(f.path.lower()) or f"{video_id}{self.video_ext}"
        path = text_field(path, source, record, repr(f.path))
        split = file_split or keys.get(f.split.lower())
        if not split:
            raise AnnotationError(source, record, f"missing field {f.split!r} (or give one file per split)")
        split = text_field(split, source, record, repr(f.split))
        duration = self._duration(keys.get(f.duration.lower()), path, source, record)
        raw_events = next((keys[k.lower()] for k in f.events if k.lower() in keys), None)
        if not isinstance(raw_events, list) or not raw_events:
            raise AnnotationError(source, record, f"no events: expected a non-empty list under one of {f.events}")
        events = tuple(self._event(e, duration, source, f"{record} event {k}") for k, e in enumerate(raw_events))
        return VideoRecord(video_id=str(video_id), path=path, duration=duration, split=str(split), events=events)

    def _duration(self, value: Any, path: str, source: str, record: str) -> float:
        if value is None:
            if self.duration_of is None:
                raise AnnotationError(source, record, f"missing field {self.fields.duration!r}")
            try:
                probed = float(self.duration_of(path))
            except (OSError, ValueError, RuntimeError) as err:  # RuntimeError: VideoDecodeError
                raise AnnotationError(source, record, f"no duration field and the video gives none ({err})") from None
            if not 0 < probed < math.inf:
                raise AnnotationError(source, record, f"no duration field and the video's header gives {probed:g} s")
            return probed
        try:
            duration = _time(value)
        except ValueError:
            raise AnnotationError(source, record, f"duration {value!r} is not a number or a clock time") from None
        if not 0 < duration < math.inf:
            raise AnnotationError(source, record, f"duration must be positive and finite, got {duration:g}")
        return duration

    def _event(self, raw: Any, duration: float, source: str, record: str) -> Event:
        f = self.fields
        if not isinstance(raw, dict):
            raise AnnotationError(source, record, "an event must be an object")
        keys = _lower_keys(raw)
        description = keys.get(f.description.lower())
        if not isinstance(description, str) or not description.strip():
            raise AnnotationError(source, record, f"empty or missing {f.description!r}")
        if f.timestamp.lower() not in keys:
            raise AnnotationError(source, record, f"missing {f.timestamp!r}")
        try:
            intervals = parse_timestamp(keys[f.timestamp.lower()])
        except ValueError as err:
            raise AnnotationError(source, record, f"bad {f.timestamp!r}: {err}") from None
        checked = tuple(sorted(checked_interval(s, e, duration, source, record) for s, e in intervals))
        theme = keys.get(f.theme.lower()) or ""
        if not isinstance(theme, str):
            raise AnnotationError(source, record, f"{f.theme!r} must be a string, got {theme!r}")
        return Event(description=description.strip(), intervals=checked, theme=theme)


@dataclass(frozen=True)
class MelonRules:
    """The construction rules checked (MELON's values by default)."""

    min_events: int = 3
    max_events: int = 5
    min_seconds: float = 120.0
    t2t_threshold: float | None = None  # supp. C.2's 0.70; None: not checked

    def __post_init__(self) -> None:
        """Refuse rules that would silently pass everything (a NaN compares false) or nothing."""
        if self.min_events < 1 or self.min_events > self.max_events:
            raise UsageError("--min-events", f"{self.min_events} must lie in [1, --max-events {self.max_events}]")
        if not math.isfinite(self.min_seconds) or self.min_seconds < 0:
            raise UsageError("--min-seconds", f"must be a finite number >= 0, got {self.min_seconds}")
        if self.t2t_threshold is not None and not -1 <= self.t2t_threshold <= 1:  # NaN fails too
            raise UsageError("--t2t", f"must be a cosine similarity in [-1, 1], got {self.t2t_threshold}")


@dataclass(frozen=True)
class Violation:
    """One broken rule: the annotation file, the video (`-`: the file), the rule and why."""

    source: str
    record: str
    rule: str
    reason: str

    def __str__(self) -> str:
        return f"{self.source}: record {self.record!r}: [{self.rule}] {self.reason}"


def overlaps(video: VideoRecord) -> list[tuple[int, int, tuple[float, float], tuple[float, float]]]:
    """Pairs of events (i < j) with intervals that share more than a point, and those intervals."""
    found = []
    for i, first in enumerate(video.events):
        for j in range(i + 1, len(video.events)):
            pairs = [(a, b) for a in first.intervals for b in video.events[j].intervals]
            hit = next(((a, b) for a, b in pairs if min(a[1], b[1]) > max(a[0], b[0])), None)
            if hit is not None:
                found.append((i, j, *hit))
    return found


def video_violations(video: VideoRecord, source: str, rules: MelonRules, video_root: Path | None) -> list[Violation]:
    """Every rule `video` breaks (file checks only with `video_root`)."""
    found: list[tuple[str, str]] = []  # (rule, reason)
    count = len(video.events)
    if not rules.min_events <= count <= rules.max_events:
        found.append(("events", f"{count} events; {rules.min_events}-{rules.max_events} needed"))
    if video.duration < rules.min_seconds:
        found.append(("duration", f"annotated duration {video.duration:g} s < {rules.min_seconds:g} s"))
    for i, j, a, b in overlaps(video):
        found.append(("overlap", f"events {i} [{a[0]:g}, {a[1]:g}] and {j} [{b[0]:g}, {b[1]:g}] overlap"))
    if video_root is not None:
        try:
            seconds = video_duration(video_root / video.path)
        except VideoDecodeError as err:
            found.append(("video", f"{err.path}: {err.reason}"))
        else:
            if seconds < rules.min_seconds:
                found.append(("video_duration", f"{video.path} lasts {seconds:g} s < {rules.min_seconds:g} s"))
    return [Violation(source, video.video_id, rule, reason) for rule, reason in found]
