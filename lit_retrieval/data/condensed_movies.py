"""Condensed Movies (CMD; formats spec A5), SALI's primary testbed: two-minute movie scenes, one
caption each, split per movie.

Files of the original release's `metadata/` folder (CSV with headers):
`clips.csv` (videoid, upload_year, imdbid, ...), `descriptions.csv` (imdbid, videoid, description),
`durations.csv` (videoid, duration: the length with the YouTube outro removed) and `split.csv`
(imdbid, split). A clip's split is its movie's; its video is `{upload_year}/{videoid}{ext}`.
As in the reference loader, empty and repeated descriptions are dropped. Only about a third of the
catalogue can still be downloaded, so clips whose video file is absent are left out (counted and
logged) unless `require_video` is off.
"""

from __future__ import annotations

import csv
import logging
from pathlib import Path

from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.records import AnnotationError, Event, VideoRecord

log = logging.getLogger(__name__)

FILES = {
    "clips": ("clips.csv", ("videoid", "upload_year", "imdbid")),
    "descriptions": ("descriptions.csv", ("videoid", "description")),
    "durations": ("durations.csv", ("videoid", "duration")),
    "split": ("split.csv", ("imdbid", "split")),
}


def read_csv(path: Path, required: tuple[str, ...]) -> list[dict[str, str]]:
    """Rows of a CSV file with a header; a missing file or column is an `AnnotationError`."""
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in required if c not in (reader.fieldnames or [])]
            if missing:
                raise AnnotationError(str(path), "-", f"missing column(s) {missing} (header: {reader.fieldnames})")
            return list(reader)
    except FileNotFoundError:
        raise AnnotationError(str(path), "-", "annotation file not found") from None


class CondensedMoviesParser:
    """Turns the CMD metadata CSVs into one `VideoRecord` per captioned clip."""

    def __init__(self, video_root: str | Path, video_exts: tuple[str, ...] = (".mkv", ".mp4", ".webm"), require_video: bool = True) -> None:
        self.video_root = Path(video_root)
        self.video_exts = tuple(video_exts)
        self.require_video = require_video

    def video_path(self, upload_year: str, video_id: str) -> str | None:
        for ext in self.video_exts:
            relative = f"{upload_year}/{video_id}{ext}"
            if (self.video_root / relative).exists():
                return relative
        return None if self.require_video else f"{upload_year}/{video_id}{self.video_exts[0]}"

    def load(self, metadata: str | Path, collector: RecordCollector | None = None) -> list[VideoRecord]:
        collector = collector or RecordCollector()
        metadata = Path(metadata)
        tables = {name: read_csv(metadata / file, columns) for name, (file, columns) in FILES.items()}
        clips = {row["videoid"]: row for row in tables["clips"]}
        durations = {row["videoid"]: row["duration"] for row in tables["durations"]}
        splits = {row["imdbid"]: row["split"].strip() for row in tables["split"]}
        source = str(metadata / FILES["descriptions"][0])
        records, seen, unavailable = [], set(), 0
        for row in tables["descriptions"]:
            video_id, text = row["videoid"].strip(), (row["description"] or "").strip()
            if not text or text.lower() == "nan" or video_id in seen:
                continue
            seen.add(video_id)
            try:
                record = self._record(video_id, text, clips, durations, splits, source)
            except AnnotationError as err:
                collector.reject(err)
                continue
            if record is None:
                unavailable += 1
            else:
                records.append(record)
        if unavailable:
            log.info("%s: %d captioned clips have no video under %s (left out)", metadata, unavailable, self.video_root)
        return records

    def _record(self, video_id: str, text: str, clips: dict, durations: dict, splits: dict, source: str) -> VideoRecord | None:
        clip = clips.get(video_id)
        if clip is None:
            raise AnnotationError(source, video_id, "not in clips.csv")
        split = splits.get(clip["imdbid"])
        if not split:
            raise AnnotationError(source, video_id, f"movie {clip['imdbid']!r} has no split in split.csv")
        try:
            duration = float(durations[video_id])
        except (KeyError, ValueError):
            raise AnnotationError(source, video_id, f"no valid duration in durations.csv (got {durations.get(video_id)!r})") from None
        if not duration > 0:
            raise AnnotationError(source, video_id, f"duration must be positive, got {duration:g}")
        path = self.video_path(clip["upload_year"].split(".")[0], video_id)
        if path is None:
            return None
        return VideoRecord(video_id=video_id, path=path, duration=duration, split=split, events=(Event(text, ((0.0, duration),)),))
