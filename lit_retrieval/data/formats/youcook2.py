"""YouCook2 (Zhou et al., AAAI 2018) for per-segment text-to-video retrieval, the form VideoCLIP,
MIL-NCE and FitCLIP evaluate: a query is one step's sentence, its video the step's segment.

File (the release's `youcookii_annotations_trainval.json`): `{"database": {VIDEO: {"duration": s,
"subset": "training" | "validation", "recipe_type": "113", "annotations": [{"segment": [start,
end], "id": k, "sentence": text}, ...], "video_url": ...}}}`. The test subset's file
(`youcookii_annotations_test_segments_only.json`) has no sentences, so retrieval papers test on
`validation`; `subsets` maps the release's subsets to our splits (`training` -> train,
`validation` -> test by default).

Records: one per segment, `video_id` `VIDEO#id`, `path` the whole recipe video, `window` the
segment (frames are sampled within it), `duration` the video's. A segment must lie inside its
video (`0 <= start < end <= duration`); one outside it, a segment without text, a repeated
segment `id` or a record that is not an object is a bad record naming the file and the segment
(a video named twice is refused by the strict JSON reading, naming its key).

Files: the release's downloader saves `raw_videos/{subset}/{recipe_type}/{VIDEO}.{ext}`; with
`file_layout: release` the path under `video_root` is `{subset}/{recipe_type}/{VIDEO}{ext}`, with
`flat` it is `{VIDEO}{ext}`; the first of `video_exts` that exists is used.

`build-melon` reads YouCook2 through `database` and `timed_sentences` (lit_retrieval/melon_build/
sources.py), which check the times and keep the sentences as written (its own rules judge them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.records import (
    AnnotationError,
    Event,
    VideoRecord,
    checked_interval,
    finite_number,
    positive_duration,
    record_id,
    text_field,
)
from lit_retrieval.data.reading import first_existing, read_json
from lit_retrieval.errors import ConfigError

FileLayout = Literal["release", "flat"]
TimedSentence = tuple[float, float, Any]


def database(data: Any, source: str) -> list[tuple[str, Any]]:
    """(video id, raw record) of each entry of the release's `database` object."""
    found = data.get("database") if isinstance(data, dict) else None
    if not isinstance(found, dict):
        raise AnnotationError(source, "-", "expected {'database': {video: record}} (YouCook2 layout)")
    return [(str(video), raw) for video, raw in found.items()]


def timed_sentences(video: str, raw: Any, source: str) -> tuple[float, list[TimedSentence]]:
    """The video's duration and its segments as (start, end, sentence as written), each segment
    checked to lie inside the video."""
    if not isinstance(raw, dict) or not isinstance(raw.get("annotations"), list):
        raise AnnotationError(source, video, "a record needs 'duration' and a list 'annotations'")
    duration = positive_duration(raw.get("duration"), source, video)
    out = []
    for k, item in enumerate(raw["annotations"]):
        where = f"{video} annotation {k}"
        segment = item.get("segment") if isinstance(item, dict) else None
        if not isinstance(segment, list) or len(segment) != 2:
            raise AnnotationError(source, where, f"'segment' must be [start, end], got {segment!r}")
        start, end = (finite_number(t, source, where, "segment time") for t in segment)
        out.append((*checked_interval(start, end, duration, source, where), item.get("sentence")))
    return duration, out


class YouCook2Parser:
    """Turns the trainval file into one record per segment of the mapped subsets."""

    def __init__(
        self,
        video_root: str | Path = ".",
        subsets: dict[str, str] | None = None,
        file_layout: FileLayout = "release",
        video_exts: tuple[str, ...] = (".mp4", ".mkv", ".webm"),
    ) -> None:
        if file_layout not in ("release", "flat"):
            raise ConfigError(f"data.file_layout must be 'release' or 'flat', got {file_layout!r}")
        self.video_root = Path(video_root)
        self.subsets = subsets or {"training": "train", "validation": "test"}
        self.file_layout = file_layout
        self.video_exts = tuple(video_exts)

    def video_path(self, video: str, raw: dict) -> str:
        """The video's file under the video root (the first extension found, else the first)."""
        folder = f"{raw.get('subset')}/{raw.get('recipe_type')}/" if self.file_layout == "release" else ""
        stem = f"{folder}{video}"
        return first_existing(self.video_root, stem, self.video_exts) or f"{stem}{self.video_exts[0]}"

    def load(self, path: str | Path, collector: RecordCollector | None = None) -> list[VideoRecord]:
        collector = collector or RecordCollector()
        source = str(path)
        records = []
        for video, raw in database(read_json(path), source):
            if isinstance(raw, dict) and isinstance(raw.get("subset"), str) and raw["subset"] not in self.subsets:
                continue  # a subset this run does not use (e.g. `testing`)
            found = collector.parse(self.segments, video, raw, source)
            records += found or []
        return records

    def segments(self, video: str, raw: Any, source: str) -> list[VideoRecord]:
        """The records of one video's segments (all or none: a bad segment drops the video)."""
        duration, timed = timed_sentences(video, raw, source)
        if raw.get("subset") not in self.subsets:
            wanted = sorted(self.subsets)
            raise AnnotationError(source, video, f"'subset' must be one of {wanted}, got {raw.get('subset')!r}")
        path, split = self.video_path(video, raw), self.subsets[raw["subset"]]
        records, seen = [], set()
        for k, ((start, end, sentence), item) in enumerate(zip(timed, raw["annotations"])):
            where = f"{video} annotation {k}"
            segment_id = record_id(item.get("id", k), source, where, "'id'")
            if segment_id in seen:
                raise AnnotationError(source, where, f"segment id {segment_id} listed again")
            seen.add(segment_id)
            text = text_field(sentence, source, where, "'sentence'")
            event = Event(text, ((start, end),))
            records.append(VideoRecord(f"{video}#{segment_id}", path, duration, split, (event,), window=(start, end)))
        return records
