"""build-melon's pieces against the outside world: the stage cache and the call log after a torn write, the seeded
split and shard rules, the collect formats and rules on hand-written files, and V2T with a tiny
GVE model folder and with a tiny CLIP dual encoder from its training config, loaded as the project
loads any item embedder."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml

from lit_retrieval.data.annotations import save_annotations
from lit_retrieval.data.items import MediaItem
from lit_retrieval.data.records import Event, VideoRecord
from lit_retrieval.melon_build.chat import CallLog, logged_calls
from lit_retrieval.melon_build.config import CollectConfig, SourceConfig, V2TConfig
from lit_retrieval.melon_build.filters import load_embedder, segment_similarities
from lit_retrieval.melon_build.pipeline import shard_of, split_of
from lit_retrieval.melon_build.report import length_bucket
from lit_retrieval.melon_build.sources import Segment, collect
from lit_retrieval.melon_build.stage_cache import StageCache
from helpers.fit_configs import clip_fit_config
from helpers.melon_build_fixture import A1, write_colour_video


def test_a_torn_last_line_is_redone_and_later_lines_stay_readable(tmp_path):
    cache = StageCache(tmp_path, "t2t")
    cache.put("a", "k1", [0.1])
    cache.put("b", "k2", [0.2])
    with cache.file.open("a") as handle:
        handle.write('{"video": "c", "key": "k3", "res')  # killed mid-write
    again = StageCache(tmp_path, "t2t")
    assert again.entries == {("a", "k1"): [0.1], ("b", "k2"): [0.2]}
    again.put("c", "k3", [0.3])
    assert StageCache(tmp_path, "t2t").get("c", "k3") == [0.3]
    assert StageCache(tmp_path, "t2t").get("c", "other key") is None  # another input or setting: a miss


def test_the_call_log_skips_a_torn_last_line_and_keeps_the_lines_after_it(tmp_path):
    log = CallLog(tmp_path / "llm-calls" / "shard-0-of-1.jsonl")
    log.record("summarise", "a")
    log.record("judge", "a")
    with log.path.open("a") as handle:
        handle.write('{"stage": "summarise", "video": "b", "ca')  # killed mid-write
    again = CallLog(log.path)  # the resumed run
    again.record("summarise", "b")
    again.record("summarise", "b")
    CallLog(tmp_path / "llm-calls" / "shard-1-of-2.jsonl").record("summarise", "c")  # another shard's file
    calls = logged_calls(tmp_path / "llm-calls")
    assert calls == {("summarise", "a"): 1, ("judge", "a"): 1, ("summarise", "b"): 2, ("summarise", "c"): 1}
    assert len(log.path.read_text().splitlines()) == 5  # the torn line stays on its own


def test_the_split_is_seeded_per_video_and_keeps_the_ratio():
    ids = [f"src__video{i}" for i in range(20000)]
    splits = [split_of(i, 0.3, seed=0) for i in ids]
    assert abs(splits.count("test") / len(ids) - 0.3) < 0.01
    assert splits == [split_of(i, 0.3, seed=0) for i in ids]  # no state: same answer every time
    other = [split_of(i, 0.3, seed=1) for i in ids]
    assert 0.3 < np.mean([a != b for a, b in zip(splits, other)]) < 0.5  # 2 * 0.3 * 0.7 = 0.42 expected
    assert np.bincount([shard_of(i, 4) for i in ids]).min() > 4800  # the shards share the work evenly


def _source(tmp_path, name, fmt, data, **kwargs) -> SourceConfig:
    path = tmp_path / f"{name}.json"
    if fmt == "canonical":
        save_annotations(data, path)
    else:
        path.write_text(json.dumps(data))
    return SourceConfig(name=name, format=fmt, annotation=str(path), videos=str(tmp_path / name), **kwargs)


def _touch(tmp_path, *names):
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")


def test_collect_reads_every_format_in_time_order_under_the_rules(tmp_path):
    _touch(tmp_path, "chap/c1.mp4", "can/v1.mp4", "mel/m1.mp4", "mel/m2.mp4")
    chapters = [
        {
            "video_id": "c1",
            "duration": 200,
            "chapters": [
                {"start": 50, "title": "Second part of the long show."},
                {"start": 0, "title": "The opening scene starts here."},
                {"start": 120, "end": 180, "title": "A closing scene with the credits."},
            ],
        }
    ]
    canonical = [
        VideoRecord(
            "v1",
            "v1.mp4",
            130.0,
            "train",
            (
                Event("Someone walks into the room.", ((0.0, 10.0), (100.0, 110.0))),
                Event("A dog barks at the door.", ((20.0, 30.0),)),
            ),
        )
    ]
    melon = {
        "m1": {
            "duration": "02:10",
            "split": "x",
            "events": [
                {"Description": "A kettle boils on the stove.", "Timestamp": "00:05 - 00:20"},
                {"Description": "Tea is poured into two cups.", "Timestamp": "00:30 - 00:50"},
                {"Description": "Two friends drink the tea.", "Timestamp": "01:00 - 02:00"},
            ],
        },
        "m2": {"duration": 130, "split": "x", "events": [{"Description": "Only one event here.", "Timestamp": [0, 5]}]},
    }
    sources = [
        _source(tmp_path, "chap", "chapters", chapters),
        _source(tmp_path, "can", "canonical", canonical),
        _source(tmp_path, "mel", "melon", melon),
    ]
    videos, removed, counts = collect(sources, CollectConfig(min_seconds=120, min_words=3, min_segments=3))
    by_id = {v.uid: v for v in videos}
    # a chapter without `end` ends where the next starts; segments come out in time order
    assert by_id["chap__c1"].segments == (
        Segment(0.0, 50.0, "The opening scene starts here."),
        Segment(50.0, 120.0, "Second part of the long show."),
        Segment(120.0, 180.0, "A closing scene with the credits."),
    )
    # the canonical format's two-interval event gives two segments with its description
    assert [(s.start, s.text) for s in by_id["can__v1"].segments] == [
        (0.0, "Someone walks into the room."),
        (20.0, "A dog barks at the door."),
        (100.0, "Someone walks into the room."),
    ]
    assert by_id["mel__m1"].duration == 130 and by_id["mel__m1"].segments[2] == Segment(
        60.0, 120.0, "Two friends drink the tea."
    )
    assert by_id["mel__m1"].path == str(tmp_path / "mel" / "m1.mp4")
    assert [(r.source, r.video, r.reason) for r in removed] == [("mel", "m2", "too_few_segments")]
    assert counts["mel"]["raw"] == 2 and counts["mel"]["kept"] == 1 and counts["mel"]["too_few_segments"] == 1


@pytest.mark.parametrize(
    "text, broken", [("Two words", True), ("12 34 56", True), (7, True), ("A cat sits down.", False)]
)
def test_broken_descriptions_drop_the_video(tmp_path, text, broken):
    _touch(tmp_path, "y/v.mp4")
    annotations = [{"segment": [10 * k, 10 * k + 5], "sentence": f"Scene number {k} shows a tree."} for k in range(3)]
    annotations[1]["sentence"] = text
    source = _source(tmp_path, "y", "youcook2", {"database": {"v": {"duration": 150, "annotations": annotations}}})
    videos, removed, _ = collect([source], CollectConfig())
    assert [r.reason for r in removed] == (["broken_description"] if broken else []) and len(videos) == (not broken)


def test_v2t_with_a_tiny_gve_model_scores_each_segment_against_its_window(tmp_path, tiny_qwen):
    video = tmp_path / "a1.mp4"
    write_colour_video(video, 13, [(s / 10, e / 10, c) for s, e, _, c in A1])  # A1 at a tenth of its length
    embedder = load_embedder(V2TConfig(model=str(tiny_qwen)))
    segments = tuple(Segment(s / 10, e / 10, t) for s, e, t, _ in A1)
    scores = segment_similarities(embedder, str(video), segments, batch_size=2)
    expected = []
    for s in segments:  # one item at a time, as the model's own interface embeds them
        window = embedder.embed([MediaItem(video=str(video), start=s.start, end=s.end)])[0]
        text = embedder.embed([MediaItem(text=s.text)])[0]
        expected.append(float(torch.nn.functional.cosine_similarity(window, text, dim=0)))
    assert scores == pytest.approx(expected, abs=1e-4) and len(set(np.round(scores, 4))) == 3


def test_video_lengths_fall_in_the_page_s_minute_buckets():
    seconds = [60, 120, 299, 300, 700, 1800, 3600, 9000]
    assert [length_bucket(s) for s in seconds] == [
        "<2 min",
        "2-5 min",
        "2-5 min",
        "5-10 min",
        "10-30 min",
        "30-60 min",
        "60+ min",
        "60+ min",
    ]


def test_v2t_with_a_dual_encoder_from_its_training_config(tmp_path, tiny_clip):
    """`v2t.config`: a CLIP dual encoder built from a training config (frames as its data module
    samples them: 2 frames of 32 px), scoring each segment against its window."""
    config = clip_fit_config(tiny_clip, tmp_path, {"max_epochs": 1}, data={"num_frames": 2, "image_size": 32})
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(config))
    video = tmp_path / "a1.mp4"
    write_colour_video(video, 13, [(s / 10, e / 10, c) for s, e, _, c in A1])
    embedder = load_embedder(V2TConfig(config=str(path)))
    segments = tuple(Segment(s / 10, e / 10, t) for s, e, t, _ in A1)
    scores = segment_similarities(embedder, str(video), segments, batch_size=2)
    windows = embedder.embed([MediaItem(video=str(video), start=s.start, end=s.end) for s in segments])
    texts = embedder.embed([MediaItem(text=s.text) for s in segments])
    assert scores == pytest.approx((windows * texts).sum(-1).tolist(), abs=1e-5)
    assert all(-1 <= x <= 1 for x in scores)
