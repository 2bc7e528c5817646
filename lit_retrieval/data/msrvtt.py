"""MSR-VTT with the 1k-A test split (as released with CLIP4Clip, arXiv:2104.08860), one of SALI's generalisation sets.

Files (CLIP4Clip's `msrvtt_data.zip`): `MSRVTT_data.json` (`videos` with `video_id`, `start time`,
`end time`; `sentences` with `video_id`, `caption`), `MSRVTT_train.9k.csv` (column `video_id`) and
`MSRVTT_JSFUSION_test.csv` (`key,vid_key,video_id,sentence`, one caption per test video).

Records: every caption of a training video is its own training record (CLIP4Clip's
`expand_msrvtt_sentences`); SALI holds out 10% of the training videos as validation
(`val_fraction`, seeded), each with its first caption; the 1k-A test records take the CSV's
caption. Video files are `{video_id}{video_ext}` under the video root; the duration is the
clip's `end time - start time`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.condensed_movies import read_csv
from lit_retrieval.data.records import AnnotationError, Event, VideoRecord, read_json


class MSRVTTParser:
    """Turns the MSR-VTT files into train (per caption), val and 1k-A test records."""

    def __init__(self, video_ext: str = ".mp4", val_fraction: float = 0.1, val_seed: int = 0) -> None:
        if not 0 <= val_fraction < 1:
            raise ValueError(f"val_fraction must lie in [0, 1), got {val_fraction}")
        self.video_ext = video_ext
        self.val_fraction = val_fraction
        self.val_seed = val_seed

    def load(self, root: str | Path, data_file: str, train_csv: str, test_csv: str, collector: RecordCollector | None = None) -> list[VideoRecord]:
        collector = collector or RecordCollector()
        root = Path(root)
        source = str(root / data_file)
        data = read_json(root / data_file)
        if not isinstance(data, dict) or not isinstance(data.get("videos"), list) or not isinstance(data.get("sentences"), list):
            raise AnnotationError(source, "-", "expected an object with 'videos' and 'sentences' lists")
        durations: dict[str, float] = {}
        for video in data["videos"]:
            try:
                durations[video["video_id"]] = float(video["end time"]) - float(video["start time"])
            except (KeyError, TypeError, ValueError):
                collector.reject(AnnotationError(source, str(video.get("video_id", "?")), "needs 'video_id', 'start time' and 'end time'"))
        captions: dict[str, list[str]] = {}
        for sentence in data["sentences"]:
            if isinstance(sentence.get("caption"), str) and sentence["caption"].strip():
                captions.setdefault(sentence.get("video_id", ""), []).append(sentence["caption"].strip())
        train_ids = [row["video_id"].strip() for row in read_csv(root / train_csv, ("video_id",))]
        order = np.random.default_rng(self.val_seed).permutation(len(train_ids))
        val_ids = {train_ids[i] for i in order[: round(self.val_fraction * len(train_ids))]}
        records = []
        for video_id in train_ids:
            found = collector.parse(self._captions, video_id, captions, durations, source)
            if found is None:
                continue
            if video_id in val_ids:
                records.append(self._record(video_id, video_id, found[0], durations[video_id], "val"))
            else:
                records += [self._record(f"{video_id}#{k}", video_id, c, durations[video_id], "train") for k, c in enumerate(found)]
        test_source = str(root / test_csv)
        for row in read_csv(root / test_csv, ("video_id", "sentence")):
            video_id, caption = row["video_id"].strip(), (row["sentence"] or "").strip()
            if video_id not in durations or not caption:
                collector.reject(AnnotationError(test_source, video_id, "unknown video or empty sentence"))
                continue
            records.append(self._record(video_id, video_id, caption, durations[video_id], "test"))
        return records

    @staticmethod
    def _captions(video_id: str, captions: dict[str, list[str]], durations: dict[str, float], source: str) -> list[str]:
        if video_id not in durations:
            raise AnnotationError(source, video_id, "listed in the train CSV but not in 'videos'")
        if not captions.get(video_id):
            raise AnnotationError(source, video_id, "no caption")
        return captions[video_id]

    def _record(self, record_id: str, video_id: str, caption: str, duration: float, split: str) -> VideoRecord:
        return VideoRecord(record_id, f"{video_id}{self.video_ext}", duration, split, (Event(caption, ((0.0, duration),)),))
