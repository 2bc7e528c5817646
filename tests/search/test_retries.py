"""A failed video is retried once its file changed: `index` and `shots` remember failures with the
file's size and modification time, skip an unchanged failed file on a rerun, retry a replaced one
(a corrupt mp4 replaced with a good one), and retry every failure with `--retry-failed`."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from lit_retrieval.commands import run_command
from lit_retrieval.data.media.shots import ShotDetectorConfig, detect_many
from lit_retrieval.search.index import VideoIndex, build_video_index, list_videos
from lit_retrieval.search.loading import ModelSpec
from helpers.media import write_noise_video, write_shots_video
from helpers.known_vectors import KnownVectors

SPEC = ModelSpec(model="/nowhere/model")


def test_index_retries_a_repaired_video_and_only_then(tmp_path):
    videos = tmp_path / "videos"
    videos.mkdir()
    for i in range(3):
        write_noise_video(videos / f"clip{i}.mp4", seconds=1, seed=i)
    broken = videos / "clip3.mp4"
    broken.write_bytes(b"\x00" * 64)  # KnownVectors refuses files starting with zero bytes, as a decoder would
    paths, out = list_videos(videos), tmp_path / "idx"
    assert build_video_index(KnownVectors(), SPEC, paths, out, progress=False)["failed"] == 1
    entry = json.loads((out / "failed.json").read_text())[str(broken)]
    assert entry["size"] == 64 and entry["mtime_ns"] == os.stat(broken).st_mtime_ns and "undecodable" in entry["reason"]
    rerun = KnownVectors()
    assert (
        build_video_index(rerun, SPEC, paths, out, progress=False)["failed"] == 1 and rerun.embedded == []
    )  # unchanged: skipped
    forced = KnownVectors()
    assert build_video_index(forced, SPEC, paths, out, progress=False, retry_failed=True)["failed"] == 1
    assert forced.embedded == [] and str(broken) in json.loads((out / "failed.json").read_text())  # tried, failed again
    write_noise_video(broken, seconds=1, seed=3)  # repaired
    repaired = KnownVectors()
    meta = build_video_index(repaired, SPEC, paths, out, progress=False)
    assert repaired.embedded == [str(broken)] and meta == {**meta, "count": 4, "failed": 0}
    assert json.loads((out / "failed.json").read_text()) == {} and sorted(VideoIndex.load(out).videos) == sorted(paths)


def test_an_index_failure_listed_without_size_and_mtime_is_retried(tmp_path):
    videos = tmp_path / "videos"
    videos.mkdir()
    write_noise_video(videos / "clip0.mp4", seconds=1)
    out = tmp_path / "idx"
    out.mkdir()
    (out / "failed.json").write_text(json.dumps({str(videos / "clip0.mp4"): "undecodable (an older index)"}))
    embedder = KnownVectors()
    assert (
        build_video_index(embedder, SPEC, list_videos(videos), out, progress=False)["count"] == 1
        and len(embedder.embedded) == 1
    )


def test_index_command_retries_a_replaced_corrupt_video(tmp_path, tiny_qwen):
    shutil.copytree(tiny_qwen, tmp_path / "model")
    videos = tmp_path / "videos"
    videos.mkdir()
    write_noise_video(videos / "good.mp4", seconds=1)
    (videos / "bad.mp4").write_bytes(b"\x1a\x45\xdf\xa3 truncated")
    common = ["--model", str(tmp_path / "model"), "--videos", str(videos), "--out", str(tmp_path / "idx")]
    assert run_command("index", common) == 0
    assert list(json.loads((tmp_path / "idx" / "failed.json").read_text())) == [str(videos / "bad.mp4")]
    write_noise_video(videos / "bad.mp4", seconds=1, seed=5)
    assert run_command("index", common) == 0
    assert VideoIndex.load(tmp_path / "idx").meta["failed"] == 0
    assert sorted(VideoIndex.load(tmp_path / "idx").videos) == [str(videos / "bad.mp4"), str(videos / "good.mp4")]


def test_shots_remember_a_failure_until_the_file_changes(tmp_path, monkeypatch):
    video = tmp_path / "movie.mp4"
    video.write_bytes(b"\x00\x00\x00\x18ftypmp42 cut off here")
    config, cache = ShotDetectorConfig(), tmp_path / "cache"
    first = detect_many([video], config, cache, on_error="skip", progress=False)
    assert list(first.failed) == [str(video)] and first.known_failures == 0
    import lit_retrieval.data.media.shots as shots

    tried: list[str] = []
    detect = shots.detect_shots
    monkeypatch.setattr(shots, "detect_shots", lambda path, cfg: tried.append(str(path)) or detect(path, cfg))
    again = detect_many([video], config, cache, on_error="skip", progress=False)
    assert tried == [] and again.failed == first.failed and again.known_failures == 1
    with pytest.raises(Exception, match="movie.mp4"):  # a remembered failure still stops a run under on_error=raise
        detect_many([video], config, cache, on_error="raise", progress=False)
    forced = detect_many([video], config, cache, on_error="skip", progress=False, retry_failed=True)
    assert tried == [str(video)] and forced.known_failures == 0 and list(forced.failed) == [str(video)]
    write_shots_video(video, cut_frames=[10], total=20)  # replaced by a good video
    repaired = detect_many([video], config, cache, on_error="skip", progress=False)
    assert tried == [str(video)] * 2 and repaired.failed == {} and len(repaired.shots[str(video)]) == 2
