"""The bad-record policy shared by every annotation parser: `raise` stops at the first malformed
record with an `AnnotationError` naming the file, the record and the reason; `skip` drops the
record, keeps the error, and lets the caller report how many were dropped and why."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Literal, TypeVar

from lit_retrieval.data.records import AnnotationError, VideoRecord
from lit_retrieval.data.reading import read_text
from lit_retrieval.errors import ConfigError

BadRecordPolicy = Literal["raise", "skip"]
T = TypeVar("T")
log = logging.getLogger(__name__)


class RecordCollector:
    """Applies a `BadRecordPolicy` while a parser turns raw records into `VideoRecord`s."""

    def __init__(self, policy: BadRecordPolicy = "raise") -> None:
        if policy not in ("raise", "skip"):
            raise ConfigError(f"on_bad_record must be 'raise' or 'skip', got {policy!r}")
        self.policy = policy
        self.dropped: list[AnnotationError] = []

    def reject(self, error: AnnotationError) -> None:
        """Raise `error`, or record it as dropped."""
        if self.policy == "raise":
            raise error
        self.dropped.append(error)

    def parse(self, fn: Callable[..., T], *args) -> T | None:
        """`fn(*args)`, or `None` when it raises an `AnnotationError` under the skip policy."""
        try:
            return fn(*args)
        except AnnotationError as err:
            self.reject(err)
            return None

    def unique(self, videos: list[VideoRecord], source: str, one_record_per_video: bool = False) -> list[VideoRecord]:
        """Drop (or raise on) repeated records; the first occurrence stays.

        Records that share a `video_id` are one video with one query each (several captions of a
        video, `VideoRecord`): kept, unless one repeats an earlier record's queries (the same video
        and caption twice in one split) or gives the video another file, duration or window (a video
        in two splits is left to the data module's split-overlap check). With
        `one_record_per_video` (formats that list each video once with all its events: the canonical
        format, MELON) any repeated id is refused."""
        first: dict[str, VideoRecord] = {}
        queries: set[tuple[str, str, tuple[str, ...]]] = set()
        kept = []
        for video in videos:
            earlier = first.get(video.video_id)
            if earlier is not None:
                reason = "duplicate video_id" if one_record_per_video else self._repeat(video, earlier, queries)
                if reason is not None:
                    self.reject(AnnotationError(source, video.video_id, reason))
                    continue
            first.setdefault(video.video_id, video)
            if not one_record_per_video:
                queries.add((video.video_id, video.split, tuple(video.descriptions)))
            kept.append(video)
        return kept

    @staticmethod
    def _repeat(video: VideoRecord, earlier: VideoRecord, queries: set[tuple[str, str, tuple[str, ...]]]) -> str | None:
        """Why `video`, whose id an `earlier` record has, is refused; None when it is another caption."""
        for name in ("path", "duration", "window"):
            given, first = getattr(video, name), getattr(earlier, name)
            if given != first:
                return f"duplicate video_id with another {name} ({given!r}, first {first!r})"
        if (video.video_id, video.split, tuple(video.descriptions)) in queries:
            return f"duplicate video_id and caption {' / '.join(video.descriptions)!r} (the same record twice)"
        return None

    def report(self, what: str, limit: int = 5) -> None:
        """Log how many records were dropped, with the first reasons."""
        if self.dropped:
            reasons = "; ".join(str(e) for e in self.dropped[:limit])
            more = f" (and {len(self.dropped) - limit} more)" if len(self.dropped) > limit else ""
            log.warning("dropped %d bad records from %s: %s%s", len(self.dropped), what, reasons, more)


def listed_once(path: str | Path, collector: RecordCollector) -> list[str]:
    """The names of a list file, one a line (stripped; blank lines ignored), in file order; a name
    listed again is a bad record naming both lines (a split file's clip listed twice would stand
    twice in its gallery)."""
    names: dict[str, int] = {}  # name -> its first line
    for number, line in enumerate(read_text(path).splitlines(), start=1):
        name = line.strip()
        if name in names:
            reason = f"listed again (line {number}, first on line {names[name]})"
            collector.reject(AnnotationError(str(path), name, reason))
        elif name:
            names[name] = number
    return list(names)
