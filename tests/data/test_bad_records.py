"""`RecordCollector.unique`: several captions of one video are kept (one record each), a repeated record
or a video id with two files, durations or windows is refused; formats that list a video once refuse any
repeated id."""

from __future__ import annotations

import re

import pytest

from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.records import AnnotationError, Event, VideoRecord


def caption(video: str, text: str, split: str = "train", duration: float = 2.0, path: str = "") -> VideoRecord:
    return VideoRecord(video, path or f"{video}.mp4", duration, split, (Event(text, ((0.0, duration),)),))


def test_every_caption_of_a_video_is_kept_under_both_policies():
    """The issue's release: 5 videos with 3 captions each; `skip` kept 9 of the 15 records before."""
    records = [caption(f"v{v}", f"caption {k} of v{v}") for v in range(5) for k in range(3)]
    assert RecordCollector("raise").unique(records, "t.tsv") == records
    collector = RecordCollector("skip")
    assert collector.unique(records, "t.tsv") == records and collector.dropped == []


@pytest.mark.parametrize(
    ("again", "reason"),
    [
        (caption("v1", "a dog"), "duplicate video_id and caption 'a dog'"),
        (caption("v1", "a cat", duration=3.0), "duplicate video_id with another duration (3.0, first 2.0)"),
        (caption("v1", "a cat", path="w.mp4"), "duplicate video_id with another path ('w.mp4', first 'v1.mp4')"),
    ],
)
def test_a_repeated_record_or_a_conflicting_video_is_refused(again, reason):
    records = [caption("v1", "a dog"), caption("v2", "a bird"), again]
    with pytest.raises(AnnotationError, match=re.escape(f"t.tsv: record 'v1': {reason}")):
        RecordCollector().unique(records, "t.tsv")
    collector = RecordCollector("skip")
    assert collector.unique(records, "t.tsv") == records[:2] and len(collector.dropped) == 1


def test_the_same_caption_in_two_splits_is_left_to_the_split_overlap_check():
    records = [caption("v1", "a dog"), caption("v1", "a dog", split="test")]
    assert RecordCollector().unique(records, "t.tsv") == records


def test_one_record_per_video_refuses_any_repeated_id():
    records = [caption("v1", "a dog"), caption("v1", "a cat")]
    with pytest.raises(AnnotationError, match="record 'v1': duplicate video_id"):
        RecordCollector().unique(records, "ann.json", one_record_per_video=True)
