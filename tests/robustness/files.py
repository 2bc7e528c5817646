"""Writers of small, valid inputs for every annotation format and entry point; the robustness cases
and the fuzzers break them one way at a time. Layouts follow each parser's module docstring."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import yaml

BORING_MODEL = "lightning.pytorch.demos.boring_classes.BoringModel"  # no encoder: the data side fails first

# -- canonical multi-event format --------------------------------------------------------------


def canonical_video(video_id: str = "v1", split: str = "train", **changes: Any) -> dict:
    video = {
        "video_id": video_id,
        "path": f"{video_id}.mp4",
        "duration": 10.0,
        "split": split,
        "events": [
            {"description": "a dog runs", "start": 0.0, "end": 5.0},
            {"description": "it sits", "start": 5.0, "end": 10.0},
        ],
    }
    video.update(changes)
    return video


def canonical_file(path: Path, videos: Any = None, **top: Any) -> Path:
    data = {"format": "lit-retrieval/multi-event", "version": 1}
    data["videos"] = [canonical_video("v1"), canonical_video("v2", "test")] if videos is None else videos
    data.update(top)
    path.write_text(json.dumps(data))
    return path


# -- MELON -------------------------------------------------------------------------------------


def melon_record(video_id: str = "yt1", split: str = "train", **changes: Any) -> dict:
    record = {
        "video_id": video_id,
        "duration": "02:00",
        "split": split,
        "events": [
            {"Theme": "Sports", "Description": "a man kicks", "Timestamp": "00:00 - 00:40"},
            {"Theme": "Sports", "Description": "he scores", "Timestamp": "00:40 - 01:30"},
        ],
    }
    record.update(changes)
    return record


# -- ActivityNet Captions ------------------------------------------------------------------------


def activitynet_video(**changes: Any) -> dict:
    video = {"duration": 30.0, "timestamps": [[0.0, 10.0], [10.0, 30.0]], "sentences": ["A man walks.", "He sits."]}
    video.update(changes)
    return video


def activitynet_dir(root: Path, train: Any = None, test: Any = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "train.json").write_text(json.dumps({"v_a": activitynet_video()} if train is None else train))
    (root / "val_1.json").write_text(json.dumps({"v_b": activitynet_video()} if test is None else test))
    return root


# -- DiDeMo ------------------------------------------------------------------------------------


def didemo_moment(annotation_id: int = 1, video: str = "a.mp4", **changes: Any) -> dict:
    moment = {
        "annotation_id": annotation_id,
        "description": "a dog jumps",
        "video": video,
        "times": [[0, 1], [0, 2]],
        "num_segments": 6,
    }
    moment.update(changes)
    return moment


def didemo_dir(root: Path, train: Any = None, test: Any = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "train_data.json").write_text(json.dumps([didemo_moment(1, "a.mp4")] if train is None else train))
    (root / "test_data.json").write_text(json.dumps([didemo_moment(2, "b.mp4")] if test is None else test))
    return root


DIDEMO_SPLITS = {"train": "train_data.json", "test": "test_data.json"}

# -- Condensed Movies --------------------------------------------------------------------------

CMD_TABLES = {
    "clips.csv": [["videoid", "upload_year", "imdbid"], ["c1", "2011.0", "tt1"], ["c2", "2012.0", "tt2"]],
    "descriptions.csv": [
        ["imdbid", "videoid", "description"],
        ["tt1", "c1", "A man opens a door."],
        ["tt2", "c2", "A car drives."],
    ],
    "durations.csv": [["videoid", "duration"], ["c1", "120.5"], ["c2", "98.0"]],
    "split.csv": [["imdbid", "split"], ["tt1", "train"], ["tt2", "test"]],
}


def write_csv(path: Path, rows: list[list[str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)
    return path


def cmd_dir(root: Path, **tables: list[list[str]]) -> Path:
    """The four metadata CSVs; a keyword (`clips`, `durations`, ...) replaces that table's rows."""
    root.mkdir(parents=True, exist_ok=True)
    for name, rows in CMD_TABLES.items():
        write_csv(root / name, tables.get(name.removesuffix(".csv"), rows))
    return root


# -- MSR-VTT -----------------------------------------------------------------------------------


def msrvtt_data(videos: Any = None, sentences: Any = None) -> dict:
    return {
        "videos": [{"video_id": f"video{i}", "start time": 1.0, "end time": 11.0} for i in range(4)]
        if videos is None
        else videos,
        "sentences": [{"video_id": f"video{i}", "caption": f"caption {i}"} for i in range(4)]
        if sentences is None
        else sentences,
    }


def msrvtt_dir(
    root: Path, data: Any = None, train: list[list[str]] | None = None, test: list[list[str]] | None = None
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "MSRVTT_data.json").write_text(json.dumps(msrvtt_data() if data is None else data))
    write_csv(root / "MSRVTT_train.9k.csv", train or [["video_id"], ["video0"], ["video1"], ["video2"]])
    write_csv(
        root / "MSRVTT_JSFUSION_test.csv",
        test or [["key", "vid_key", "video_id", "sentence"], ["ret0", "msr3", "video3", "a cat"]],
    )
    return root


# -- configs -----------------------------------------------------------------------------------


def fit_config(path: Path, data_class: str, init_args: dict, **trainer: Any) -> Path:
    """A `fit` config of a BoringModel on `data_class` (the data module is what is exercised)."""
    config = {
        "seed_everything": 0,
        "model": {"class_path": BORING_MODEL},
        "data": {"class_path": f"lit_retrieval.data.{data_class}", "init_args": init_args},
        "trainer": {
            "accelerator": "cpu",
            "devices": 1,
            "logger": False,
            "enable_checkpointing": False,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "max_epochs": 1,
            "limit_train_batches": 1,
            "limit_val_batches": 0,
            **trainer,
        },
    }
    path.write_text(yaml.safe_dump(config))
    return path
