"""MSR-VTT (Xu et al., CVPR 2016): the 9k and 7k training splits with the 1k-A test (as released with
CLIP4Clip, arXiv:2104.08860; one of SALI's generalisation sets) and the official full split.

Files (CLIP4Clip's `msrvtt_data.zip`): `MSRVTT_data.json` (`videos` with `video_id`, `start time`,
`end time`; `sentences` with `video_id`, `caption`, 20 per video), `MSRVTT_train.9k.csv` (9,000 videos)
or `MSRVTT_train.7k.csv` (7,010: the official train and validation videos), column `video_id`, and
`MSRVTT_JSFUSION_test.csv` (`key,vid_key,video_id,sentence`, one caption per test video). The full split
(CLIP2Video's `data/msrvtt_data/`): `MSRVTT_train.full.csv` (6,513), `MSRVTT_val.full.csv` (497) and
`MSRVTT_test.full.csv` (2,990), column `video_id` only.

Records: every caption of a training video is its own training record (CLIP4Clip's
`expand_msrvtt_sentences`); SALI holds out 10% of the training videos as validation
(`val_fraction`, seeded), each with its first caption; a `val_csv` (the full split's 497) replaces that
hold-out. `test_captions: csv`: the 1k-A test records take the CSV's caption; `all`: every caption of
each test video in `MSRVTT_data.json` is a record, all sharing the video's id, so the full protocol
ranks one query per caption (59,800) against the 2,990 videos.
Video files are `{video_id}{video_ext}` under the video root; the duration is the
clip's `end time - start time` (positive and finite, else a bad record). A `video_id` listed twice
(in `videos`, the train CSV or the test CSV) is a bad record, not deduplicated: a test video
listed twice would stand twice in the gallery.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, get_args

import numpy as np

from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.records import AnnotationError, Event, VideoRecord, finite_number, text_field
from lit_retrieval.data.reading import read_csv, read_json
from lit_retrieval.data.batching.datamodule import VideoTextDataModule
from lit_retrieval.errors import ConfigError

TestCaptions = Literal["csv", "all"]


class MSRVTTParser:
    """Turns the MSR-VTT files into train (per caption), val and 1k-A test records."""

    def __init__(self, video_ext: str = ".mp4", val_fraction: float = 0.1, val_seed: int = 0) -> None:
        if not 0 <= val_fraction < 1:
            raise ConfigError(f"val_fraction must lie in [0, 1), got {val_fraction}")
        self.video_ext = video_ext
        self.val_fraction = val_fraction
        self.val_seed = val_seed

    def load(
        self,
        root: str | Path,
        data_file: str,
        train_csv: str,
        test_csv: str,
        collector: RecordCollector | None = None,
        val_csv: str | None = None,
        test_captions: TestCaptions = "csv",
    ) -> list[VideoRecord]:
        collector = collector or RecordCollector()
        root = Path(root)
        source = str(root / data_file)
        data = read_json(root / data_file)
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("videos"), list)
            or not isinstance(data.get("sentences"), list)
        ):
            raise AnnotationError(source, "-", "expected an object with 'videos' and 'sentences' lists")
        durations: dict[str, float] = {}
        for position, video in enumerate(data["videos"]):
            try:
                video_id, duration = self._duration(video, source, position)
                if video_id in durations:
                    raise AnnotationError(source, video_id, "duplicate video_id in 'videos'")
                durations[video_id] = duration
            except AnnotationError as err:
                collector.reject(err)
        captions: dict[str, list[str]] = {}
        for position, sentence in enumerate(data["sentences"]):
            if not isinstance(sentence, dict):
                collector.reject(AnnotationError(source, f"sentence #{position}", "a sentence entry must be an object"))
                continue
            if isinstance(sentence.get("caption"), str) and sentence["caption"].strip():
                captions.setdefault(str(sentence.get("video_id", "")), []).append(sentence["caption"].strip())
        train_ids = self._unique_ids(read_csv(root / train_csv, ("video_id",)), root / train_csv, collector)
        order = np.random.default_rng(self.val_seed).permutation(len(train_ids))
        held_out = round(self.val_fraction * len(train_ids)) if val_csv is None else 0
        val_ids = {train_ids[i] for i in order[:held_out]}
        records = []
        for video_id in train_ids:
            found = collector.parse(self._captions, video_id, captions, durations, source)
            if found is None:
                continue
            if video_id in val_ids:
                records.append(self._record(video_id, video_id, found[0], durations[video_id], "val"))
            else:
                records += [
                    self._record(f"{video_id}#{k}", video_id, c, durations[video_id], "train")
                    for k, c in enumerate(found)
                ]
        if val_csv is not None:
            records += self._every_caption(root / val_csv, "val", captions, durations, source, collector)
        if test_captions == "all":
            return records + self._every_caption(root / test_csv, "test", captions, durations, source, collector)
        test_source = str(root / test_csv)
        test_rows = read_csv(root / test_csv, ("video_id", "sentence"))
        for video_id, row in zip(self._unique_ids(test_rows, root / test_csv, collector, keep_rows=True), test_rows):
            caption = (row["sentence"] or "").strip()
            if video_id is None:
                continue
            if video_id not in durations or not caption:
                collector.reject(AnnotationError(test_source, video_id, "unknown video or empty sentence"))
                continue
            records.append(self._record(video_id, video_id, caption, durations[video_id], "test"))
        return records

    @staticmethod
    def _duration(video: object, source: str, position: int) -> tuple[str, float]:
        """(video id, end time - start time) of one `videos` entry; a positive, finite length."""
        if not isinstance(video, dict):
            raise AnnotationError(source, f"video #{position}", "a video entry must be an object")
        video_id = video.get("video_id")
        record = video_id if isinstance(video_id, str) and video_id else f"video #{position}"
        if not all(key in video for key in ("video_id", "start time", "end time")):
            raise AnnotationError(source, record, "needs 'video_id', 'start time' and 'end time'")
        video_id = text_field(video_id, source, record, "'video_id'")
        start = finite_number(video["start time"], source, record, "'start time'")
        end = finite_number(video["end time"], source, record, "'end time'")
        if start < 0 or end <= start:
            raise AnnotationError(
                source, record, f"'start time' {start:g} and 'end time' {end:g} need 0 <= start < end"
            )
        return video_id, end - start

    @staticmethod
    def _unique_ids(
        rows: list[dict[str, str]], path: Path, collector: RecordCollector, keep_rows: bool = False
    ) -> list:
        """The rows' `video_id`s; a repeated one is a bad record (a test video listed twice would
        stand twice in the gallery): an error, or dropped and counted under `skip` (`None` in its
        place with `keep_rows`)."""
        seen: set[str] = set()
        ids: list[str | None] = []
        for number, row in enumerate(rows, start=1):
            video_id = row["video_id"].strip()
            if video_id in seen:
                collector.reject(AnnotationError(str(path), video_id, f"listed again (data row {number})"))
                if keep_rows:
                    ids.append(None)
                continue
            seen.add(video_id)
            ids.append(video_id)
        return ids

    def _every_caption(
        self,
        path: Path,
        split: str,
        captions: dict[str, list[str]],
        durations: dict[str, float],
        source: str,
        collector: RecordCollector,
    ) -> list[VideoRecord]:
        """One record per caption of every video the CSV at `path` lists, all sharing the video's id."""
        records = []
        for video_id in self._unique_ids(read_csv(path, ("video_id",)), path, collector):
            found = collector.parse(self._captions, video_id, captions, durations, source, path.name)
            records += [self._record(video_id, video_id, c, durations[video_id], split) for c in found or []]
        return records

    @staticmethod
    def _captions(
        video_id: str,
        captions: dict[str, list[str]],
        durations: dict[str, float],
        source: str,
        listed_in: str = "the train CSV",
    ) -> list[str]:
        if video_id not in durations:
            raise AnnotationError(source, video_id, f"listed in {listed_in} but not in 'videos'")
        if not captions.get(video_id):
            raise AnnotationError(source, video_id, "no caption")
        return captions[video_id]

    def _record(self, record_id: str, video_id: str, caption: str, duration: float, split: str) -> VideoRecord:
        return VideoRecord(
            record_id, f"{video_id}{self.video_ext}", duration, split, (Event(caption, ((0.0, duration),)),)
        )


class MSRVTTDataModule(VideoTextDataModule):
    """MSR-VTT: training on every caption of the 9k (or 7k) training videos (10% held out as `val`),
    testing on the 1k-A split; or the official full split (module docstring).

    Args:
        annotation_dir: folder of the files below.
        data_file / train_csv / test_csv: the file names (CLIP4Clip's release by default; 7k:
            `MSRVTT_train.7k.csv`; full: `MSRVTT_train.full.csv`, `MSRVTT_test.full.csv`).
        video_ext: extension of `{video_id}` under the video root.
        val_fraction / val_seed: share of training videos held out for validation, and its seed.
        val_csv: a CSV of validation videos (the full split's `MSRVTT_val.full.csv`), every caption a
            record; replaces the held-out share.
        test_captions: `csv` (1k-A: the test CSV's one caption per video) or `all` (every caption of each
            test video in the data file, one query per caption: the full protocol).
        **kwargs: the common options of `VideoTextDataModule` (SALI: 12 frames).
    """

    def __init__(
        self,
        annotation_dir: str,
        data_file: str = "MSRVTT_data.json",
        train_csv: str = "MSRVTT_train.9k.csv",
        test_csv: str = "MSRVTT_JSFUSION_test.csv",
        video_ext: str = ".mp4",
        val_fraction: float = 0.1,
        val_seed: int = 0,
        val_split: str | None = "val",
        val_csv: str | None = None,
        test_captions: TestCaptions = "csv",
        **kwargs,
    ) -> None:
        super().__init__(val_split=val_split, **kwargs)
        if test_captions not in get_args(TestCaptions):
            raise ConfigError(f"data.test_captions must be 'csv' or 'all', got {test_captions!r}")
        self.annotation_dir = Path(annotation_dir)
        self.files = (data_file, train_csv, test_csv)
        self.val_csv = val_csv
        self.test_captions = test_captions
        self.parser = MSRVTTParser(video_ext, val_fraction, val_seed)

    @property
    def source(self) -> str:
        return str(self.annotation_dir / self.files[0])

    def default_video_root(self) -> Path:
        return self.annotation_dir / "videos"

    def load_records(self, collector: RecordCollector) -> list[VideoRecord]:
        options = {"val_csv": self.val_csv, "test_captions": self.test_captions}
        return self.parser.load(self.annotation_dir, *self.files, collector=collector, **options)
