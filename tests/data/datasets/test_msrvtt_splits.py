"""MSR-VTT's 7k training split and the official full split (train 6,513 / val 497 / test 2,990, every caption
of a test video a query) beside 1k-A, on a fixture in the release layout: `MSRVTT_data.json` (`videos` with
`split` train/validate/test, `sentences`), `MSRVTT_train.7k.csv`, CLIP2Video's `MSRVTT_{train,val,test}.full.csv`
(column `video_id`) and `MSRVTT_JSFUSION_test.csv`."""

import json
from pathlib import Path

import pytest

from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.datasets.msrvtt import MSRVTTDataModule, MSRVTTParser
from lit_retrieval.data.records import AnnotationError
from lit_retrieval.errors import ConfigError
from helpers.media import write_noise_video
from helpers.multi_caption import cli_test

SPLIT = {"train": ["video0", "video1", "video2"], "validate": ["video3"], "test": ["video4", "video5", "video6"]}
CAPTIONS = {
    "video0": 2,
    "video1": 1,
    "video2": 2,
    "video3": 2,
    "video4": 3,
    "video5": 1,
    "video6": 2,
}  # MSR-VTT: 20 each
FULL = {"train": "MSRVTT_train.full.csv", "val": "MSRVTT_val.full.csv", "test": "MSRVTT_test.full.csv"}


def write_csv(path: Path, ids: list[str]) -> None:
    path.write_text("video_id\n" + "".join(f"{v}\n" for v in ids))


def write_release(root: Path, test_ids: list[str] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    videos = [
        {
            "id": k,
            "video_id": v,
            "category": 3,
            "url": f"https://www.youtube.com/watch?v=X{k}",
            "start time": 10.0 + k,
            "end time": 14.0 + 2 * k,
            "split": split,
        }
        for k, (v, split) in enumerate((v, s) for s, ids in SPLIT.items() for v in ids)
    ]
    sentences = [
        {"sen_id": n, "video_id": v, "caption": f"caption {c} of {v}"}
        for n, (v, c) in enumerate((v, c) for v, count in CAPTIONS.items() for c in range(count))
    ]
    (root / "MSRVTT_data.json").write_text(
        json.dumps({"info": {"year": "2016"}, "videos": videos, "sentences": sentences})
    )
    write_csv(root / "MSRVTT_train.7k.csv", SPLIT["train"] + SPLIT["validate"])
    write_csv(root / FULL["train"], SPLIT["train"])
    write_csv(root / FULL["val"], SPLIT["validate"])
    write_csv(root / FULL["test"], SPLIT["test"] if test_ids is None else test_ids)
    (root / "MSRVTT_JSFUSION_test.csv").write_text(
        "key,vid_key,video_id,sentence\nret0,msr4,video4,a jsfusion caption\n"
    )
    return root


def full_split(root: Path, collector: RecordCollector | None = None):
    return MSRVTTParser().load(
        root, "MSRVTT_data.json", FULL["train"], FULL["test"], collector, val_csv=FULL["val"], test_captions="all"
    )


def test_7k_training_split_with_the_1k_test(tmp_path):
    root = write_release(tmp_path)
    records = MSRVTTParser(val_fraction=0.0).load(
        root, "MSRVTT_data.json", "MSRVTT_train.7k.csv", "MSRVTT_JSFUSION_test.csv"
    )
    assert sorted({r.path for r in records if r.split == "train"}) == [f"video{k}.mp4" for k in range(4)]
    assert sum(r.split == "train" for r in records) == 7  # every caption of the 7,010 (here 4) videos
    assert [(r.video_id, r.descriptions) for r in records if r.split == "test"] == [("video4", ["a jsfusion caption"])]


def test_full_split_one_record_per_caption_sharing_the_video_id(tmp_path):
    records = full_split(write_release(tmp_path))
    by_split = {s: [r for r in records if r.split == s] for s in ("train", "val", "test")}
    assert [r.video_id for r in by_split["test"]] == ["video4"] * 3 + ["video5"] + ["video6"] * 2
    assert by_split["test"][0].descriptions == ["caption 0 of video4"] and by_split["test"][0].path == "video4.mp4"
    assert by_split["test"][0].duration == pytest.approx(8.0)  # end time 22 - start time 14
    assert [r.video_id for r in by_split["val"]] == ["video3", "video3"]  # the official 497, no hold-out
    assert {r.path for r in by_split["train"]} == {"video0.mp4", "video1.mp4", "video2.mp4"} and len(
        by_split["train"]
    ) == 5


def test_the_release_fixture_loads_the_full_split_with_counts_worked_out_from_its_files():
    fixture = Path(__file__).parents[2] / "fixtures" / "msrvtt"  # tests/fixtures/msrvtt: the release's file names
    files = {"train_csv": FULL["train"], "test_csv": FULL["test"], "val_csv": FULL["val"]}
    data = MSRVTTDataModule(str(fixture), **files, test_captions="all", num_frames=2, image_size=32)
    data.setup()
    assert {role: len(ds) for role, ds in data.datasets.items()} == {"train": 3, "val": 1, "test": 1}
    records = data.load_records(RecordCollector())
    assert [(r.split, r.video_id, r.descriptions[0]) for r in records[2:]] == [
        ("train", "video1#0", "a woman talks to a man in a kitchen"),
        ("val", "video2", "a car drives down a road"),
        ("test", "video9999", "a man plays a violin on a stage"),
    ]


def test_full_split_bad_records_name_the_csv_and_video(tmp_path):
    root = write_release(tmp_path, test_ids=["video4", "video5", "video4", "video77"])
    with pytest.raises(AnnotationError, match=r"MSRVTT_test.full.csv: record 'video4': listed again \(data row 3\)"):
        full_split(root)
    collector = RecordCollector("skip")
    records = full_split(root, collector)
    assert [str(e) for e in collector.dropped][1].endswith(
        "record 'video77': listed in MSRVTT_test.full.csv but not in 'videos'"
    )
    assert sum(r.split == "test" for r in records) == 4  # video4's 3 captions once, video5's one
    (root / FULL["val"]).unlink()
    with pytest.raises(AnnotationError, match=r"MSRVTT_val.full.csv: annotation file not found$"):
        full_split(root)


def test_data_module_full_protocol_and_its_option(tmp_path):
    root = write_release(tmp_path)
    data = MSRVTTDataModule(
        str(root),
        train_csv=FULL["train"],
        test_csv=FULL["test"],
        val_csv=FULL["val"],
        test_captions="all",
        num_frames=2,
    )
    data.setup()
    assert {role: len(ds) for role, ds in data.datasets.items()} == {"train": 5, "val": 2, "test": 6}
    with pytest.raises(ConfigError, match="data.test_captions must be 'csv' or 'all', got 'some'"):
        MSRVTTDataModule(str(root), test_captions="some")


def test_cli_test_full_protocol_ranks_every_caption_against_distinct_videos(tmp_path, tiny_clip):
    root = write_release(tmp_path / "msrvtt")
    (root / "videos").mkdir()
    for seed, video_id in enumerate(CAPTIONS):
        write_noise_video(root / "videos" / f"{video_id}.mp4", seconds=1.0, seed=seed)
    init = {"annotation_dir": str(root), "train_csv": FULL["train"], "test_csv": FULL["test"], "val_csv": FULL["val"]}
    data = {
        "class_path": "lit_retrieval.data.MSRVTTDataModule",
        "init_args": {**init, "test_captions": "all", "num_frames": 2, "image_size": 32, "batch_size": 4},
    }
    scores, ids, metrics = cli_test(tmp_path, tiny_clip, data)
    assert scores.shape == (6, 3) and ids["video_ids"] == SPLIT["test"]
    assert ids["targets"] == [0, 0, 0, 1, 2, 2]
    assert "v2t_group_max/R@1" in metrics
