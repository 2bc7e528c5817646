"""LSMDC (Rohrbach et al., IJCV 2017), the LSMDC 2016 challenge's movie-description retrieval split
as CLIP4Clip, X-CLIP and Frozen load it: train on `LSMDC16_annos_training.csv`, test on the
1,000 clips of `LSMDC16_challenge_1000_publictect.csv` (`LSMDC16_annos_val.csv` is the val split).

Files: tab-separated, no header, six fields a line: `CLIP_ID, START_ALIGNED, END_ALIGNED,
START_EXTRACTED, END_EXTRACTED, SENTENCE`. A clip id names its movie and its place in it,
`{movie}_{HH.MM.SS.mmm}-{HH.MM.SS.mmm}` (`0001_American_Beauty_00.00.51.926-00.00.54.129`). The
release's README: clips aligned shorter than 2 s were cut 2 s long, symmetrically, so the file
spans START_EXTRACTED to END_EXTRACTED; that span is the record's duration. Clip files are
`{movie}/{CLIP_ID}{ext}` under the video root as the release ships them
(`avi/0001_American_Beauty/...avi`; `file_layout: flat`: `{CLIP_ID}{ext}`), the first of
`video_exts` that exists.

Records: one per line. The training and val files name some clips on several lines (one
sentence each): there every line is a record of the clip (`CLIP_ID#k` in training, so each is
its own training pair; the clip id in val, so the clip is one gallery video with one query per
sentence). The 1,000-clip test file has one sentence per clip, so a clip listed again there is a
bad record. A line without six fields, a clip id or extracted span without valid timestamps
(`HH.MM.SS.mmm`, minutes and seconds below 60, end after start) or an empty sentence is a bad
record naming the file, line and clip.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.batching.datamodule import VideoTextDataModule
from lit_retrieval.data.records import AnnotationError, Event, VideoRecord
from lit_retrieval.data.reading import first_existing, read_text
from lit_retrieval.errors import ConfigError

FileLayout = Literal["movie", "flat"]
SPLIT_FILES = {
    "train": "LSMDC16_annos_training.csv",
    "val": "LSMDC16_annos_val.csv",
    "test": "LSMDC16_challenge_1000_publictect.csv",
}
_CLIP = re.compile(r"^(?P<movie>.+)_(?P<start>\d+\.\d{2}\.\d{2}\.\d+)-(?P<end>\d+\.\d{2}\.\d{2}\.\d+)$")


_STAMP = re.compile(r"^\d+\.[0-5]\d\.[0-5]\d\.\d+$")  # minutes and seconds below 60


def clip_span(clip_id: str, source: str, record: str) -> tuple[str, float, float]:
    """(movie, start, end seconds) a clip id names; an `AnnotationError` if it names none."""
    match = _CLIP.match(clip_id)
    if match is None:
        raise AnnotationError(source, record, "clip id is not {movie}_{HH.MM.SS.mmm}-{HH.MM.SS.mmm}")
    return (match["movie"], *span(match["start"], match["end"], source, record, "clip"))


def span(start: str, end: str, source: str, record: str, what: str) -> tuple[float, float]:
    """Seconds of two `HH.MM.SS.mmm` stamps, the end after the start."""
    if not (_STAMP.match(start) and _STAMP.match(end)):
        raise AnnotationError(source, record, f"{what} times {start!r}, {end!r} are not HH.MM.SS.mmm")
    first, last = _seconds(start), _seconds(end)
    if last <= first:
        raise AnnotationError(source, record, f"{what} ends ({end}) at or before it starts ({start})")
    return first, last


def _seconds(stamp: str) -> float:
    hours, minutes, seconds, fraction = stamp.split(".")
    return 3600 * int(hours) + 60 * int(minutes) + int(seconds) + float(f"0.{fraction}")


class LSMDCParser:
    """Turns LSMDC's challenge files into records (one per sentence)."""

    def __init__(
        self,
        video_root: str | Path = ".",
        file_layout: FileLayout = "movie",
        video_exts: tuple[str, ...] = (".avi", ".mp4"),
        single_caption: tuple[str, ...] = ("test",),
    ) -> None:
        if file_layout not in ("movie", "flat"):
            raise ConfigError(f"data.file_layout must be 'movie' or 'flat', got {file_layout!r}")
        self.video_root = Path(video_root)
        self.file_layout = file_layout
        self.video_exts = tuple(video_exts)
        self.single_caption = single_caption

    def video_path(self, movie: str, clip_id: str) -> str:
        folder = f"{movie}/" if self.file_layout == "movie" else ""
        stem = f"{folder}{clip_id}"
        return first_existing(self.video_root, stem, self.video_exts) or f"{stem}{self.video_exts[0]}"

    def load(self, path: str | Path, split: str, collector: RecordCollector | None = None) -> list[VideoRecord]:
        collector = collector or RecordCollector()
        source = str(path)
        records: list[VideoRecord] = []
        lines: dict[str, int] = {}  # clip id -> sentences so far
        for number, line in enumerate(read_text(path).splitlines(), start=1):
            if not line.strip():
                continue
            record = collector.parse(self.parse_line, line, number, source, split, lines)
            if record is not None:
                records.append(record)
        return records

    def parse_line(self, line: str, number: int, source: str, split: str, lines: dict[str, int]) -> VideoRecord:
        fields = line.rstrip("\r\n").split("\t")
        clip_id = fields[0].strip()
        where = f"line {number} ({clip_id})"
        if len(fields) != 6:
            raise AnnotationError(source, where, f"expected 6 tab-separated fields, got {len(fields)}")
        movie, _, _ = clip_span(clip_id, source, where)
        start, end = span(fields[3].strip(), fields[4].strip(), source, where, "extracted clip")
        sentence = fields[5].strip()
        if not sentence:
            raise AnnotationError(source, where, "empty sentence")
        seen = lines.get(clip_id, 0)
        if seen and split in self.single_caption:
            raise AnnotationError(source, where, f"clip listed again (split {split!r} has one sentence per clip)")
        lines[clip_id] = seen + 1
        record_id = f"{clip_id}#{seen}" if split == "train" and seen else clip_id
        event = Event(sentence, ((0.0, end - start),))
        return VideoRecord(record_id, self.video_path(movie, clip_id), end - start, split, (event,))


class LSMDCDataModule(VideoTextDataModule):
    """LSMDC: train on the training file, test on the 1,000-clip public test file.

    Args:
        annotation_dir: folder of the challenge files.
        split_files: file of each split name (add `val: LSMDC16_annos_val.csv` for validation).
        file_layout: `movie` (`{movie}/{CLIP_ID}{ext}`, as released) or `flat` (`{CLIP_ID}{ext}`).
        video_exts: extensions tried in turn for each clip.
        **kwargs: the common options of `VideoTextDataModule`.
    """

    def __init__(
        self,
        annotation_dir: str,
        split_files: dict[str, str] | None = None,
        file_layout: FileLayout = "movie",
        video_exts: list[str] | None = None,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.annotation_dir = Path(annotation_dir)
        self.split_files = split_files or {"train": SPLIT_FILES["train"], "test": SPLIT_FILES["test"]}
        self.file_layout = file_layout
        self.video_exts = tuple(video_exts or (".avi", ".mp4"))
        self.parser()  # refuses a bad file_layout when the config is parsed

    @property
    def source(self) -> str:
        return str(self.annotation_dir)

    def default_video_root(self) -> Path:
        return self.annotation_dir / "avi"

    def parser(self) -> LSMDCParser:
        return LSMDCParser(self.video_root or self.default_video_root(), self.file_layout, self.video_exts)

    def load_records(self, collector: RecordCollector) -> list[VideoRecord]:
        parser = self.parser()
        return [
            r
            for split, name in self.split_files.items()
            for r in parser.load(self.annotation_dir / name, split, collector)
        ]
