"""MSR-VTT 1k-A (one of SALI's datasets): the 9k training captions with a held-out share of their videos for
validation and the JSFusion 1k test, parsed and loaded from the fixture in the release layout (the 7k and the
full splits: test_msrvtt_splits.py)."""

import shutil
from pathlib import Path

import pytest

from lit_retrieval.data import AnnotationError, MSRVTTDataModule
from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.datasets.msrvtt import MSRVTTParser

FIXTURES = Path(__file__).parents[2] / "fixtures"


def test_msrvtt_train_captions_val_hold_out_and_1k_test():
    parser = MSRVTTParser(val_fraction=1 / 3, val_seed=0)
    records = parser.load(FIXTURES / "msrvtt", "MSRVTT_data.json", "MSRVTT_train.9k.csv", "MSRVTT_JSFUSION_test.csv")
    by_split = {}
    for record in records:
        by_split.setdefault(record.split, []).append(record)
    assert [r.video_id for r in by_split["test"]] == ["video9999"]
    assert by_split["test"][0].descriptions == ["a man plays a violin on a stage"] and by_split["test"][
        0
    ].duration == pytest.approx(3.0)
    assert len(by_split["val"]) == 1
    val_video = by_split["val"][0].path
    train_paths = [r.path for r in by_split["train"]]
    assert val_video not in train_paths  # videos, not captions, are held out
    assert len(train_paths) == 4 - (2 if val_video == "video0.mp4" else 1)
    if "video0.mp4" in train_paths:
        assert {r.video_id for r in by_split["train"] if r.path == "video0.mp4"} == {"video0#0", "video0#1"}


def test_msrvtt_unknown_test_video_is_a_bad_record(tmp_path):
    for name in ("MSRVTT_data.json", "MSRVTT_train.9k.csv"):
        shutil.copy(FIXTURES / "msrvtt" / name, tmp_path / name)
    (tmp_path / "MSRVTT_JSFUSION_test.csv").write_text("key,vid_key,video_id,sentence\nret0,msr1,video12345,a dog\n")
    with pytest.raises(AnnotationError, match="MSRVTT_JSFUSION_test.csv: record 'video12345'"):
        MSRVTTDataModule(str(tmp_path), num_frames=4).load_records(RecordCollector())
    collector = RecordCollector("skip")
    records = MSRVTTDataModule(str(tmp_path), num_frames=4, val_fraction=0.0).load_records(collector)
    assert len(collector.dropped) == 1 and {r.split for r in records} == {"train"}
