"""Stage `collect` (MELON supp. C.1): every source's videos in one form, `SourceVideo`, and the
preprocessing rules, with per-source counts as in MELON Tab. 8.

Formats: the project's parsers (`activitynet`, `didemo`, `canonical`, `melon`, `youcook2`:
lit_retrieval/data/) and two more, documented in docs/melon.md:

- `youcook2`: YouCook2's release layout, read by the YouCook2 dataset's `database` and
  `timed_sentences` (lit_retrieval/data/datasets/youcook2.py); `subset` is not used (the build
  makes its own split) and sentences are kept as written, for the rules below to judge.
- `chapters`: a list (or `{"videos": [...]}`) of `{"video_id", "duration", "chapters": [{"start",
  "end"?, "title"}]}`; a chapter without `end` ends where the next one (in time) starts, the last
  one at the video's end, as chapter lists on video sites give start times only.
- `qa` (timestamped QA, captioned by stage `qa-to-caption`): a list (or `{"videos": [...]}`) of
  `{"video_id", "duration", "qa": [{"start", "end", "question", "answer"}]}`.

A video's file is `SOURCE.videos / path` (`path` from the record, else `VIDEO + video_ext`).

Rules, in this order (a video is counted under the first it breaks): the record parses with valid
timestamps (`0 <= start < end <= duration`, finite; any bad one drops the whole record, as the
paper discards "samples lacking essential timestamp information") -> `invalid_record`; duration >=
`min_seconds` -> `short_video`; every description is text with a letter and at least `min_words`
words (a QA pair: question and answer together) -> `broken_description`; the video file exists ->
`missing_video`; at least `min_segments` segments -> `too_few_segments`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lit_retrieval.data.formats.activitynet import ActivityNetParser
from lit_retrieval.data.annotations import load_annotations
from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.formats.didemo import DiDeMoParser
from lit_retrieval.data.formats.melon import MelonParser
from lit_retrieval.data.formats.youcook2 import database, timed_sentences
from lit_retrieval.data.records import (
    AnnotationError,
    VideoRecord,
    checked_interval,
    finite_number,
    positive_duration,
    record_id,
)
from lit_retrieval.data.reading import read_json
from lit_retrieval.melon_build.config import CollectConfig, SourceConfig

COLLECT_REASONS = ("invalid_record", "short_video", "broken_description", "missing_video", "too_few_segments")
_LETTER = re.compile(r"[^\W\d_]")
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Segment:
    """One timestamped description (seconds)."""

    start: float
    end: float
    text: str


@dataclass(frozen=True)
class QAPair:
    """One timestamped question-answer pair of a QA-only source."""

    start: float
    end: float
    question: str
    answer: str


@dataclass(frozen=True)
class SourceVideo:
    """A collected video: `uid` is `SOURCE__VIDEO` (unique over sources; the output's video id),
    `path` the absolute file, `segments` its captions (empty for a QA source until `qa-to-caption`)."""

    uid: str
    source: str
    video_id: str
    path: str
    duration: float
    segments: tuple[Segment, ...] = ()
    qa: tuple[QAPair, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> SourceVideo:
        return cls(
            **{k: raw[k] for k in ("uid", "source", "video_id", "path", "duration")},
            segments=tuple(Segment(**s) for s in raw["segments"]),
            qa=tuple(QAPair(**q) for q in raw["qa"]),
        )


@dataclass(frozen=True)
class Removal:
    """A video (or record) removed by a stage, and why."""

    source: str
    video: str  # the video id (or the record, e.g. `y6 annotation 3`, when the parser names one)
    reason: str
    detail: str


def broken_description(text: Any, min_words: int) -> str | None:
    """Why `text` is a broken description (not text, no letter, fewer than `min_words` words), else None."""
    if not isinstance(text, str):
        return f"not text: {text!r}"
    if not _LETTER.search(text):
        return f"no letters: {text!r}"
    words = len(_WORD.findall(text))
    return f"{words} word(s) < {min_words}: {text!r}" if words < min_words else None


def _record_list(data: Any, source: str) -> list[Any]:
    if isinstance(data, dict) and isinstance(data.get("videos"), list):
        return data["videos"]
    if isinstance(data, list):
        return data
    raise AnnotationError(source, "-", "expected a list of videos or {'videos': [...]}")


def _interval(raw: dict, start_key: str, end_key: str, duration: float, source: str, where: str) -> tuple[float, float]:
    for key in (start_key, end_key):
        if key not in raw:
            raise AnnotationError(source, where, f"missing {key!r}")
    start = finite_number(raw[start_key], source, where, start_key)
    end = finite_number(raw[end_key], source, where, end_key)
    return checked_interval(start, end, duration, source, where)


def _parse_chapters(raw: dict, duration: float, source: str, video: str) -> list[tuple[float, float, Any]]:
    chapters = raw.get("chapters")
    if not isinstance(chapters, list):
        raise AnnotationError(source, video, "'chapters' must be a list of {start, end?, title}")
    starts = []
    for k, chapter in enumerate(chapters):
        if not isinstance(chapter, dict) or "start" not in chapter:
            raise AnnotationError(source, f"{video} chapter {k}", "a chapter needs 'start'")
        starts.append(finite_number(chapter["start"], source, f"{video} chapter {k}", "start"))
    out = []
    for k, chapter in enumerate(chapters):
        where = f"{video} chapter {k}"
        default_end = min((t for t in starts if t > starts[k]), default=duration)
        end = finite_number(chapter.get("end", default_end), source, where, "end")
        out.append((*checked_interval(starts[k], end, duration, source, where), chapter.get("title")))
    return out


def _parse_qa(raw: dict, duration: float, source: str, video: str) -> list[QAPair]:
    pairs = raw.get("qa")
    if not isinstance(pairs, list):
        raise AnnotationError(source, video, "'qa' must be a list of {start, end, question, answer}")
    out = []
    for k, pair in enumerate(pairs):
        where = f"{video} qa {k}"
        if not isinstance(pair, dict):
            raise AnnotationError(source, where, "a QA pair must be an object")
        start, end = _interval(pair, "start", "end", duration, source, where)
        out.append(QAPair(start, end, pair.get("question"), pair.get("answer")))
    return out


class SourceReader:
    """Reads one source into `SourceVideo`s and `Removal`s under the collect rules."""

    def __init__(self, source: SourceConfig, rules: CollectConfig) -> None:
        self.source = source
        self.rules = rules
        self.removed: list[Removal] = []
        self.raw = 0

    def _video(self, video_id: str, path: str, duration: float, captions: list, qa: list[QAPair]) -> SourceVideo:
        s = self.source
        return SourceVideo(
            uid=f"{s.name}__{video_id}",
            source=s.name,
            video_id=video_id,
            path=str(Path(s.videos) / path),
            duration=duration,
            segments=tuple(
                sorted(
                    (Segment(float(a), float(b), t.strip() if isinstance(t, str) else t) for a, b, t in captions),
                    key=lambda s: (s.start, s.end),
                )
            ),
            qa=tuple(sorted(qa, key=lambda q: (q.start, q.end))),
        )

    def _own_format(self, data: Any, collector: RecordCollector) -> list[SourceVideo]:
        s, where = self.source, self.source.annotation
        records: list[tuple[str, Any]]
        if s.format == "youcook2":
            records = database(data, where)
        else:
            records = []
            for position, raw in enumerate(_record_list(data, where)):
                if not isinstance(raw, dict):
                    collector.reject(AnnotationError(where, f"#{position}", "a video record must be an object"))
                    continue
                video = collector.parse(record_id, raw.get("video_id"), where, f"#{position}", "'video_id'")
                if video is not None:
                    records.append((video, raw))

        def parse(video: str, raw: Any) -> SourceVideo:
            if s.format == "youcook2":
                duration, captions = timed_sentences(video, raw, where)
                qa: list[QAPair] = []
            else:
                duration = positive_duration(raw.get("duration"), where, video)
                captions = _parse_chapters(raw, duration, where, video) if s.format == "chapters" else []
                qa = _parse_qa(raw, duration, where, video) if s.format == "qa" else []
            path = raw.get("path") if isinstance(raw.get("path"), str) and raw.get("path") else video + s.video_ext
            return self._video(video, path, duration, captions, qa)

        videos = [collector.parse(parse, video, raw) for video, raw in records]
        return collector.unique([v for v in videos if v is not None], where, one_record_per_video=True)

    def _project_format(self, collector: RecordCollector) -> list[SourceVideo]:
        s = self.source
        loaders: dict[str, Callable[[], list[VideoRecord]]] = {
            "activitynet": lambda: ActivityNetParser(s.videos).load(s.annotation, "all", collector),
            "didemo": lambda: DiDeMoParser().load(s.annotation, "all", collector),
            "canonical": lambda: load_annotations(s.annotation, collector),
            "melon": lambda: MelonParser(video_ext=s.video_ext).load(s.annotation, "all", collector),
        }
        out = []
        for record in loaders[s.format]():
            captions = [(a, b, e.description) for e in record.events for a, b in e.intervals]
            out.append(self._video(record.video_id, record.path, record.duration, captions, []))
        return out

    def read(self) -> list[SourceVideo]:
        """The source's videos that pass the rules (in file order); the others in `removed`."""
        collector = RecordCollector("skip")
        if self.source.format in ("youcook2", "chapters", "qa"):
            videos = self._own_format(read_json(self.source.annotation), collector)
        else:
            videos = self._project_format(collector)
        for err in collector.dropped:
            self.removed.append(Removal(self.source.name, err.record, "invalid_record", err.reason))
        self.raw = len(videos) + len(collector.dropped)
        return [v for v in videos if self._passes(v)]

    def _passes(self, video: SourceVideo) -> bool:
        rules = self.rules
        texts = [s.text for s in video.segments] + [f"{q.question} {q.answer}" for q in video.qa]
        broken = next((r for r in (broken_description(t, rules.min_words) for t in texts) if r), None)
        count = len(video.segments) + len(video.qa)
        checks = [
            ("short_video", video.duration < rules.min_seconds, f"{video.duration:g} s < {rules.min_seconds:g} s"),
            ("broken_description", broken is not None, broken),
            ("missing_video", not Path(video.path).is_file(), f"no file {video.path}"),
            ("too_few_segments", count < rules.min_segments, f"{count} segment(s) < {rules.min_segments}"),
        ]
        failed = next(((reason, detail) for reason, bad, detail in checks if bad), None)
        if failed is not None:
            self.removed.append(Removal(video.source, video.video_id, *failed))
        return failed is None


def collect(sources: list[SourceConfig], rules: CollectConfig) -> tuple[list[SourceVideo], list[Removal], dict]:
    """Every source read under the rules: kept videos (sources in config order), removals, and the
    Tab. 8 counts per source (`raw`, `kept`, `ratio`, removals per reason)."""
    videos, removed, counts = [], [], {}
    for source in sources:
        reader = SourceReader(source, rules)
        kept = reader.read()
        videos += kept
        removed += reader.removed
        by_reason = {r: sum(x.reason == r for x in reader.removed) for r in COLLECT_REASONS}
        counts[source.name] = {
            "raw": reader.raw,
            "kept": len(kept),
            "ratio": round(len(kept) / reader.raw, 4) if reader.raw else 0.0,
            **by_reason,
        }
    return videos, removed, counts
