"""Evaluation as the evaluation tests run it: a Lightning trainer that evaluates in this process, and
`lit-retrieval test` of the untrained tiny model on 1 or more gloo processes over a few corpus videos (some
of them undecodable), each rank's metrics recorded."""

from __future__ import annotations

import json
from pathlib import Path

import lightning as L
import yaml

from helpers.cli_server import run_cli
from helpers.fit_configs import clean_launch_env, clip_fit_config
from lit_retrieval.callbacks.metrics_report import MetricsReport

ROOT = Path(__file__).resolve().parents[2]


def eval_trainer(root):
    return L.Trainer(
        accelerator="cpu",
        default_root_dir=str(root),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[MetricsReport()],
    )


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
            "callbacks": [{"class_path": "helpers.stop_callbacks.RecordEvaluation", "init_args": {"out": str(out)}}],
        },
        model={"evaluation": evaluation},
        data={"annotation": str(annotation), "eval_batch_size": 2, "on_bad_video": "skip"},
    )
    path = tmp_path / f"test{devices}.yaml"
    path.write_text(yaml.safe_dump(config))
    done = run_cli(["test", "--config", str(path)], ROOT, clean_launch_env(str(ROOT / "tests")), timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(devices)]


test_metrics.__test__ = False  # a helper, not a test
