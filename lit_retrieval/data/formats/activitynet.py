"""ActivityNet Captions for paragraph-to-video retrieval (Krishna et al., arXiv:1705.00754).

Each file (`train.json`, `val_1.json`, `val_2.json`) maps `"v_" + YouTube id` to `duration`,
`timestamps` ([start, end] seconds) and `sentences` (one per timestamp). The paragraph query is
the video's sentences in file order; `val_1` is the usual test split (CLIP4Clip, SALI).

Video files: CLIP4Clip's loader strips the `v_` prefix from the id to find the file, MeVTR's keeps
it, hence `strip_prefix`; the first of `video_exts` that exists under the video root is used.
Bad records raise `AnnotationError` (or are dropped under `skip`). The real files hold some
reversed, zero-length or past-the-end timestamps; `fix_timestamps` repairs them as CLIP4Clip does
(swap a reversed pair, clip to [0, duration], widen a zero-length one to 1 s) instead of counting
the video as bad. Paragraph retrieval does not use the timestamps, so repairing loses nothing.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.records import AnnotationError, Event, VideoRecord, checked_interval, finite_number
from lit_retrieval.data.reading import first_existing, read_json

log = logging.getLogger(__name__)


def repair_interval(start: float, end: float, duration: float) -> tuple[float, float]:
    """CLIP4Clip's defensive fixes: order the pair, clip it to the video, give it >= 1 s."""
    start, end = (max(0.0, min(t, duration)) for t in sorted((start, end)))
    if end - start < 1e-3:
        start = max(0.0, min(start, duration - 1.0))
        end = min(duration, start + 1.0)
    return start, end


class ActivityNetParser:
    """Turns ActivityNet Captions files into `VideoRecord`s."""

    def __init__(
        self,
        video_root: str | Path = ".",
        strip_prefix: bool = True,
        video_exts: tuple[str, ...] = (".mp4", ".mkv", ".webm"),
        fix_timestamps: bool = False,
    ) -> None:
        self.video_root = Path(video_root)
        self.strip_prefix = strip_prefix
        self.video_exts = tuple(video_exts)
        self.fix_timestamps = fix_timestamps
        self.repaired = 0

    def video_path(self, video_id: str) -> str:
        stem = video_id[2:] if self.strip_prefix and video_id.startswith("v_") else video_id
        return first_existing(self.video_root, stem, self.video_exts) or f"{stem}{self.video_exts[0]}"

    def load(self, path: str | Path, split: str, collector: RecordCollector | None = None) -> list[VideoRecord]:
        collector = collector or RecordCollector()
        source = str(path)
        data = read_json(path)
        if not isinstance(data, dict):
            raise AnnotationError(source, "-", "expected an object keyed by video id")
        repaired_before = self.repaired
        videos = [collector.parse(self.parse_video, str(vid), raw, source, split) for vid, raw in data.items()]
        if self.repaired > repaired_before:
            log.info("%s: repaired %d timestamps (fix_timestamps)", source, self.repaired - repaired_before)
        return [v for v in videos if v is not None]

    def parse_video(self, video_id: str, raw: Any, source: str, split: str) -> VideoRecord:
        if not video_id.strip():
            raise AnnotationError(source, video_id, "empty video id")
        if not isinstance(raw, dict):
            raise AnnotationError(source, video_id, "a video record must be an object")
        for key in ("duration", "timestamps", "sentences"):
            if key not in raw:
                raise AnnotationError(source, video_id, f"missing field {key!r}")
        duration = finite_number(raw["duration"], source, video_id, "duration")
        if duration <= 0:
            raise AnnotationError(source, video_id, f"duration must be positive, got {duration:g}")
        sentences, timestamps = raw["sentences"], raw["timestamps"]
        if not isinstance(sentences, list) or not isinstance(timestamps, list) or not sentences:
            raise AnnotationError(source, video_id, "'sentences' and 'timestamps' must be non-empty lists")
        if len(sentences) != len(timestamps):
            raise AnnotationError(source, video_id, f"{len(sentences)} sentences but {len(timestamps)} timestamps")
        events = []
        for k, (sentence, stamp) in enumerate(zip(sentences, timestamps)):
            where = f"{video_id} sentence {k}"
            if not isinstance(sentence, str) or not sentence.strip():
                raise AnnotationError(source, where, "empty sentence")
            if not isinstance(stamp, list) or len(stamp) != 2:
                raise AnnotationError(source, where, f"timestamp {stamp!r} is not [start, end]")
            start, end = (finite_number(t, source, where, "timestamp") for t in stamp)
            if self.fix_timestamps:
                fixed = repair_interval(start, end, duration)
                self.repaired += fixed != (start, end)
                start, end = fixed
            events.append(Event(sentence.strip(), (checked_interval(start, end, duration, source, where),)))
        return VideoRecord(
            video_id=video_id, path=self.video_path(video_id), duration=duration, split=split, events=tuple(events)
        )
