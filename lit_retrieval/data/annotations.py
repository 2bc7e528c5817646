"""The project's canonical multi-event annotation format (JSON), read and written.

Layout (one file for all splits)::

    {"format": "lit-retrieval/multi-event", "version": 1,
     "videos": [
       {"video_id": "syn_00000", "path": "videos/syn_00000.mp4", "duration": 31.5,
        "split": "train", "cuts": [7.5, 15.0],
        "events": [
          {"event_id": "ev_0012", "theme": "Sports", "description": "A red disc ...",
           "start": 0.0, "end": 7.5, "intervals": [[0.0, 7.5]]}, ...]}]}

`intervals` may hold several `[start, end]` pairs for one event; `start`/`end` are then the span
they cover. Either `intervals` or `start`/`end` may be omitted. `cuts` (optional) are ground-truth
shot-boundary times in seconds. Every malformed record raises `AnnotationError` naming the file
and the record.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.records import (
    AnnotationError,
    Event,
    VideoRecord,
    checked_interval,
    finite_number,
    positive_duration,
    text_field,
)
from lit_retrieval.data.reading import read_json

FORMAT_NAME = "lit-retrieval/multi-event"
FORMAT_VERSION = 1


def _parse_intervals(raw: dict, duration: float, source: str, record: str) -> tuple:
    if "intervals" in raw:
        pairs = raw["intervals"]
        if not isinstance(pairs, list) or not pairs:
            raise AnnotationError(source, record, "'intervals' must be a non-empty list of [start, end]")
    elif "start" in raw and "end" in raw:
        pairs = [[raw["start"], raw["end"]]]
    else:
        raise AnnotationError(source, record, "event needs 'intervals' or 'start' and 'end'")
    intervals = []
    for pair in pairs:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise AnnotationError(source, record, f"interval {pair!r} is not [start, end]")
        start = finite_number(pair[0], source, record, "interval start")
        end = finite_number(pair[1], source, record, "interval end")
        intervals.append(checked_interval(start, end, duration, source, record))
    if "intervals" in raw and "start" in raw and "end" in raw:
        span = (min(s for s, _ in intervals), max(e for _, e in intervals))
        given = (finite_number(raw["start"], source, record, "start"), finite_number(raw["end"], source, record, "end"))
        if any(abs(a - b) > 1e-3 for a, b in zip(span, given)):
            raise AnnotationError(source, record, f"start/end {given} disagree with the intervals' span {span}")
    return tuple(sorted(intervals))


def parse_video(raw: Any, source: str, position: int) -> VideoRecord:
    """Turn one raw JSON video object into a `VideoRecord`, validating every field."""
    if not isinstance(raw, dict):
        raise AnnotationError(source, f"#{position}", "a video record must be a JSON object")
    video_id = raw.get("video_id")
    record = str(video_id) if isinstance(video_id, str) and video_id else f"#{position}"
    for key in ("video_id", "path", "duration", "split", "events"):
        if key not in raw:
            raise AnnotationError(source, record, f"missing field {key!r}")
    video_id = text_field(video_id, source, record, "'video_id'")
    path = text_field(raw["path"], source, record, "'path'")
    split = text_field(raw["split"], source, record, "'split'")
    duration = positive_duration(raw["duration"], source, record)
    if not isinstance(raw["events"], list) or not raw["events"]:
        raise AnnotationError(source, record, "'events' must be a non-empty list")
    events = []
    for k, event in enumerate(raw["events"]):
        where = f"{record} event {k}"
        if not isinstance(event, dict):
            raise AnnotationError(source, where, "an event must be a JSON object")
        description = event.get("description")
        if not isinstance(description, str) or not description.strip():
            raise AnnotationError(source, where, "empty or missing 'description'")
        labels = {key: event.get(key, "") for key in ("theme", "event_id")}
        for key, value in labels.items():
            if not isinstance(value, (str, int)) or isinstance(value, bool):
                raise AnnotationError(source, where, f"'{key}' must be a string, got {value!r}")
        events.append(
            Event(
                description=description.strip(),
                intervals=_parse_intervals(event, duration, source, where),
                theme=str(labels["theme"]),
                event_id=str(labels["event_id"]),
            )
        )
    raw_cuts = raw.get("cuts", [])
    if not isinstance(raw_cuts, list):
        raise AnnotationError(source, record, f"'cuts' must be a list of times in seconds, got {raw_cuts!r}")
    cuts = tuple(finite_number(c, source, record, "cut time") for c in raw_cuts)
    if any(not 0 <= c <= duration + 1e-3 for c in cuts):
        raise AnnotationError(source, record, f"cut times must lie in [0, duration {duration:g}]")
    return VideoRecord(video_id=video_id, path=path, duration=duration, split=split, events=tuple(events), cuts=cuts)


def load_annotations(path: str | Path, collector: RecordCollector | None = None) -> list[VideoRecord]:
    """Read a canonical annotation file. A malformed video record raises `AnnotationError`, or is
    dropped and kept in `collector.dropped` under its `skip` policy; a file that cannot be read at
    all always raises."""
    collector = collector or RecordCollector()
    path = Path(path)
    source = str(path)
    data = read_json(path)
    if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
        raise AnnotationError(source, "-", f"not a {FORMAT_NAME!r} file (missing or wrong 'format')")
    if data.get("version") != FORMAT_VERSION:
        raise AnnotationError(source, "-", f"unsupported version {data.get('version')!r}")
    raw_videos = data.get("videos", [])
    if not isinstance(raw_videos, list):
        raise AnnotationError(source, "-", f"'videos' must be a list of video objects, got {type(raw_videos).__name__}")
    videos = [collector.parse(parse_video, raw, source, i) for i, raw in enumerate(raw_videos)]
    return collector.unique([v for v in videos if v is not None], source, one_record_per_video=True)


def video_to_json(video: VideoRecord) -> dict:
    """The canonical JSON object of one video."""
    out: dict[str, Any] = {
        "video_id": video.video_id,
        "path": video.path,
        "duration": round(video.duration, 4),
        "split": video.split,
        "events": [
            {
                "event_id": e.event_id,
                "theme": e.theme,
                "description": e.description,
                "start": round(e.start, 4),
                "end": round(e.end, 4),
                "intervals": [[round(s, 4), round(t, 4)] for s, t in e.intervals],
            }
            for e in video.events
        ],
    }
    if video.cuts:
        out["cuts"] = [round(c, 4) for c in video.cuts]
    return out


def save_annotations(videos: Iterable[VideoRecord], path: str | Path) -> None:
    """Write videos in the canonical format (atomically: a crash never leaves half a file)."""
    path = Path(path)
    payload = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "videos": [video_to_json(v) for v in videos]}
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1))
    tmp.replace(path)
