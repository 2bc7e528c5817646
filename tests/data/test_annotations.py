import json

import pytest

from lit_retrieval.data.annotations import FORMAT_NAME, load_annotations, save_annotations
from lit_retrieval.data.records import AnnotationError, Event, VideoRecord


def write(tmp_path, videos, **top):
    path = tmp_path / "ann.json"
    path.write_text(json.dumps({"format": FORMAT_NAME, "version": 1, "videos": videos, **top}))
    return path


def good_video(**overrides):
    video = {
        "video_id": "v1",
        "path": "videos/v1.mp4",
        "duration": 30.0,
        "split": "train",
        "events": [
            {"description": "A cat jumps.", "start": 0.0, "end": 10.0, "theme": "Pets"},
            {"description": "A dog runs.", "intervals": [[10.0, 15.0], [20.0, 30.0]]},
        ],
    }
    video.update(overrides)
    return video


def test_round_trip_keeps_every_field(tmp_path):
    videos = [
        VideoRecord(
            "a",
            "videos/a.mp4",
            12.5,
            "test",
            (Event("one", ((0.0, 4.0), (8.0, 12.5)), "T", "e1"), Event("two", ((4.0, 8.0),))),
            cuts=(4.0, 8.0),
        ),
    ]
    path = tmp_path / "out.json"
    save_annotations(videos, path)
    assert load_annotations(path) == videos
    raw = json.loads(path.read_text())["videos"][0]["events"][0]
    assert (raw["start"], raw["end"]) == (0.0, 12.5)


def test_start_end_and_multi_interval_events(tmp_path):
    (video,) = load_annotations(write(tmp_path, [good_video()]))
    assert video.events[0].intervals == ((0.0, 10.0),)
    assert video.events[1].intervals == ((10.0, 15.0), (20.0, 30.0))
    assert (video.events[1].start, video.events[1].end) == (10.0, 30.0)


@pytest.mark.parametrize(
    "video, reason",
    [
        ({k: v for k, v in good_video().items() if k != "duration"}, "missing field 'duration'"),
        (good_video(events=[{"description": "x", "start": 5.0, "end": 2.0}]), "needs 0 <= start < end"),
        (good_video(events=[{"description": "x", "start": 5.0, "end": 40.0}]), "past the duration"),
        (good_video(events=[{"description": "  ", "start": 0.0, "end": 2.0}]), "empty or missing 'description'"),
        (good_video(events=[{"description": "x"}]), "needs 'intervals' or 'start' and 'end'"),
        (good_video(events=[]), "non-empty list"),
        (good_video(duration="long"), "finite number"),
        (good_video(events=[{"description": "x", "start": 0, "end": 4, "intervals": [[0, 2]]}]), "disagree"),
    ],
)
def test_malformed_record_names_file_and_record(tmp_path, video, reason):
    path = write(tmp_path, [good_video(video_id="ok"), video])
    with pytest.raises(AnnotationError) as info:
        load_annotations(path)
    assert str(path) in str(info.value)
    assert "v1" in str(info.value)
    assert reason in str(info.value)


def test_file_level_errors(tmp_path):
    with pytest.raises(AnnotationError, match="not found"):
        load_annotations(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(AnnotationError, match="not valid JSON"):
        load_annotations(bad)
    bad.write_text(json.dumps({"videos": []}))
    with pytest.raises(AnnotationError, match="format"):
        load_annotations(bad)
    with pytest.raises(AnnotationError, match="duplicate video_id"):
        load_annotations(write(tmp_path, [good_video(), good_video()]))
