"""A batch's metadata under DeepSpeed's bf16 (issue 57, item 6): Lightning's DeepSpeed precision
casts every floating tensor of a batch to bf16 before the step, which rounded 299, 599 and
1,801 s to 300, 600 and 1,800 s and moved videos across MELON's length slices (Sec. 5.3, edges
300 / 600 / 1,800 s). `lit-retrieval test` on DeepSpeed's CPU engine in bf16-mixed: the length
slices count the durations of the annotation, worked out by hand."""

from __future__ import annotations

import json

import pytest
import yaml
from helpers.deepspeed_runs import ROOT, cli
from helpers.fit_configs import clip_fit_config

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


def test_durations_reach_the_evaluator_unrounded_under_deepspeed_bf16(tmp_path, corpus, tiny_clip):
    annotation = json.loads((corpus / "annotations.json").read_text())
    test_videos = [v for v in annotation["videos"] if v["split"] == "test"]
    assert len(test_videos) >= 4
    for video, seconds in zip(test_videos, [299.0, 599.0, 1801.0, 1799.0]):
        video["duration"] = seconds
    assert all(v["duration"] < 300 for v in test_videos[4:])  # the synthetic videos last seconds
    path = tmp_path / "annotations.json"
    path.write_text(json.dumps(annotation))
    run = tmp_path / "run"
    config = clip_fit_config(
        tiny_clip,
        corpus,
        {"default_root_dir": str(run), "logger": False, "enable_progress_bar": False},
        model={"evaluation": {"analyses": {"stages": ["test"], "slices": True, "avg_event": False}}},
        data={"annotation": str(path), "video_root": str(corpus), "eval_batch_size": 8},
    )
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(config))
    strategy = str(ROOT / "configs" / "strategy" / "deepspeed_zero2.yaml")
    cli(
        "test",
        "--config",
        str(tmp_path / "test.yaml"),
        "--config",
        strategy,
        "--trainer.precision",
        "bf16-mixed",
        ranks=1,
    )
    results = json.loads((run / "metrics.json").read_text())["test"]
    assert results["slices/length_0-300s/n"] == len(test_videos) - 3  # 299 s and the synthetic videos' seconds
    assert results["slices/length_300-600s/n"] == 1  # 599 s (bf16: 300 and 600 s)
    assert results["slices/length_600-1800s/n"] == 1  # 1,799 s (bf16: 1,800 s)
    assert results["slices/length_1800s+/n"] == 1  # 1,801 s
