"""`lit-retrieval fit` of a dual encoder with MEA and cross-device negatives under DDP on 2 CPU
processes (gloo): ranks see disjoint shards of each epoch's order, the MEA threshold (computed
over the global batch) stays identical on both ranks, and both ranks report the same metrics."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from helpers.cli_server import run_cli
from helpers.fit_configs import clean_launch_env, clip_fit_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.distributed
@pytest.mark.slow
def test_dual_encoder_ddp_fit_with_mea_and_cross_device_negatives(tmp_path, tiny_clip, corpus):
    record = tmp_path / "record"
    config = clip_fit_config(
        tiny_clip,
        corpus,
        {
            "devices": 2,
            "strategy": "ddp",
            "max_epochs": 2,
            "default_root_dir": str(tmp_path / "run"),
            "logger": {
                "class_path": "lightning.pytorch.loggers.CSVLogger",
                "init_args": {"save_dir": str(tmp_path / "run"), "name": "logs", "version": "v"},
            },
            "callbacks": [
                {"class_path": "lit_retrieval.callbacks.TrainingCurves"},
                {"class_path": "helpers.stop_callbacks.RecordBatches", "init_args": {"out": str(record)}},
            ],
        },
        model={"mea": {"weight": 0.5}, "cross_device": True},
        data={"val_split": "test"},
    )
    path = tmp_path / "fit.yaml"
    path.write_text(yaml.safe_dump(config))
    env = clean_launch_env(str(ROOT / "tests"))
    done = run_cli(["fit", "--config", str(path)], ROOT, env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((record / f"rank{r}.json").read_text()) for r in range(2)]
    steps = [[row for row in rank["batches"]] for rank in ranks]
    assert len(steps[0]) == len(steps[1]) > 2
    for (step0, _, ids0), (step1, _, ids1) in zip(*steps):
        assert step0 == step1 and not set(ids0) & set(ids1)
    assert ranks[0]["val"] == ranks[1]["val"] and "t2v/R@1" in ranks[0]["val"]
    curves = json.loads((tmp_path / "run" / "logs" / "v" / "training_curves.json").read_text())
    assert curves["steps"] and all(math.isfinite(row["mea_theta"]) for row in curves["steps"])
