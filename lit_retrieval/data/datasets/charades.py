"""Charades for text-to-video retrieval, from Charades-STA's sentences (Gao et al., ICCV 2017, on
Charades, Sigurdsson et al., ECCV 2016).

Which Charades: the public forks of CLIP4Clip that add a Charades loader (a
`dataloader_charades_retrieval.py` beside CLIP4Clip's) do not agree on the text (docs/datasets.md,
"Which Charades"): some query each video with the free-form `descriptions` of `Charades_v1_*.csv`,
one with its `script`, one with Charades-STA's timed sentences grouped per video. We read
Charades-STA's `charades_sta_{train,test}.txt`, whose sentences are timed, and query each video
with all of them as a paragraph, the way CLIP4Clip reads ActivityNet; numbers are therefore not
comparable with the forks that query with `descriptions` (not read here). So the
default (`query: paragraph`) is one record per video whose events are its STA sentences in time
order (the module concatenates them: `query_mode: concat`); `query: sentence` makes each sentence
its own query of the whole video (a multi-caption test set: the video is one gallery video, one
query per sentence; `VIDEO#k` per sentence in training).

Files: each STA line is `VIDEO START END##SENTENCE` (seconds). Video lengths come from
Charades' `Charades_v1_{train,test}.csv` (columns `id`, `length`; `probe_lengths: true` reads them
from the video headers instead). Videos are `{VIDEO}{video_ext}` under the video root
(`Charades_v1_480/` as released). A line that does not parse, a time or length that is not a
finite number (`nan`, `inf`), an empty sentence, a moment outside its video
(`0 <= start < end <= length`) or a video without a length is a bad record naming the file, the
line and the video; in paragraph mode it drops its video. A video listed
twice in a length file is a bad record too. STA's ends are rounded up past the video's length in
2,367 of its 16,128 moments (by 0.92 s at the median, 1.54 s at most, measured on the release
files), so an end up to `end_tolerance` seconds (2 by default) past the length is clipped to it;
one further past is a bad record, as are the 4 training moments that start past their video's end.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.batching.datamodule import VideoTextDataModule
from lit_retrieval.data.records import (
    AnnotationError,
    Event,
    VideoRecord,
    checked_interval,
    number_or_text,
    positive_duration,
)
from lit_retrieval.data.reading import read_csv, read_text
from lit_retrieval.data.media.video import video_duration
from lit_retrieval.errors import ConfigError

QueryForm = Literal["paragraph", "sentence"]
Moment = tuple[float, float, str]


def read_lengths(path: Path, collector: RecordCollector) -> dict[str, float]:
    """`{id: length}` of a Charades CSV; a bad or repeated row goes to `collector`."""
    lengths: dict[str, float] = {}
    for number, row in enumerate(read_csv(path, ("id", "length")), start=2):
        video = row["id"].strip()
        where = f"line {number} ({video})"
        try:
            if video in lengths:
                raise AnnotationError(str(path), where, "video listed again")
            length = number_or_text(row["length"], str(path), where, "length")
            lengths[video] = positive_duration(length, str(path), where)
        except AnnotationError as err:
            collector.reject(err)
    return lengths


class CharadesParser:
    """Turns Charades-STA files (and Charades' lengths) into paragraph or sentence records."""

    def __init__(
        self,
        video_root: str | Path = ".",
        query: QueryForm = "paragraph",
        video_ext: str = ".mp4",
        end_tolerance: float = 2.0,
        length: Callable[[str], float] | None = None,
    ) -> None:
        if query not in ("paragraph", "sentence"):
            raise ConfigError(f"data.query must be 'paragraph' or 'sentence', got {query!r}")
        self.video_root = Path(video_root)
        self.query = query
        self.video_ext = video_ext
        self.end_tolerance = end_tolerance
        self.length = length or (lambda video: video_duration(self.video_root / f"{video}{self.video_ext}"))

    def load(
        self, path: str | Path, split: str, lengths: dict[str, float] | None, collector: RecordCollector | None = None
    ) -> list[VideoRecord]:
        collector = collector or RecordCollector()
        source = str(path)
        moments: dict[str, list[Moment]] = {}
        length_of: dict[str, float] = {}
        bad: set[str] = set()
        for number, line in enumerate(read_text(path).splitlines(), start=1):
            if not line.strip():
                continue
            video = line.split(" ", 1)[0].strip()
            try:
                length, moment = self.parse_line(line, number, source, lengths)
            except AnnotationError as err:
                collector.reject(err)
                bad.add(video)
                continue
            moments.setdefault(video, []).append(moment)
            length_of[video] = length
        records = []
        for video, found in moments.items():
            if self.query == "sentence":
                ids = [f"{video}#{k}" if split == "train" else video for k in range(len(found))]
                records += [self._record(i, video, split, [m], length_of[video]) for i, m in zip(ids, found)]
            elif video not in bad:  # a paragraph is all of its video's sentences or none
                records.append(self._record(video, video, split, sorted(found, key=lambda m: m[:2]), length_of[video]))
        return records

    def parse_line(self, line: str, number: int, source: str, lengths: dict[str, float] | None) -> tuple[float, Moment]:
        """The video's length and the line's moment."""
        head, sep, sentence = line.partition("##")
        parts = head.split()
        where = f"line {number} ({parts[0] if parts else ''})"
        if not sep or len(parts) != 3:
            raise AnnotationError(source, where, "expected 'VIDEO START END##SENTENCE'")
        video = parts[0]
        start, end = (number_or_text(t, source, where, "time") for t in parts[1:])
        if not sentence.strip():
            raise AnnotationError(source, where, "empty sentence")
        if lengths is not None and video not in lengths:
            raise AnnotationError(source, where, "video has no length in the length files")
        length = lengths[video] if lengths is not None else self.length(video)
        if start >= length:
            reason = f"moment starts at {start:g} s, at or past the video's length {length:g} s"
            raise AnnotationError(source, where, reason)
        if length < end <= length + self.end_tolerance:
            end = length
        start, end = checked_interval(start, end, length, source, where)
        return length, (start, end, sentence.strip())

    def _record(self, record_id: str, video: str, split: str, moments: list[Moment], length: float) -> VideoRecord:
        events = tuple(Event(text, ((start, end),)) for start, end, text in moments)
        return VideoRecord(record_id, f"{video}{self.video_ext}", length, split, events)


class CharadesDataModule(VideoTextDataModule):
    """Charades (Charades-STA sentences): paragraph-to-video by default, or one query per sentence.

    Args:
        annotation_dir: folder of the STA files and Charades' CSVs.
        split_files: STA file of each split name.
        length_files: Charades CSVs (`id`, `length`) of every video (default: `Charades_v1_train.csv`,
            `Charades_v1_test.csv`).
        probe_lengths: read each video's length from its file's header instead of `length_files`.
        query: `paragraph` (one query per video, its sentences in time order) or `sentence`.
        video_ext: extension of `{VIDEO}` under the video root.
        end_tolerance: a moment ending up to this many seconds past its video's length is clipped
            to it (STA rounds ends up); further past is a bad record (0: every such moment).
        **kwargs: the common options of `VideoTextDataModule`.
    """

    def __init__(
        self,
        annotation_dir: str,
        split_files: dict[str, str] | None = None,
        length_files: list[str] | None = None,
        probe_lengths: bool = False,
        query: QueryForm = "paragraph",
        video_ext: str = ".mp4",
        end_tolerance: float = 2.0,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.annotation_dir = Path(annotation_dir)
        self.split_files = split_files or {"train": "charades_sta_train.txt", "test": "charades_sta_test.txt"}
        self.length_files = None if probe_lengths else length_files or ["Charades_v1_train.csv", "Charades_v1_test.csv"]
        self.query = query
        self.video_ext = video_ext
        self.end_tolerance = end_tolerance
        self.parser()  # refuses a bad query form when the config is parsed

    @property
    def source(self) -> str:
        return str(self.annotation_dir)

    def default_video_root(self) -> Path:
        return self.annotation_dir / "Charades_v1_480"

    def parser(self) -> CharadesParser:
        root = self.video_root or self.default_video_root()
        return CharadesParser(root, self.query, self.video_ext, self.end_tolerance)

    def load_records(self, collector: RecordCollector) -> list[VideoRecord]:
        lengths = None
        if self.length_files is not None:
            lengths = {}
            for name in self.length_files:
                lengths.update(read_lengths(self.annotation_dir / name, collector))
        parser = self.parser()
        files = self.split_files.items()
        return [r for split, name in files for r in parser.load(self.annotation_dir / name, split, lengths, collector)]
