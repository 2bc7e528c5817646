"""Shot detection (PySceneDetect), its cache, the `shots` command and frames regrouped into shots."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from lit_retrieval.cli import main
from lit_retrieval.data import MultiEventDataModule
from lit_retrieval.data.media.shots import (
    ShotCache,
    ShotDetectorConfig,
    ShotConfig,
    detect_many,
    detect_shots,
    frame_shot_index,
)
from lit_retrieval.data.media.video import VideoDecodeError
from helpers.media import FPS, write_shots_video


@pytest.fixture(scope="module")
def cut_videos(tmp_path_factory):
    root = tmp_path_factory.mktemp("shots")
    videos = {"three_cuts.mp4": [13, 27, 44], "no_cut.mp4": [], "one_cut.mp4": [31]}
    for name, cuts in videos.items():
        write_shots_video(root / name, cuts, 60)
    (root / "broken.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + os.urandom(2000))
    return root, videos


@pytest.mark.parametrize("detector", ["adaptive", "content"])
def test_known_cuts_are_found_within_one_frame(cut_videos, detector):
    root, videos = cut_videos
    for name, cuts in videos.items():
        shots = detect_shots(root / name, ShotDetectorConfig(detector=detector))
        starts = [start for start, _ in shots]
        assert len(shots) == len(cuts) + 1, (name, shots)
        assert starts[0] == 0.0 and shots[-1][1] == pytest.approx(60 / FPS, abs=1 / FPS)
        for found, true in zip(starts[1:], cuts):
            assert abs(found - true / FPS) <= 1 / FPS + 1e-9
        assert all(end == next_start for (_, end), (next_start, _) in zip(shots, shots[1:]))


def test_undecodable_and_missing_videos_raise_naming_the_file(cut_videos):
    root, _ = cut_videos
    for name in ("broken.mp4", "missing.mp4"):
        with pytest.raises(VideoDecodeError, match=name):
            detect_shots(root / name)


def test_cache_hits_and_invalidation(cut_videos, tmp_path):
    root, _ = cut_videos
    video = tmp_path / "clip.mp4"
    write_shots_video(video, [20], 40)
    config = ShotDetectorConfig()
    first = detect_many([video], config, tmp_path / "cache", progress=False)
    assert first.cached == 0 and len(first.shots[str(video)]) == 2
    again = detect_many([video], config, tmp_path / "cache", progress=False)
    assert again.cached == 1 and again.shots == first.shots
    other = detect_many([video], ShotDetectorConfig(detector="content"), tmp_path / "cache", progress=False)
    assert other.cached == 0  # another setting is another entry
    write_shots_video(video, [10, 25], 40)  # the file changes: its entry is stale
    changed = detect_many([video], config, tmp_path / "cache", progress=False)
    assert changed.cached == 0 and len(changed.shots[str(video)]) == 3
    entry = ShotCache(tmp_path / "cache").entry(video, config)
    entry.write_text("{not json")  # a damaged entry is a miss, not a crash
    assert ShotCache(tmp_path / "cache").get(video, config) is None


def test_failures_follow_the_policy_and_finished_videos_stay_cached(cut_videos, tmp_path):
    root, videos = cut_videos
    paths = [root / "three_cuts.mp4", root / "broken.mp4", root / "one_cut.mp4"]
    with pytest.raises(VideoDecodeError, match="broken.mp4"):
        detect_many(paths, ShotDetectorConfig(), tmp_path / "cache", workers=2, progress=False)
    kept = detect_many(paths, ShotDetectorConfig(), tmp_path / "cache", on_error="skip", progress=False)
    assert kept.cached == 2 and list(kept.failed) == [str(root / "broken.mp4")]


def test_shots_command_reads_the_training_config_and_writes_json(cut_videos, tmp_path, capsys):
    root, _ = cut_videos
    config = tmp_path / "shots.yaml"  # a second config over a training config, as `fit` composes them
    config.write_text(
        f"data:\n  init_args:\n    shots: {{cache_dir: {tmp_path / 'c'}, "
        "detector: {detector: content, threshold: 30.0}}\n"
    )
    training = Path(__file__).resolve().parents[3] / "configs" / "quickstart.yaml"
    out = tmp_path / "shots.json"
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "shots",
                "--dir",
                str(root),
                "--config",
                str(training),
                "--config",
                str(config),
                "--out",
                str(out),
                "--workers=2",
            ]
        )
    assert exit_info.value.code == 0
    printed = capsys.readouterr().out
    assert "failed: " in printed and "broken.mp4" in printed and "'threshold': 30.0" in printed
    shots = json.loads(out.read_text())
    assert len(shots[str(root / "three_cuts.mp4")]) == 4
    assert (
        ShotCache(tmp_path / "c").get(root / "no_cut.mp4", ShotDetectorConfig(detector="content", threshold=30.0))
        is not None
    )


def test_frames_are_regrouped_by_timestamp_and_renumbered():
    shots = [(0.0, 2.0), (2.0, 2.5), (2.5, 6.0), (6.0, 9.0)]
    times = np.array([0.5, 1.9, 2.6, 4.0, 5.9, 7.0, np.nan, np.nan])
    # shot 1 (2.0-2.5) receives no frame: the others are renumbered 0, 1, 2
    np.testing.assert_array_equal(frame_shot_index(times, shots), [0, 0, 1, 1, 1, 2, -1, -1])
    np.testing.assert_array_equal(frame_shot_index(np.array([8.99, 9.5]), shots), [0, 0])


def test_data_module_items_carry_frame_shots_matching_the_ground_truth_cuts(corpus, tmp_path):
    dm = MultiEventDataModule(
        str(corpus / "annotations.json"),
        num_frames=16,
        image_size=32,
        shots=ShotConfig(cache_dir=str(tmp_path / "cache"), progress=False),
    )
    dm.prepare_data()
    dm.setup()
    dataset = dm.datasets["train"]
    found = total = 0
    for i in range(len(dataset)):
        item = dataset[i]
        times = item["frame_times"].numpy()
        starts = [start for start, _ in dataset.shots[i]]
        expected = np.unique(np.searchsorted(starts, times[~np.isnan(times)], side="right") - 1, return_inverse=True)[1]
        np.testing.assert_array_equal(item["frame_shots"].numpy()[: len(expected)], expected)
        assert item["num_shots"] == len(starts) and item["frame_shots"].max() < item["num_shots"]
        cuts = dataset.records[i].cuts
        total += len(cuts)
        found += sum(any(abs(c - s) <= 1 / 8 + 1e-9 for s in starts[1:]) for c in cuts)
    assert found >= 0.8 * total  # ground-truth cuts; consecutive look-alike scenes may merge
    batch = next(iter(dm.train_dataloader()))
    assert batch["frame_shots"].shape == (dm.batch_size, 16) and batch["num_shots"].dtype == torch.long


def test_shots_command_takes_its_shard_only(tmp_path):
    from lit_retrieval.commands import run_command

    videos = []
    for i in range(4):
        path = tmp_path / f"v{i}.mp4"
        write_shots_video(path, [10], 20, size=48)
        videos.append(str(path))
    out = tmp_path / "shard1.json"
    assert (
        run_command(
            "shots",
            [*videos, "--cache", str(tmp_path / "cache"), "--shard", "1", "--num-shards", "2", "--out", str(out)],
        )
        == 0
    )
    assert sorted(json.loads(out.read_text())) == sorted(videos[1::2])
    with pytest.raises(SystemExit):
        run_command("shots", [*videos, "--shard", "2", "--num-shards", "2"])
