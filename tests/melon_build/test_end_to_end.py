"""build-melon end to end over the synthetic multi-source fixture (tests/helpers/melon_build_fixture.py) and
the fake chat endpoint: the exact annotation, each stage's removals against a hand count, the human
review of the judge's flags, resuming after a failing endpoint or a stop mid-stage with no repeated
work, a 2-shard build equal to a 1-shard build, and the output read and trained on with
configs/melon/data/melon.yaml unchanged."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from lit_retrieval.cli import main
from lit_retrieval.commands import run_command
from lit_retrieval.data import MELONDataModule
from lit_retrieval.melon_build.llm_stages import ReviewError
from helpers.fit_configs import clip_fit_config
from helpers.melon_build_endpoint import FakeChatEndpoint, Reply, melon_responder
from helpers.melon_build_fixture import ColourEmbedder, make_fixture
from helpers.melon_build_runs import CHAT, build, decide, reviewed_build

REPO = Path(__file__).resolve().parents[2]


def event(start, end, theme, *texts):
    return {"theme": theme, "description": "Summary: " + " / ".join(texts), "timestamp": [start, end]}


# The fake summariser cuts a video's kept segments into K = 3 adjacent runs (the first n mod 3 one
# longer), each an event over its run; the split is the seeded hash rule (test_fraction 0.4, seed 0).
EXPECTED = [
    {
        "video_id": "anet__a1",
        "path": "anet/a1.mp4",
        "duration": 130,
        "split": "test",
        "summary_method": "llm-summary",
        "events": [
            event(0, 40, "Part 1", "A white cat sleeps on a sunny windowsill."),
            event(45, 85, "Part 2", "A red kite climbs above the windy beach."),
            event(90, 125, "Part 3", "A green lizard basks on a warm rock."),
        ],
    },
    {
        "video_id": "chap__c1",
        "path": "chap/c1.mp4",
        "duration": 140,
        "split": "train",
        "summary_method": "llm-summary",
        "events": [
            event(
                0,
                70,
                "Part 1",
                "Red roses are planted along a garden path.",
                "A green tram rattles through the old town.",
            ),
            event(70, 105, "Part 2", "Blue fireworks light the sky over a harbour."),
            event(105, 140, "Part 3", "A yellow submarine toy floats in a bathtub."),
        ],
    },
    {
        "video_id": "cook__y1",
        "path": "cook/y1.mp4",
        "duration": 150,
        "split": "test",
        "summary_method": "llm-summary",
        "events": [
            event(
                0,
                70,
                "Part 1",
                "A chef slices red tomatoes on a wooden board.",
                "Green paint is rolled onto a large garage wall.",
            ),
            event(75, 110, "Part 2", "A blue kayak drifts across a calm mountain lake."),
            event(115, 145, "Part 3", "Yellow leaves fall onto an empty park bench."),
        ],
    },
    {
        "video_id": "cook__y4",
        "path": "cook/y4.mp4",
        "duration": 150,
        "split": "train",
        "summary_method": "llm-summary",
        "events": [
            event(0, 25, "Part 1", "A red tractor ploughs a muddy field at dawn."),
            event(30, 55, "Part 2", "Children in green jackets play football on grass."),
            event(90, 115, "Part 3", "A blue whale surfaces beside a fishing boat."),
        ],
    },
]


@pytest.fixture(scope="module")
def endpoint():
    with FakeChatEndpoint(melon_responder()) as server:
        yield server


@pytest.fixture(scope="module")
def finished(endpoint, tmp_path_factory):
    """One full build (review: the flagged event rejected), its folder and the requests it made."""
    root = tmp_path_factory.mktemp("build")
    config = make_fixture(root, {"url": endpoint.url, **CHAT})
    before = len(endpoint.requests)
    code = reviewed_build(config, root / "out")
    return root, config, code, endpoint.requests[before:]


def test_the_build_writes_exactly_the_expected_annotation(finished):
    root, _, code, _ = finished
    assert code == 0
    assert json.loads((root / "out" / "annotations.json").read_text()) == {"videos": EXPECTED}


def test_each_stage_removes_what_a_hand_count_gives(finished):
    root, *_ = finished
    stats = json.loads((root / "out" / "stats.json").read_text())
    assert stats["collect"] == {
        "cook": {
            "raw": 6,
            "kept": 3,
            "ratio": 0.5,
            "invalid_record": 1,
            "short_video": 1,
            "missing_video": 0,
            "broken_description": 1,
            "too_few_segments": 0,
        },
        "chap": {
            "raw": 3,
            "kept": 2,
            "ratio": 0.6667,
            "invalid_record": 0,
            "short_video": 0,
            "missing_video": 1,
            "broken_description": 0,
            "too_few_segments": 0,
        },
        "anet": {
            "raw": 2,
            "kept": 1,
            "ratio": 0.5,
            "invalid_record": 0,
            "short_video": 1,
            "missing_video": 0,
            "broken_description": 0,
            "too_few_segments": 0,
        },
        "qa": {
            "raw": 2,
            "kept": 1,
            "ratio": 0.5,
            "invalid_record": 0,
            "short_video": 1,
            "missing_video": 0,
            "broken_description": 0,
            "too_few_segments": 0,
        },
    }
    removals = [json.loads(line) for line in (root / "out" / "removals.jsonl").read_text().splitlines()]
    later = {(r["stage"], r["source"], r["video"], r["reason"]) for r in removals if r["stage"] != "collect"}
    assert later == {
        ("t2t", "cook", "y2", "redundant_adjacent_descriptions"),  # its first two captions say the same
        ("v2t", "chap", "c2", "too_few_aligned_segments"),  # 2 of its 3 chapters show another colour
        ("judge", "qa", "q1", "review"),  # the UNSEEN event was rejected: 2 events left
    }
    assert stats["v2t"]["cook"] == {"threshold": 0.12, "segments": 9, "removed": 2, "kept_pct": 77.8}  # y1 4, y4 5
    assert stats["v2t"]["chap"] == {"threshold": 0.18, "segments": 7, "removed": 2, "kept_pct": 71.4}
    assert stats["events_per_query"] == {"3": 4} and stats["splits"] == {"test": 2, "train": 2}
    page = (root / "out" / "stats.md").read_text()
    assert "| cook | 6 | 3 | 50.00% |" in page
    for figure in ("events_per_query", "video_length", "v2t_cook", "v2t_chap", "v2t_anet", "v2t_qa"):
        assert (root / "out" / "figures" / f"{figure}.png").read_bytes()[:4] == b"\x89PNG"


def test_llm_calls_per_video(finished):
    *_, requests = finished
    texts = [json.dumps(r["messages"]) for r in requests]
    qa = [t for t in texts if "Question:" in t]
    summaries = [t for t in texts if "Segments (" in t]
    judged = [r for r in requests if "image_url" in json.dumps(r["messages"])]
    # q1's 4 QA pairs once each; one summary per surviving video (y1, y4, c1, a1, q1); one judge call
    # per test video (a1, y1, q1); the second write after the review asks nothing.
    assert (len(qa), len(summaries), len(judged), len(requests)) == (4, 5, 3, 12)
    stats = json.loads((finished[0] / "out" / "stats.json").read_text())
    assert stats["llm"] == {
        "judge": {"videos": 3, "calls": 3, "calls_per_video": 1.0},
        "qa-to-caption": {"videos": 1, "calls": 4, "calls_per_video": 4.0},
        "summarise": {"videos": 5, "calls": 5, "calls_per_video": 1.0},
    }


def test_the_judge_can_ask_its_own_image_reading_endpoint(endpoint, tmp_path):
    config = make_fixture(tmp_path, {"url": endpoint.url, **CHAT})
    with FakeChatEndpoint(melon_responder()) as vision:
        raw = yaml.safe_load(config.read_text())
        raw["judge_chat"] = {"url": vision.url, **CHAT}
        config.write_text(yaml.safe_dump(raw))
        before = len(endpoint.requests)
        reviewed_build(config, tmp_path / "out")
        text = endpoint.requests[before:]
        assert len(vision.requests) == 3 and all("image_url" in json.dumps(r["messages"]) for r in vision.requests)
        assert len(text) == 9 and not any("image_url" in json.dumps(r["messages"]) for r in text)


def test_output_passes_validate_melon_and_loads_in_melons_data_module(finished, capsys):
    root, *_ = finished
    out = root / "out"
    assert json.loads((out / "validate-melon.json").read_text())["violations"] == []
    assert run_command("validate-melon", [str(out / "annotations.json"), "--videos", str(root / "videos")]) == 0
    init = yaml.safe_load((REPO / "configs/melon/data/melon.yaml").read_text())["data"]["init_args"]
    init.update(
        annotation=str(out / "annotations.json"),
        video_root=str(root / "videos"),
        num_frames=4,
        image_size=32,
        batch_size=2,
        eval_batch_size=2,
        num_workers=0,
    )
    data = MELONDataModule(**init)
    data.setup("fit")
    batch = next(iter(data.train_dataloader()))
    assert tuple(batch["frames"].shape[:2]) == (2, 4)


def test_a_short_fit_on_the_output_with_configs_melon_data(finished, tiny_clip, tmp_path):
    """`lit-retrieval fit` with configs/melon/data/melon.yaml as it is, the model a tiny CLIP and the
    data paths (and sizes) pointed at the build: one epoch of training, validation on `test`."""
    root, *_ = finished
    model = clip_fit_config(
        tiny_clip,
        root,
        {
            "max_epochs": 1,
            "default_root_dir": str(tmp_path),
            "logger": {
                "class_path": "lightning.pytorch.loggers.CSVLogger",
                "init_args": {"save_dir": str(tmp_path), "name": "logs", "version": "v"},
            },
            "enable_progress_bar": False,
            "enable_checkpointing": False,
        },
    )
    del model["data"]
    data = {
        "data": {
            "init_args": {
                "annotation": str(root / "out" / "annotations.json"),
                "video_root": str(root / "videos"),
                "num_frames": 2,
                "image_size": 32,
                "batch_size": 2,
                "eval_batch_size": 2,
                "num_workers": 0,
            }
        }
    }
    paths = []
    for name, content in (("model.yaml", model), ("paths.yaml", data)):
        (tmp_path / name).write_text(yaml.safe_dump(content))
        paths.append(str(tmp_path / name))
    main(["fit", "--config", paths[0], "--config", str(REPO / "configs/melon/data/melon.yaml"), "--config", paths[1]])
    metrics = json.loads((tmp_path / "logs" / "v" / "metrics.json").read_text())
    assert "t2v/R@1" in metrics["val"]  # validated on the build's test split


def test_a_failing_endpoint_resumes_without_repeating_a_call(endpoint, tmp_path):
    config = make_fixture(tmp_path, {"url": endpoint.url, **CHAT})
    out = tmp_path / "out"
    # y1's summary request fails twice (max_retries 1): y1 fails at summarise, the others finish
    endpoint.script("Green paint is rolled", Reply(status=500), Reply(status=500))
    before = len(endpoint.requests)
    assert build(config, out, "--stage", "judge") == 1
    first = endpoint.requests[before:]
    assert len(first) == 4 + 2 + 4 + 2  # qa 4; y1 summary tried twice; 4 other summaries; judge a1, q1
    before = len(endpoint.requests)
    code = reviewed_build(config, out)
    again = [json.dumps(r["messages"]) for r in endpoint.requests[before:]]
    assert code == 0 and len(again) == 2 and all("Green paint is rolled" in t for t in again)  # y1's summary, judge
    stats = json.loads((out / "stats.json").read_text())  # both runs' calls: y1's summary was asked 3 times
    assert stats["llm"]["summarise"] == {"videos": 5, "calls": 7, "calls_per_video": 1.4}
    assert stats["llm"]["judge"]["calls"] == 3 and stats["llm"]["qa-to-caption"]["calls"] == 4
    assert json.loads((out / "annotations.json").read_text()) == {"videos": EXPECTED}


def test_a_refused_key_stops_the_build_without_asking_for_the_other_videos(tmp_path, capsys):
    """HTTP 401 on the summaries: the two sent together (concurrency 2) are the stage's last; the
    three other videos' summaries are never sent, and the build stops with one line, writing nothing."""
    with FakeChatEndpoint(melon_responder(), hold_s=0.3) as server:
        server.script("Segments (", *[Reply(status=401)] * 5)
        config = make_fixture(tmp_path, {"url": server.url, **CHAT, "concurrency": 2})
        with pytest.raises(SystemExit) as stopped:
            main(["build-melon", "--config", str(config), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()  # (a first load of the t2t model may draw a progress bar first)
    assert stopped.value.code == 2 and "Traceback" not in err, err
    assert err.splitlines()[-1].startswith(f"lit-retrieval build-melon: {server.url}/chat/completions: HTTP 401"), err
    summaries = [r for r in server.requests if "Segments (" in json.dumps(r["messages"])]
    assert len(summaries) == 2 and len(server.requests) == 4 + 2  # q1's 4 captions came first
    assert not (tmp_path / "out" / "annotations.json").exists()


def test_a_build_stopped_mid_stage_resumes_where_it_stopped(endpoint, tmp_path, monkeypatch):
    """Stopped while embedding its third video (v2t), the build keeps the two finished ones; the
    re-run embeds only the other four and asks the endpoint nothing for the stages already done."""
    config = make_fixture(tmp_path, {"url": endpoint.url, **CHAT})
    out = tmp_path / "out"
    monkeypatch.setattr(ColourEmbedder, "embedded", [])
    monkeypatch.setattr(ColourEmbedder, "interrupt_after", 2)
    with pytest.raises(KeyboardInterrupt):
        build(config, out)
    first = list(ColourEmbedder.embedded)
    assert len(first) == 2 and len((out / "cache" / "v2t" / "shard-0-of-1.jsonl").read_text().splitlines()) == 2
    monkeypatch.setattr(ColourEmbedder, "embedded", [])
    monkeypatch.setattr(ColourEmbedder, "interrupt_after", None)
    before = len(endpoint.requests)
    assert build(config, out, "--stage", "v2t") == 0
    assert len(ColourEmbedder.embedded) == 4 and not set(first) & set(ColourEmbedder.embedded)
    assert len(endpoint.requests) == before  # q1's captions came from the stage cache


def test_two_shards_and_a_write_equal_one_build(endpoint, finished, tmp_path):
    root, *_ = finished
    config = make_fixture(tmp_path, {"url": endpoint.url, **CHAT})
    out = tmp_path / "out"
    assert build(config, out, "--shard", "0/2") == 0
    assert build(config, out, "--shard", "1/2") == 0
    assert sorted(p.name for p in (out / "cache" / "summarise").iterdir()) == [
        "shard-0-of-2.jsonl",
        "shard-1-of-2.jsonl",
    ]
    before = len(endpoint.requests)
    with pytest.raises(ReviewError, match="still pending"):
        build(config, out, "--stage", "write")
    decide(out, "reject")
    assert build(config, out, "--stage", "write") == 0
    assert len(endpoint.requests) == before  # the write asks nothing: every result came from the shards
    one = json.loads((root / "out" / "annotations.json").read_text())
    assert json.loads((out / "annotations.json").read_text()) == one


def test_a_changed_threshold_redoes_only_what_depends_on_it(endpoint, finished, tmp_path):
    """V2T similarities are cached before the threshold is applied: lowering cook's threshold to -1
    embeds nothing again and asks the LLM only for y4's new summary (5 segments kept; y4 is train,
    so no judge); the review decisions already made carry over."""
    root, config, *_ = finished
    out = tmp_path / "out"
    shutil.copytree(root / "out", out)
    raw = yaml.safe_load(config.read_text())
    raw["sources"][0]["v2t_threshold"] = -1.0
    changed = config.with_name("changed.yaml")
    changed.write_text(yaml.safe_dump(raw))
    v2t_lines = (out / "cache" / "v2t" / "shard-0-of-1.jsonl").read_text()
    before = len(endpoint.requests)
    assert build(changed, out) == 0
    asked = [json.dumps(r["messages"]) for r in endpoint.requests[before:]]
    assert len(asked) == 1 and "A yellow taxi waits" in asked[0]
    assert (out / "cache" / "v2t" / "shard-0-of-1.jsonl").read_text() == v2t_lines
    y4 = next(v for v in json.loads((out / "annotations.json").read_text())["videos"] if v["video_id"] == "cook__y4")
    assert [e["timestamp"] for e in y4["events"]] == [[0, 55], [60, 115], [120, 145]]  # runs of 2, 2, 1


def test_bad_configs_are_one_line_errors(tmp_path, capsys):
    config = make_fixture(tmp_path, {"url": "http://127.0.0.1:9/v1", "model": "m"})
    raw = yaml.safe_load(config.read_text())
    cases = [
        ({"chat": None}, "a 'qa' source is captioned by an LLM"),
        ({"chat": {"url": "node12:8000", "model": "m"}}, "chat.url must be an http(s) URL"),
        ({"llm": {"prompts": {"summarise_user": "no segments"}}}, "prompts.summarise_user must contain"),
        ({"split": {"test_fraction": 1.5}}, "split.test_fraction must be a finite number in [0, 1]"),
        ({"t2t": {"threshold": float("nan")}}, "t2t.threshold must be a finite number"),
        ({"sources": raw["sources"][:1] * 2}, "names must be unique"),
        ({"v2t": {"model": "m", "embedder": {"class_path": "x.Y"}}}, "exactly one of"),
        ({"llm": {"min_events": 4, "max_events": 3}}, "llm.max_events"),
        ({"collect": {"min_sconds": 3}}, "min_sconds"),
    ]
    for change, message in cases:
        bad = tmp_path / "bad.yaml"
        bad.write_text(yaml.safe_dump({**raw, **change}))
        with pytest.raises(SystemExit) as finished:
            main(["build-melon", "--config", str(bad), "--out", str(tmp_path / "out")])
        err = capsys.readouterr().err.strip()
        assert finished.value.code == 2 and message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "out").exists()  # refused before anything is written
