"""`lit-retrieval validate-melon`: MELON's construction rules (Sec. 3, supp. C.1: 3-5
non-overlapping events, videos of at least 2 minutes) checked on annotations whose violations are
listed by hand."""

import json
from pathlib import Path

import pytest

from lit_retrieval.cli import main
from lit_retrieval.commands import run_command
from helpers.media import write_noise_video

FIXTURES = Path(__file__).parents[1] / "fixtures" / "melon"


def event(start, end, text="Something happens."):
    return {"Description": text, "Timestamp": [start, end]}


ANNOTATION = {
    "ok": {
        "duration": 240,
        "split": "test",
        "events": [event(0, 60), event(60, 120), event(130, 200)],
    },  # touching is fine
    "two": {"duration": 300, "split": "train", "events": [event(0, 60), event(100, 160)]},
    "six": {"duration": 600, "split": "train", "events": [event(100 * k, 100 * k + 50) for k in range(6)]},
    "short": {"duration": 90, "split": "train", "events": [event(0, 20), event(30, 50), event(60, 80)]},
    "overlap": {"duration": 200, "split": "train", "events": [event(0, 60), event(50, 100), event(100, 150)]},
    "multi": {
        "duration": 200,
        "split": "train",
        "events": [{"Description": "A and B.", "Timestamp": [[0, 10], [100, 120]]}, event(20, 40), event(110, 130)],
    },
    "broken": {"duration": 200, "split": "train", "events": [event(0, 10), {"Description": "No time."}, event(50, 60)]},
}
# worked by hand from the rules: (record, rule)
EXPECTED = [
    ("two", "events"),
    ("six", "events"),
    ("short", "duration"),
    ("overlap", "overlap"),
    ("multi", "overlap"),
    ("broken event 1", "record"),  # the parser names the event
]


def report(capsys, *argv):
    code = run_command("validate-melon", [*map(str, argv), "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_violations_are_listed_and_nothing_is_filtered(tmp_path, capsys):
    path = tmp_path / "melon.json"
    path.write_text(json.dumps(ANNOTATION))
    code, out = report(capsys, path)
    assert code == 1
    assert [(v["record"], v["rule"]) for v in out["violations"]] == EXPECTED
    assert out["videos"] == 6 and out["splits"] == {"test": 1, "train": 5}  # only the unparsable one is not counted
    assert out["events_per_video"] == {"2": 1, "3": 4, "6": 1}
    reasons = {v["record"]: v["reason"] for v in out["violations"]}
    assert reasons["two"] == "2 events; 3-5 needed" and reasons["six"] == "6 events; 3-5 needed"
    assert reasons["short"] == "annotated duration 90 s < 120 s"
    assert reasons["overlap"] == "events 0 [0, 60] and 1 [50, 100] overlap"  # 1 and 2 only touch at 100 s
    assert reasons["multi"] == "events 0 [100, 120] and 2 [110, 130] overlap"
    assert reasons["broken event 1"] == "missing 'timestamp'"
    text_code = run_command("validate-melon", [str(path)])
    text = capsys.readouterr().out
    assert text_code == 1 and "6 violation(s)" in text and "record 'short': [duration]" in text


def test_the_shipped_fixtures_follow_the_rules(capsys):
    code, out = report(capsys, FIXTURES / "melon_keyed.json", f"test={FIXTURES / 'melon_list.json'}")
    assert code == 0 and out["violations"] == [] and out["videos"] == 3
    assert out["splits"] == {"test": 2, "train": 1} and out["events_per_video"] == {"3": 2, "4": 1}


def test_video_files_are_checked_with_videos(tmp_path, capsys):
    videos = tmp_path / "videos"
    videos.mkdir()
    write_noise_video(videos / "long.mp4", seconds=5, width=32, height=32)
    write_noise_video(videos / "brief.mp4", seconds=2, width=32, height=32)
    events = [event(0, 1), event(1, 2), event(2, 3)]
    data = [
        {"video_id": "long", "split": "train", "events": events},  # no duration: read from the file (5 s)
        {"video_id": "brief", "split": "train", "duration": 4, "events": events},  # the file is 2 s
        {"video_id": "gone", "split": "train", "duration": 4, "events": events},
    ]
    path = tmp_path / "melon.json"
    path.write_text(json.dumps(data))
    code, out = report(capsys, path, "--videos", videos, "--min-seconds", 3)
    assert code == 1
    assert [(v["record"], v["rule"]) for v in out["violations"]] == [("brief", "video_duration"), ("gone", "video")]
    assert "file not found" in out["violations"][1]["reason"]
    # without --videos a record without a duration cannot be checked: it is listed, not dropped
    code, out = report(capsys, path, "--min-seconds", 3)
    assert [(v["record"], v["rule"]) for v in out["violations"]] == [("long", "record")]


def test_unreadable_file_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as finished:
        main(["validate-melon", str(tmp_path / "missing.json")])
    assert finished.value.code == 2 and "missing.json" in capsys.readouterr().err


@pytest.mark.parametrize(
    "options, message",
    [
        (["--min-seconds", "nan"], "--min-seconds: must be a finite number >= 0, got nan"),
        (["--min-seconds", "inf"], "--min-seconds: must be a finite number >= 0, got inf"),
        (["--min-events", "4", "--max-events", "3"], "--min-events: 4 must lie in [1, --max-events 3]"),
        (["--t2t", "nan"], "--t2t: must be a cosine similarity in [-1, 1], got nan"),
    ],
)
def test_rules_that_would_pass_everything_are_refused_in_one_line(tmp_path, capsys, options, message):
    """Issue 28: `min_seconds: NaN` reported no violations (every comparison with NaN is false) and
    `min_events > max_events` ran; both are refused before anything is read."""
    path = tmp_path / "melon.json"
    path.write_text(json.dumps(ANNOTATION))
    with pytest.raises(SystemExit) as finished:
        main(["validate-melon", str(path), *options])
    err = capsys.readouterr().err.strip()
    assert finished.value.code == 2 and err == f"lit-retrieval validate-melon: {message}"


def test_t2t_lists_adjacent_descriptions_that_say_the_same(tmp_path, capsys):
    """MELON supp. C.2: adjacent descriptions above 0.70 (all-MiniLM-L6-v2) mark a video without
    distinct events; the same sentence reworded is caught, distinct scenes are not."""
    annotation = {
        "same": {
            "duration": 240,
            "split": "train",
            "events": [
                event(0, 60, "A woman kneads white dough on a floured table."),
                event(60, 120, "A woman kneads the white dough on a floured kitchen table."),
                event(130, 200, "Red sauce simmers in a small metal pot."),
            ],
        },
        "distinct": {
            "duration": 240,
            "split": "train",
            "events": [
                event(0, 60, "A chef slices red tomatoes on a wooden board."),
                event(60, 120, "Green paint is rolled onto a large garage wall."),
                event(130, 200, "A blue kayak drifts across a calm mountain lake."),
            ],
        },
    }
    path = tmp_path / "melon.json"
    path.write_text(json.dumps(annotation))
    code, out = report(capsys, path)
    assert code == 0  # not checked unless asked
    code, out = report(capsys, path, "--t2t", 0.7)
    assert code == 1 and [(v["record"], v["rule"]) for v in out["violations"]] == [("same", "t2t")]
    assert out["violations"][0]["reason"].startswith("events 0 and 1: description similarity 0.9")
