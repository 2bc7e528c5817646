"""Evaluation under DDP on 3 CPU processes (gloo) gives exactly the metrics of one process: with
one video per rank, and with a rank whose every video is undecodable (it has no batch to evaluate,
yet takes part in every collective). The skipped-video count counts each video once, not the
duplicates PyTorch's `DistributedSampler` adds to even out the ranks (7 videos -> 9 slots: rank r
takes slots r, r + 3, r + 6 of 0 1 2 3 4 5 6 0 1)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fit_configs import clean_launch_env, clip_fit_config

ROOT = Path(__file__).resolve().parents[1]


def annotations(corpus: Path, out: Path, tests: int, broken: tuple[int, ...] = ()) -> Path:
    """`tests` test videos of the corpus (those in `broken` point to a file that is no video) and
    two training videos."""
    videos = json.loads((corpus / "annotations.json").read_text())["videos"]
    (out / "broken.mp4").write_bytes(b"not a video")
    chosen = []
    for k, video in enumerate(videos[: tests + 2]):
        video = {**video, "split": "test" if k < tests else "train", "path": str(corpus / video["path"])}
        if k in broken:
            video["path"] = str(out / "broken.mp4")
        chosen.append(video)
    path = out / "annotations.json"
    path.write_text(json.dumps({"format": "lit-retrieval/multi-event", "version": 1, "videos": chosen}))
    return path


ANALYSES = {"analyses": {"avg_event": True, "slices": True, "event_orders": ["reversed"]}}


def test_metrics(
    tmp_path: Path, tiny_clip: Path, corpus: Path, annotation: Path, devices: int, evaluation: dict = ANALYSES
) -> list[dict]:
    """`lit-retrieval test` of the untrained tiny model on `devices` processes (`evaluation`: the
    model's evaluation options): each rank's metrics."""
    out = tmp_path / f"devices{devices}"
    config = clip_fit_config(
        tiny_clip,
        corpus,
        {
            "devices": devices,
            "strategy": "ddp" if devices > 1 else "auto",
            "default_root_dir": str(out),
            "logger": False,
            "callbacks": [{"class_path": "stop_callbacks.RecordEvaluation", "init_args": {"out": str(out)}}],
        },
        model={"evaluation": evaluation},
        data={"annotation": str(annotation), "eval_batch_size": 2, "on_bad_video": "skip"},
    )
    path = tmp_path / f"test{devices}.yaml"
    path.write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [sys.executable, "-m", "lit_retrieval", "test", "--config", str(path)],
        cwd=ROOT,
        env=clean_launch_env(str(ROOT / "tests")),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(devices)]


test_metrics.__test__ = False  # a helper, not a test


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize(
    "tests, broken, skipped",
    [
        (3, (), None),  # one video per rank
        # rank 2's slots hold videos 2, 5 and 1 (a padding duplicate): all broken, no batch there;
        # rank 1 also meets video 1: 3 videos skipped, not 4
        (7, (1, 2, 5), 3.0),
    ],
    ids=["one-video-per-rank", "rank-without-batches"],
)
def test_three_processes_evaluate_as_one(tmp_path, tiny_clip, corpus, tests, broken, skipped):
    annotation = annotations(corpus, tmp_path, tests, broken)
    [single] = test_metrics(tmp_path, tiny_clip, corpus, annotation, 1)
    ranks = test_metrics(tmp_path, tiny_clip, corpus, annotation, 3)
    assert single.get("skipped_videos") == skipped
    assert single["t2v/R@1"] >= 0 and len(single) > 6
    for results in ranks:  # every rank reports the one-process metrics
        assert results == pytest.approx(single, abs=1e-9)
