"""DiDeMo for paragraph-to-video retrieval (Hendricks et al., arXiv:1708.01641).

`{train,val,test}_data.json` are lists of moment annotations: `annotation_id`, `description`,
`video` (file name), `times` (one `[start_chunk, end_chunk]` per annotator; 5-second chunks with
an inclusive end) and `num_segments` (chunks annotated, 6 for 30 s). As in CLIP4Clip, a moment's
interval is the annotators' mean start and end chunk in seconds (`5 * s` to `5 * (e + 1)`), and a
video's query concatenates its descriptions, here ordered by start time, then file order. The
duration is the annotated window (`5 * num_segments` s), or `window_seconds` where given: the
frames of the video are drawn from it (`trim_to_annotation`; the files run past it).

CLIP4Clip's DiDeMo loader reads the 1-fps frames of seconds 0 to 31 (start 0 and end 31, the end
second included) whatever the annotation, i.e. the first 32 s of the file; `DiDeMoDataModule`
follows it with `window_seconds: 32`. Set `window_seconds: null` for the annotated 30 s (25 s for
5-segment videos).

One video per stem: the release names some videos twice, under two extensions of one Flickr file
name (`x.mov` and `x.mp4`, or `x.` with a bare dot and `x.mp4`), each name with its own moments:
33 of the 1,037 test names and 29 of the 1,094 val names. Both names hold the same Flickr video (the
same `dl_link`), so the moments of a stem (the name less its last extension: `x.mov`, `x.mp4` and
`x.` all have the stem `x`) make one video and one paragraph. This gives the published gallery sizes
(1,004 test and 1,065 val videos, 8,395 train); each merge is logged with examples.

File names: the release's downloader (`download/download_videos_AWS.py` of LocalizingMoments) saves
each video as `<video>.mp4`, the full name plus `.mp4`, so `video_ext` (default `.mp4`) is appended
to the full name; `video_ext: null` takes the name as written. `file_names: stem` looks for
`<stem><video_ext>` instead, for collections renamed by stem (e.g. after transcoding). For a merged
stem the first of its names (in file order) whose file exists under the video root is used, else the
first name. Every stem has its own file, so no two videos share one path.

A bad moment (empty description, chunks out of range, end before start) raises `AnnotationError`
naming its `annotation_id`, or under `skip` is dropped alone; the video stays with its other moments.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.records import AnnotationError, Event, VideoRecord, checked_interval
from lit_retrieval.data.reading import read_json
from lit_retrieval.errors import ConfigError

CHUNK_SECONDS = 5.0
FileNames = Literal["full", "stem"]
log = logging.getLogger(__name__)


def name_stem(video: str) -> str:
    """The release name less its last extension: `x.mov`, `x.mp4` and the bare-dot `x.` give `x`."""
    return video[: video.rindex(".")] if "." in PurePosixPath(video).name else video


def _chunk_pairs(times: Any, num_segments: int, source: str, record: str) -> list[tuple[int, int]]:
    if not isinstance(times, list) or not times:
        raise AnnotationError(source, record, "'times' must be a non-empty list of [start_chunk, end_chunk]")
    pairs = []
    for pair in times:
        if (
            not isinstance(pair, list)
            or len(pair) != 2
            or not all(isinstance(c, int) and not isinstance(c, bool) for c in pair)
        ):
            raise AnnotationError(source, record, f"time {pair!r} is not [start_chunk, end_chunk] (integers)")
        start, end = pair
        if start < 0 or end < start:
            raise AnnotationError(source, record, f"chunks {pair} need 0 <= start <= end")
        if end >= num_segments:
            raise AnnotationError(source, record, f"chunk {end} is past the video's {num_segments} segments")
        pairs.append((start, end))
    return pairs


class DiDeMoParser:
    """Turns DiDeMo files into `VideoRecord`s, one per stem (see the module notes)."""

    def __init__(
        self,
        video_ext: str | None = ".mp4",
        window_seconds: float | None = None,
        file_names: FileNames = "full",
        video_root: str | Path | None = None,
    ) -> None:
        if window_seconds is not None and not window_seconds > 0:
            raise ConfigError(f"window_seconds must be positive, got {window_seconds}")
        if file_names not in ("full", "stem"):
            raise ConfigError(f"data.file_names must be 'full' or 'stem', got {file_names!r}")
        if file_names == "stem" and not video_ext:
            raise ConfigError("data.file_names: stem needs a video_ext (files are looked for as <stem><video_ext>)")
        self.video_ext = video_ext or ""
        self.window_seconds = window_seconds
        self.file_names = file_names
        self.video_root = Path(video_root) if video_root is not None else None

    def load(self, path: str | Path, split: str, collector: RecordCollector | None = None) -> list[VideoRecord]:
        collector = collector or RecordCollector()
        source = str(path)
        data = read_json(path)
        if not isinstance(data, list):
            raise AnnotationError(source, "-", "expected a list of moment annotations")
        moments: dict[str, list[tuple[Event, int]]] = defaultdict(list)
        names: dict[str, list[str]] = defaultdict(list)
        windows: dict[str, float] = {}
        seen: set[str] = set()
        for position, raw in enumerate(data):
            parsed = collector.parse(self.parse_moment, raw, source, position)
            if parsed is not None:
                video, event, window = parsed
                if event.event_id and event.event_id in seen:
                    collector.reject(AnnotationError(source, f"annotation {event.event_id}", "duplicate annotation_id"))
                    continue
                seen.add(event.event_id)
                stem = name_stem(video)
                moments[stem].append((event, position))
                if video not in names[stem]:
                    names[stem].append(video)
                windows[stem] = max(windows.get(stem, 0.0), window)
        self._log_merges(source, names)
        return [self._video(stem, items, names[stem], windows[stem], split) for stem, items in moments.items()]

    @staticmethod
    def _log_merges(source: str, names: dict[str, list[str]], examples: int = 3) -> None:
        merged = {stem: found for stem, found in names.items() if len(found) > 1}
        if merged:
            shown = "; ".join(" + ".join(found) for found in list(merged.values())[:examples])
            log.warning(
                "%s: %d file names -> %d videos: %d videos named under several extensions of one file name were "
                "merged into one video and one paragraph each (e.g. %s)",
                source,
                sum(len(found) for found in names.values()),
                len(names),
                len(merged),
                shown,
            )

    def parse_moment(self, raw: Any, source: str, position: int) -> tuple[str, Event, float]:
        if not isinstance(raw, dict):
            raise AnnotationError(source, f"#{position}", "an annotation must be an object")
        record = f"annotation {raw.get('annotation_id', f'#{position}')}"
        for key in ("description", "video", "times"):
            if key not in raw:
                raise AnnotationError(source, record, f"missing field {key!r}")
        description, video = raw["description"], raw["video"]
        if not isinstance(description, str) or not description.strip():
            raise AnnotationError(source, record, "empty description")
        if not isinstance(video, str) or not video:
            raise AnnotationError(source, record, "'video' must be a file name")
        num_segments = raw.get("num_segments", 6)
        if not isinstance(num_segments, int) or isinstance(num_segments, bool) or num_segments < 1:
            raise AnnotationError(source, record, f"num_segments must be a positive integer, got {num_segments!r}")
        pairs = _chunk_pairs(raw["times"], num_segments, source, record)
        window = CHUNK_SECONDS * num_segments
        start = CHUNK_SECONDS * sum(s for s, _ in pairs) / len(pairs)
        end = CHUNK_SECONDS * (sum(e for _, e in pairs) / len(pairs) + 1)
        interval = checked_interval(start, end, window, source, record)
        annotation_id = raw.get("annotation_id", "")
        if not isinstance(annotation_id, (str, int)) or isinstance(annotation_id, bool):
            raise AnnotationError(
                source, record, f"annotation_id must be a string or an integer, got {annotation_id!r}"
            )
        return video, Event(description.strip(), (interval,), event_id=str(annotation_id)), window

    def video_path(self, stem: str, names: list[str]) -> str:
        """The file of a stem: `<stem><video_ext>`, or `<name><video_ext>` for the first of its names
        whose file exists under `video_root` (else the first name)."""
        if self.file_names == "stem":
            return stem + self.video_ext
        paths = [name + self.video_ext for name in names]
        if self.video_root is not None:
            return next((p for p in paths if (self.video_root / p).is_file()), paths[0])
        return paths[0]

    def _video(
        self, stem: str, items: list[tuple[Event, int]], names: list[str], window: float, split: str
    ) -> VideoRecord:
        ordered = tuple(event for event, _ in sorted(items, key=lambda item: (item[0].start, item[0].end, item[1])))
        duration = self.window_seconds if self.window_seconds is not None else window
        path = self.video_path(stem, names)
        return VideoRecord(video_id=stem, path=path, duration=duration, split=split, events=ordered)
