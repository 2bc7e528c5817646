"""Parsers of MELON, ActivityNet Captions and DiDeMo on fixtures in each real layout, and on
broken records under both bad-record policies; the train/eval split-overlap check."""

import json
import re
import shutil
from pathlib import Path

import pytest

from lit_retrieval.data import (
    ActivityNetDataModule,
    AnnotationError,
    DiDeMoDataModule,
    Event,
    MELONDataModule,
    MelonFields,
    MultiEventDataModule,
    VideoRecord,
)
from lit_retrieval.data.formats.activitynet import ActivityNetParser
from lit_retrieval.data.annotations import load_annotations, save_annotations
from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.formats.didemo import DiDeMoParser
from lit_retrieval.data.formats.melon import MelonParser, parse_timestamp

FIXTURES = Path(__file__).parents[2] / "fixtures"


def by_id(records):
    return {r.video_id: r for r in records}


def test_melon_keyed_file_with_every_timestamp_form():
    videos = by_id(MelonParser().load(FIXTURES / "melon" / "melon_keyed.json"))
    cooking, tennis = videos["yt_Kp2rT8vLm0Q"], videos["yt_Zq81mNc4aa0"]
    assert cooking.duration == 734.2 and cooking.split == "train" and cooking.path == "yt_Kp2rT8vLm0Q.mp4"
    assert [e.intervals for e in cooking.events] == [
        ((35.0, 130.0),),
        ((150.0, 240.5), (410.0, 455.0)),
        ((662.0, 730.0),),
    ]
    assert cooking.events[0].theme == "Cooking" and cooking.descriptions[2].startswith("The finished stew")
    assert tennis.duration == 240.0 and tennis.split == "test" and len(tennis.events) == 4
    assert [e.intervals for e in tennis.events] == [
        ((10.0, 65.0),),
        ((90.0, 120.0), (130.0, 160.0)),
        ((200.0, 238.5),),
        ((238.5, 240.0),),
    ]


def test_melon_list_file_takes_the_split_of_its_file_and_the_given_path():
    (video,) = MelonParser().load(FIXTURES / "melon" / "melon_list.json", split="test")
    assert video.split == "test" and video.path == "clips/yt_Bb7qLx1Tt2c.mkv" and len(video.events) == 3


@pytest.mark.parametrize(
    "value, expected",
    [
        ("1:02:03 - 1:02:09.5", [(3723.0, 3729.5)]),
        ("00:10-00:20; 00:30-00:40", [(10.0, 20.0), (30.0, 40.0)]),
        ([{"Start": 1, "End": 2}, [3, 4]], [(1.0, 2.0), (3.0, 4.0)]),
    ],
)
def test_melon_timestamp_forms(value, expected):
    assert parse_timestamp(value) == expected


@pytest.mark.parametrize(
    "bad, reason",
    [
        ("", "empty timestamp"),
        ("10:00", "cannot read"),
        ([1, 2, 3], "needs [start, end]"),
        ({"start": 1}, "needs 'start' and 'end'"),
        (None, "unreadable"),
    ],
)
def test_melon_unreadable_timestamps(bad, reason):
    with pytest.raises(ValueError, match=reason.replace("[", r"\[").replace("]", r"\]")):
        parse_timestamp(bad)


def _broken_melon(tmp_path, mutate) -> Path:
    data = json.loads((FIXTURES / "melon" / "melon_keyed.json").read_text())
    mutate(data["yt_Kp2rT8vLm0Q"])
    path = tmp_path / "melon.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    "mutate, reason",
    [
        (lambda r: r["Events"][1].update(Description="  "), "empty or missing 'description'"),
        (lambda r: r["Events"][0].update(Timestamp="00:02:10 - 00:00:35"), "needs 0 <= start < end"),
        (lambda r: r["Events"][2].update(Timestamp="11:02-13:10"), "past the duration"),
        (lambda r: r["Events"][2].pop("Timestamp"), "missing 'timestamp'"),
        (lambda r: r.pop("Duration"), "missing field 'duration'"),
        (lambda r: r.update(Events=[]), "no events"),
        (lambda r: r["Events"][0].update(Timestamp="soon"), "bad 'timestamp'"),
    ],
)
def test_melon_bad_records_name_the_file_and_record(tmp_path, mutate, reason):
    path = _broken_melon(tmp_path, mutate)
    with pytest.raises(AnnotationError, match=reason) as err:
        MelonParser().load(path)
    assert str(path) in str(err.value) and "yt_Kp2rT8vLm0Q" in str(err.value)
    collector = RecordCollector("skip")
    kept = MelonParser().load(path, collector=collector)
    assert [v.video_id for v in kept] == ["yt_Zq81mNc4aa0"] and len(collector.dropped) == 1


def test_melon_configurable_fields_and_probed_durations(tmp_path):
    raw = [
        {
            "id": "a1",
            "subset": "train",
            "segments": [{"summary": "x y", "span": "0:01-0:05"}, {"summary": "z", "span": [6, 9]}],
        }
    ]
    path = tmp_path / "custom.json"
    path.write_text(json.dumps(raw))
    fields = MelonFields(video_id="id", split="subset", events=["segments"], description="summary", timestamp="span")
    asked = []
    parser = MelonParser(fields, duration_of=lambda p: asked.append(p) or 12.0)
    (video,) = parser.load(path)
    assert asked == ["a1.mp4"] and video.duration == 12.0 and video.descriptions == ["x y", "z"]
    failing = MelonParser(fields, duration_of=lambda p: (_ for _ in ()).throw(OSError("file not found")))
    with pytest.raises(AnnotationError, match="no duration field and the video gives none"):
        failing.load(path)


def test_activitynet_files_ids_and_extensions(tmp_path):
    (tmp_path / "Lm3PqRs8UvW.mkv").write_bytes(b"x")
    parser = ActivityNetParser(video_root=tmp_path)
    videos = by_id(parser.load(FIXTURES / "activitynet" / "train.json", "train"))
    snowboard = videos["v_Qz9XcVb1TtA"]
    assert snowboard.path == "Qz9XcVb1TtA.mp4" and videos["v_Lm3PqRs8UvW"].path == "Lm3PqRs8UvW.mkv"
    assert snowboard.descriptions[1] == "He scrapes off the excess wax with a plastic blade."
    assert [e.intervals[0] for e in snowboard.events] == [(0.0, 31.7), (29.2, 70.0), (66.5, 96.4)]
    kept = ActivityNetParser(strip_prefix=False).load(FIXTURES / "activitynet" / "train.json", "train")
    assert by_id(kept)["v_Qz9XcVb1TtA"].path == "v_Qz9XcVb1TtA.mp4"


def _broken_anet(tmp_path, record) -> Path:
    path = tmp_path / "train.json"
    good = json.loads((FIXTURES / "activitynet" / "train.json").read_text())
    path.write_text(json.dumps({**good, "v_bad": record}))
    return path


@pytest.mark.parametrize(
    "record, reason",
    [
        ({"duration": 10.0, "timestamps": [[0, 5]]}, "missing field 'sentences'"),
        ({"duration": 10.0, "timestamps": [[0, 5], [5, 9]], "sentences": ["a"]}, "1 sentences but 2 timestamps"),
        ({"duration": 10.0, "timestamps": [[6, 2]], "sentences": ["a"]}, "needs 0 <= start < end"),
        ({"duration": 10.0, "timestamps": [[2, 12.5]], "sentences": ["a"]}, "past the duration"),
        ({"duration": 10.0, "timestamps": [[2, 5]], "sentences": [" "]}, "empty sentence"),
    ],
)
def test_activitynet_bad_records(tmp_path, record, reason):
    path = _broken_anet(tmp_path, record)
    with pytest.raises(AnnotationError, match=reason) as err:
        ActivityNetParser().load(path, "train")
    assert str(path) in str(err.value) and "v_bad" in str(err.value)
    collector = RecordCollector("skip")
    assert len(ActivityNetParser().load(path, "train", collector)) == 2 and len(collector.dropped) == 1


def test_activitynet_timestamp_repair(tmp_path):
    path = _broken_anet(
        tmp_path, {"duration": 10.0, "timestamps": [[6, 2], [2, 12.5], [10, 10]], "sentences": ["a", "b", "c"]}
    )
    parser = ActivityNetParser(fix_timestamps=True)
    bad = by_id(parser.load(path, "train"))["v_bad"]
    assert [e.intervals[0] for e in bad.events] == [(2.0, 6.0), (2.0, 10.0), (9.0, 10.0)] and parser.repaired == 3


def test_didemo_chunks_order_and_extension():
    train = by_id(DiDeMoParser(video_ext=".mp4").load(FIXTURES / "didemo" / "train_data.json", "train"))
    dog = train["55512345@N00_4412345678_0a1b2c3d4e"]
    assert dog.path == "55512345@N00_4412345678_0a1b2c3d4e.mov.mp4" and dog.duration == 30.0
    assert dog.descriptions == ["a man throws a stick", "the dog leaps off the dock into the lake"]  # by start time
    assert dog.events[1].intervals == ((8.75, 16.25),) and dog.events[0].intervals == ((0.0, 6.25),)
    assert train["77@N01_123_ffee"].duration == 25.0


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"times": [[2, 6]]}, "past the video's 6 segments"),
        ({"times": [[3, 1]]}, "need 0 <= start <= end"),
        ({"description": ""}, "empty description"),
        ({"times": [[1.5, 2]]}, "integers"),
    ],
)
def test_didemo_bad_moment_is_dropped_alone(tmp_path, change, reason):
    data = json.loads((FIXTURES / "didemo" / "train_data.json").read_text())
    data[0].update(change)
    path = tmp_path / "train_data.json"
    path.write_text(json.dumps(data))
    with pytest.raises(AnnotationError, match=reason) as err:
        DiDeMoParser().load(path, "train")
    assert "annotation 90211" in str(err.value) and str(path) in str(err.value)
    collector = RecordCollector("skip")
    videos = by_id(DiDeMoParser().load(path, "train", collector))
    assert (
        videos["55512345@N00_4412345678_0a1b2c3d4e"].descriptions == ["a man throws a stick"]
        and len(collector.dropped) == 1
    )


def test_canonical_format_skip_policy(corpus, tmp_path):
    data = json.loads((corpus / "annotations.json").read_text())
    data["videos"][1]["events"][0]["description"] = ""
    data["videos"].append(dict(data["videos"][0]))  # duplicate id
    path = tmp_path / "annotations.json"
    path.write_text(json.dumps(data))
    collector = RecordCollector("skip")
    kept = load_annotations(path, collector)
    assert len(kept) == len(data["videos"]) - 2 and len(collector.dropped) == 2
    assert "duplicate video_id" in str(collector.dropped[1])


def test_datamodules_read_each_layout_and_apply_min_events(tmp_path, corpus):
    files = {"train": str(FIXTURES / "melon" / "melon_keyed.json"), "test": str(FIXTURES / "melon" / "melon_list.json")}
    melon = MELONDataModule(
        annotation=files, min_events=4, min_events_scope="all", on_bad_record="skip", test_split="train"
    )
    melon.setup()
    assert sorted(e.record for e in melon.dropped_records) == ["yt_Bb7qLx1Tt2c", "yt_Kp2rT8vLm0Q"]
    assert [r.video_id for r in melon.datasets["train"].records] == ["yt_Zq81mNc4aa0"]
    strict = MELONDataModule(annotation=str(FIXTURES / "melon" / "melon_keyed.json"), min_events=4)
    with pytest.raises(AnnotationError, match="yt_Kp2rT8vLm0Q.*3 events; at least 4"):
        strict.setup()
    didemo = DiDeMoDataModule(annotation_dir=str(FIXTURES / "didemo"))
    didemo.setup()
    assert {k: len(v) for k, v in didemo.datasets.items()} == {"train": 2, "test": 1}


def test_activitynet_datamodule_loads_real_videos(tmp_path, corpus):
    canonical = load_annotations(corpus / "annotations.json")[:3]
    records = {}
    for k, video in enumerate(canonical):
        shutil.copy(corpus / video.path, tmp_path / f"yt{k:09d}.mp4")
        records[f"v_yt{k:09d}"] = {
            "duration": video.duration,
            "timestamps": [[e.start, e.end] for e in video.events],
            "sentences": video.descriptions,
        }
    (tmp_path / "train.json").write_text(json.dumps(records))
    (tmp_path / "val_1.json").write_text(json.dumps({"v_yt000000000": records["v_yt000000000"]}))
    module = ActivityNetDataModule(
        annotation_dir=str(tmp_path), num_frames=4, image_size=32, batch_size=2, allow_split_overlap=True
    )
    module.setup()  # the test video is also a training one: allowed here explicitly
    batch = next(iter(module.train_dataloader()))
    assert batch["frames"].shape == (2, 4, 3, 32, 32) and bool(batch["frame_mask"].all())
    assert {tuple(e) for e in batch["events"]} <= {tuple(v.descriptions) for v in canonical}
    test = next(iter(module.test_dataloader()))
    assert test["video_id"] == ["v_yt000000000"] and test["duration"] == [canonical[0].duration]


def split_module(tmp_path, train_path: str, test_path: str, **kwargs) -> MultiEventDataModule:
    """A canonical annotation whose test video is written `test_path`, its training one `train_path`."""
    (tmp_path / "videos").mkdir(exist_ok=True)
    (tmp_path / "videos" / "a.mp4").write_bytes(b"not decoded by setup")
    events = [Event("a person waves", ((0.0, 1.0),))]
    records = [VideoRecord("tr", train_path, 2.0, "train", events), VideoRecord("te", test_path, 2.0, "test", events)]
    save_annotations(records, tmp_path / "annotations.json")
    return MultiEventDataModule(annotation=str(tmp_path / "annotations.json"), **kwargs)


@pytest.mark.parametrize("spelling", ["videos/./a.mp4", "videos/../videos/a.mp4", "link.mp4", "videos/a.mp4"])
def test_a_training_video_in_the_test_split_is_refused_however_its_path_is_written(tmp_path, spelling):
    (tmp_path / "link.mp4").symlink_to(tmp_path / "videos" / "a.mp4")
    module = split_module(tmp_path, "videos/a.mp4", spelling)
    also = r"1 video\(s\) of split 'test' are also in the training split"
    with pytest.raises(AnnotationError, match=f"{also}.*{re.escape(spelling)}"):
        module.setup()
    allowed = split_module(tmp_path, "videos/a.mp4", spelling, allow_split_overlap=True)
    allowed.setup()
    assert [r.video_id for r in allowed.datasets["test"].records] == ["te"]


def test_another_file_of_the_same_name_is_no_overlap(tmp_path):
    (tmp_path / "other").mkdir()
    module = split_module(tmp_path, "videos/a.mp4", "other/a.mp4")
    module.setup()
    assert [r.path for r in module.datasets["test"].records] == ["other/a.mp4"]
