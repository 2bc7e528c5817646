"""The LLM and LMM stages of `build-melon` for one video each, as functions of their inputs (the stage
runner caches their results per video):

- `qa_to_captions` (MELON Sec. 3 "Data Merging", supp. F.1): timestamped QA pairs -> captions;
- `summarise_events` (Sec. 3 "Multi-Event Summary", supp. F.2): dense segments -> K = 3-5 events of
  Theme + Description + Timestamp; without an endpoint, `adjacent_grouping` (not the paper's method);
- `judge_events` (supp. C.3, F.3; test split): an LMM flags events whose description or interval does
  not match frames of the interval; flagged events go to a review file (`review_rows`,
  `write_review`) that a person marks, read back by `read_review` and applied by `apply_review`.

Choices the paper leaves open (docs/melon.md, "The chat endpoint"): one request per QA pair, one per
video for summarise and for judge; answers are compared to the video's length within
`TIME_TOLERANCE_S` (the prompt shows times rounded to 0.01 s) and clamped; a video with fewer segments
than `min_events` is rejected before summarising (`VideoRejected`), since K events cannot be grounded
in fewer segments; after review, a video left with fewer than `min_events` events is dropped.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lit_retrieval.errors import ConfigError, InputError
from lit_retrieval.melon_build.chat import ChatClient, RequestKey, image_part
from lit_retrieval.melon_build.prompts import PromptTemplates

METHOD_LLM = "llm-summary"
METHOD_FALLBACK = "adjacent-grouping"  # not the paper's method: no LLM, adjacent segments grouped
DECISIONS = ("pending", "accept", "reject")
TIME_TOLERANCE_S = 0.05

CAPTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"caption": {"type": "string", "pattern": r"\S"}},
    "required": ["caption"],
}


@dataclass(frozen=True)
class LlmStageSettings:
    """Knobs of the LLM/LMM stages (the build config's `llm:` section).

    prompts: the templates (`PromptTemplates`; each field overridable).
    min_events, max_events: K's range (MELON: 3-5).
    segments_per_fallback_event: the fallback's K rule, K = clamp(ceil(segments / this), min, max).
    judge_frames: frames the runner samples per event for the judge.
    """

    prompts: PromptTemplates = field(default_factory=PromptTemplates)
    min_events: int = 3
    max_events: int = 5
    segments_per_fallback_event: int = 3
    judge_frames: int = 4

    def __post_init__(self) -> None:
        for name in ("min_events", "max_events", "segments_per_fallback_event", "judge_frames"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"llm.{name} must be an integer >= 1, got {value!r}")
        if self.max_events < self.min_events:
            raise ConfigError(f"llm.max_events ({self.max_events}) must be >= llm.min_events ({self.min_events})")

    def fingerprint(self) -> dict[str, Any]:
        """The settings as plain data, for the stage cache's key."""
        return asdict(self)


class VideoRejected(ValueError):
    """The video cannot give a result at this stage (its input, not the endpoint, is the cause)."""

    def __init__(self, video_id: str, reason: str) -> None:
        super().__init__(f"video {video_id}: {reason}")
        self.video_id = video_id
        self.reason = reason


class ReviewError(InputError):
    """A review file row that cannot be used; the message names the file and the line."""


def _time(seconds: float) -> str:
    return f"{seconds:.2f}".rstrip("0").rstrip(".")


def _messages(system: str, user: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def qa_to_captions(client: ChatClient, video_id: str, qa_pairs: list[dict], settings: LlmStageSettings) -> list[dict]:
    """One caption per timestamped QA pair (MELON Sec. 3: an LLM turns each QA pair into a caption of
    its interval). `qa_pairs`: `{start, end, question, answer}`; returns `{start, end, text}` in the
    same order. One request per pair, run concurrently; `ChatFailure` if any pair gets no valid answer
    (the others are cached, so a re-run asks only for the failed one)."""
    p = settings.prompts
    requests = []
    for i, qa in enumerate(qa_pairs):
        times = {"start": _time(qa["start"]), "end": _time(qa["end"])}
        messages = _messages(
            p.render("qa_to_caption_system", **times),
            p.render("qa_to_caption_user", question=qa["question"], answer=qa["answer"], **times),
        )
        requests.append((messages, CAPTION_SCHEMA, RequestKey("qa-to-caption", video_id, str(i)), None))
    answers = client.complete_many(requests)
    return [{"start": qa["start"], "end": qa["end"], "text": a["caption"].strip()} for qa, a in zip(qa_pairs, answers)]


def summary_schema(settings: LlmStageSettings) -> dict[str, Any]:
    """The JSON schema of a summarise answer: `{"events": [K x {theme, description, start, end}]}`."""
    event = {
        "type": "object",
        "properties": {
            "theme": {"type": "string", "pattern": r"\S"},
            "description": {"type": "string", "pattern": r"\S"},
            "start": {"type": "number", "minimum": 0},
            "end": {"type": "number", "minimum": 0},
        },
        "required": ["theme", "description", "start", "end"],
    }
    return {
        "type": "object",
        "properties": {
            "events": {
                "type": "array",
                "items": event,
                "minItems": settings.min_events,
                "maxItems": settings.max_events,
            }
        },
        "required": ["events"],
    }


def _timed_events(events: list[dict], duration: float) -> tuple[list[dict], str | None]:
    """`events` in time order with intervals clamped to the video (within `TIME_TOLERANCE_S`), and the
    first reason they are unusable: an interval outside the video or empty, or two that overlap."""
    ordered = sorted(events, key=lambda e: (e["start"], e["end"]))
    out = []
    for k, event in enumerate(ordered):
        start, end = float(event["start"]), float(event["end"])
        if end > duration + TIME_TOLERANCE_S:
            return [], f"event {k} ends at {end:g} s, after the video's end ({duration:g} s)"
        end = min(end, duration)
        if end <= start:
            return [], f"event {k} has an empty interval [{start:g}, {end:g}]"
        if out and start < out[-1]["end"] - TIME_TOLERANCE_S:
            return [], f"events {k - 1} and {k} overlap ({out[-1]['end']:g} s > {start:g} s)"
        if out:
            out[-1]["end"] = min(out[-1]["end"], start)
        out.append({**event, "start": start, "end": end})
    return out, None


def summarise_events(
    client: ChatClient | None, video_id: str, duration: float, segments: list[dict], settings: LlmStageSettings
) -> list[dict]:
    """K = `min_events`..`max_events` non-overlapping events in time order, each
    `{theme, description, start, end, method}` (MELON Sec. 3 "Multi-Event Summary"): one request with
    all of the video's `segments` (`{start, end, text}`); an answer outside the schema, with K out of
    range, overlapping events or an event outside the video is retried, then `ChatFailure`.
    With `client` None: `adjacent_grouping` (method "adjacent-grouping"). `VideoRejected` when there
    are fewer segments than `min_events`."""
    ordered = sorted(segments, key=lambda s: (s["start"], s["end"]))
    if len(ordered) < settings.min_events:
        raise VideoRejected(video_id, f"{len(ordered)} segment(s) left, fewer than min_events={settings.min_events}")
    if client is None:
        return adjacent_grouping(video_id, duration, ordered, settings)
    p = settings.prompts
    values = {
        "duration": _time(duration),
        "min_events": settings.min_events,
        "max_events": settings.max_events,
        "segments": "\n".join(
            f"[{_time(s['start'])}-{_time(s['end'])}] {' '.join(s['text'].split())}" for s in ordered
        ),
    }
    answer = client.complete_json(
        _messages(p.render("summarise_system", **values), p.render("summarise_user", **values)),
        summary_schema(settings),
        RequestKey("summarise", video_id),
        check=lambda a: _timed_events(a["events"], duration)[1],
    )
    events, _ = _timed_events(answer["events"], duration)
    return [
        {
            "theme": e["theme"].strip(),
            "description": e["description"].strip(),
            "start": e["start"],
            "end": e["end"],
            "method": METHOD_LLM,
        }
        for e in events
    ]


def adjacent_grouping(video_id: str, duration: float, segments: list[dict], settings: LlmStageSettings) -> list[dict]:
    """The deterministic stand-in for the summary when no endpoint is configured (NOT MELON's method;
    each event says `method: "adjacent-grouping"`): the time-ordered segments are cut into
    K = clamp(ceil(n / segments_per_fallback_event), min_events, max_events) runs of adjacent segments,
    as equal in count as possible (the first n mod K runs one longer). An event spans its run (from
    the first start to the last end, inside the video; where it would overlap the next event it ends
    where that one starts), its description is the run's texts joined in order, its theme is empty."""
    n = len(segments)
    k = min(settings.max_events, max(settings.min_events, math.ceil(n / settings.segments_per_fallback_event)))
    base, longer = divmod(n, k)
    runs, first = [], 0
    for size in [base + 1] * longer + [base] * (k - longer):
        runs.append(segments[first : first + size])
        first += size
    events = [
        {
            "theme": "",
            "description": " ".join(" ".join(s["text"].split()) for s in run),
            "start": max(0.0, min(s["start"] for s in run)),
            "end": min(duration, max(s["end"] for s in run)),
            "method": METHOD_FALLBACK,
        }
        for run in runs
    ]
    for event, following in zip(events, events[1:]):
        event["end"] = min(event["end"], following["start"])
    empty = [i for i, e in enumerate(events) if e["end"] <= e["start"]]
    if empty:
        raise VideoRejected(
            video_id, f"adjacent grouping gives event {empty[0]} an empty interval (segments share a start)"
        )
    return events


def judge_schema(num_events: int) -> dict[str, Any]:
    """The JSON schema of a judge answer: one verdict per event."""
    verdict = {
        "type": "object",
        "properties": {
            "index": {"type": "integer", "minimum": 0, "maximum": num_events - 1},
            "consistent": {"type": "boolean"},
            "reason": {"type": "string"},
            "suggestion": {"type": "string"},
        },
        "required": ["index", "consistent", "reason"],
    }
    events = {"type": "array", "items": verdict, "minItems": num_events, "maxItems": num_events}
    return {"type": "object", "properties": {"events": events}, "required": ["events"]}


def _judge_problem(answer: dict[str, Any], num_events: int) -> str | None:
    indices = sorted(v["index"] for v in answer["events"])
    return (
        None
        if indices == list(range(num_events))
        else f"verdict indices {indices}, expected 0..{num_events - 1} once each"
    )


def judge_events(
    client: ChatClient,
    video_id: str,
    frames_per_event: list[list[bytes]],
    events: list[dict],
    settings: LlmStageSettings,
) -> list[dict]:
    """An LMM's verdict on each {video, timestamp, description} triplet (MELON supp. C.3): one request
    per video holding, for each event, its text (`judge_event` template) followed by its frames (PNG
    or JPEG bytes sampled inside the event's interval). Returns `{index, consistent, reason,
    suggestion}` per event, in event order; `ChatFailure` when no valid verdict comes."""
    if not events:
        return []
    if len(frames_per_event) != len(events):
        raise ValueError(f"video {video_id}: {len(frames_per_event)} frame lists for {len(events)} events")
    if any(not frames for frames in frames_per_event):
        raise ValueError(f"video {video_id}: every event needs at least one frame")
    p = settings.prompts
    counts = {"num_events": len(events)}
    content: list[dict[str, Any]] = [{"type": "text", "text": p.render("judge_user", **counts)}]
    for index, (event, frames) in enumerate(zip(events, frames_per_event)):
        text = p.render(
            "judge_event",
            index=index,
            start=_time(event["start"]),
            end=_time(event["end"]),
            theme=event.get("theme", ""),
            description=event["description"],
        )
        content += [{"type": "text", "text": text}, *(image_part(f) for f in frames)]
    answer = client.complete_json(
        _messages(p.render("judge_system", **counts), content),
        judge_schema(len(events)),
        RequestKey("judge", video_id),
        check=lambda a: _judge_problem(a, len(events)),
    )
    verdicts = sorted(answer["events"], key=lambda v: v["index"])
    return [
        {
            "index": v["index"],
            "consistent": v["consistent"],
            "reason": v["reason"],
            "suggestion": v.get("suggestion", ""),
        }
        for v in verdicts
    ]


# The review file: JSON Lines, one row per flagged event, in these fields; a person sets `decision`
# to accept or reject and may correct `theme` and `description` of an accepted event.
REVIEW_FIELDS = ("video_id", "index", "start", "end", "theme", "description", "reason", "suggestion", "decision")


def review_rows(video_id: str, events: list[dict], verdicts: list[dict]) -> list[dict]:
    """The review rows (decision "pending") of the events the judge found inconsistent."""
    return [
        {
            "video_id": video_id,
            "index": v["index"],
            "start": events[v["index"]]["start"],
            "end": events[v["index"]]["end"],
            "theme": events[v["index"]].get("theme", ""),
            "description": events[v["index"]]["description"],
            "reason": v["reason"],
            "suggestion": v.get("suggestion", ""),
            "decision": "pending",
        }
        for v in verdicts
        if not v["consistent"]
    ]


def merge_review(rows: list[dict], previous: list[dict]) -> list[dict]:
    """`rows` with the decisions (and corrected theme/description) already made in `previous` for the
    same event (same video, index and interval), so a re-run of the judge keeps a person's work."""
    done = {(r["video_id"], r["index"], r["start"], r["end"]): r for r in previous if r["decision"] != "pending"}
    merged = []
    for row in rows:
        old = done.get((row["video_id"], row["index"], row["start"], row["end"]))
        if old is not None:
            row = {**row, "decision": old["decision"], "theme": old["theme"], "description": old["description"]}
        merged.append(row)
    return merged


def write_review(path: str | Path, rows: list[dict]) -> None:
    """Write the review file atomically, one JSON object per line, fields in `REVIEW_FIELDS` order."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as tmp:
        for row in rows:
            tmp.write(json.dumps({name: row[name] for name in REVIEW_FIELDS}) + "\n")
    os.replace(tmp.name, path)


def _row_problem(row: Any) -> str | None:
    if not isinstance(row, dict):
        return "not a JSON object"
    missing = [name for name in REVIEW_FIELDS if name not in row]
    if missing:
        return f"missing field(s) {missing}"
    if not isinstance(row["video_id"], str) or not row["video_id"]:
        return "video_id must be a non-empty string"
    if isinstance(row["index"], bool) or not isinstance(row["index"], int) or row["index"] < 0:
        return f"index must be an integer >= 0, got {row['index']!r}"
    for name in ("start", "end"):
        if isinstance(row[name], bool) or not isinstance(row[name], (int, float)):
            return f"{name} must be a number, got {row[name]!r}"
    for name in ("theme", "description", "reason", "suggestion"):
        if not isinstance(row[name], str):
            return f"{name} must be a string"
    if not row["description"].strip():
        return "description is empty"
    if row["decision"] not in DECISIONS:
        return f"decision must be one of {list(DECISIONS)}, got {row['decision']!r}"
    return None


def read_review(path: str | Path) -> list[dict]:
    """The rows of a review file, each with its `line` number; `ReviewError` naming the file and line
    of the first row that is not valid JSON, lacks a field, has a wrong type or an unknown decision,
    or repeats an event."""
    rows, seen = [], {}
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as err:
                raise ReviewError(f"{path}: line {line_no}: not valid JSON ({err})") from None
            problem = _row_problem(row)
            if problem:
                raise ReviewError(f"{path}: line {line_no}: {problem}")
            event = (row["video_id"], row["index"])
            if event in seen:
                raise ReviewError(
                    f"{path}: line {line_no}: video {event[0]} event {event[1]} again (first on line {seen[event]})"
                )
            seen[event] = line_no
            rows.append({**row, "line": line_no})
    return rows


def apply_review(
    path: str | Path, rows: list[dict], events_by_video: dict[str, list[dict]], min_events: int
) -> tuple[dict[str, list[dict]], dict[str, str]]:
    """The test split after review (MELON supp. C.3: flagged summaries are kept or removed by people):
    a rejected event is removed, an accepted one kept with the row's theme and description; a video
    left with fewer than `min_events` events is dropped. Returns (events per kept video, reason per
    dropped video). `ReviewError` (naming `path` and the line) while any row is pending, or when a row
    does not match the current summary (its video, event index or interval differ: the summary was
    rebuilt after the judge ran)."""
    pending = [r for r in rows if r["decision"] == "pending"]
    if pending:
        first = pending[0]
        raise ReviewError(
            f"{path}: line {first['line']}: {len(pending)} flagged event(s) still pending "
            f"(first: video {first['video_id']} event {first['index']}); set decision to accept or reject"
        )
    kept = {video: [dict(e) for e in events] for video, events in events_by_video.items()}
    rejected: dict[str, set[int]] = {}
    for row in rows:
        events = kept.get(row["video_id"])
        if events is None or row["index"] >= len(events):
            raise ReviewError(
                f"{path}: line {row['line']}: no event {row['index']} of video {row['video_id']} in the summary"
            )
        event = events[row["index"]]
        if abs(event["start"] - row["start"]) > 1e-6 or abs(event["end"] - row["end"]) > 1e-6:
            raise ReviewError(
                f"{path}: line {row['line']}: interval [{row['start']:g}, {row['end']:g}] differs from the summary's "
                f"[{event['start']:g}, {event['end']:g}]; re-run the judge stage"
            )
        if row["decision"] == "reject":
            rejected.setdefault(row["video_id"], set()).add(row["index"])
        else:
            event.update(theme=row["theme"], description=row["description"].strip())
    dropped = {}
    for video, indices in rejected.items():
        left = [e for i, e in enumerate(kept[video]) if i not in indices]
        if len(left) < min_events:
            dropped[video] = f"{len(left)} event(s) left after review, fewer than min_events={min_events}"
            del kept[video]
        else:
            kept[video] = left
    return kept, dropped
