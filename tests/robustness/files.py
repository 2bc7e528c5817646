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


def fit_config(path: Path, data_class: str, init_args: dict, model: dict | None = None, **trainer: Any) -> Path:
    """A `fit` config of `model` (default a BoringModel: the data module is what is exercised) on
    `data_class`."""
    config = {
        "seed_everything": 0,
        "model": model or {"class_path": BORING_MODEL},
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


def dual_encoder(clip: str, head: str = "MeanPHead") -> dict:
    """The model section of a CLIP dual encoder with `head` on the saved CLIP folder `clip`."""
    return {
        "class_path": "lit_retrieval.modules.DualEncoderRetrieval",
        "init_args": {
            "encoder": {"class_path": "lit_retrieval.models.encoders.CLIPEncoder", "init_args": {"pretrained": clip}},
            "head": {"class_path": f"lit_retrieval.models.heads.{head}"},
        },
    }


# -- frame cache (MultiEventDataModule's frame_cache) ---------------------------------------------

CACHE_FRAMES, CACHE_SIZE = 2, 16


def cached_corpus(root: Path) -> dict:
    """Two real videos (v1 for training, v2 for testing), their annotation and a raw frame cache of
    both in `root/cache` (v1's frames first); returns the data module's init args reading it."""
    from media import write_noise_video

    from lit_retrieval.data.batching.dataset import MultiEventDataset
    from lit_retrieval.data.media.frame_cache import CacheJob, CacheWriter
    from lit_retrieval.data.media.identity import file_version
    from lit_retrieval.data.media.video import SamplingSpec, sample_video

    events = [{"description": "x", "start": 0, "end": 1}]
    videos = [
        canonical_video("v1", duration=2.0, events=events),
        canonical_video("v2", "test", duration=2.0, events=events),
    ]
    spec = SamplingSpec(CACHE_FRAMES, CACHE_SIZE)
    writer = CacheWriter(root / "cache", MultiEventDataset.cache_params(spec, False))
    for seed, name in enumerate(("v1", "v2")):
        path = write_noise_video(root / f"{name}.mp4", 2.0, seed=seed)
        writer.add(CacheJob(str(path)), file_version(path), sample_video(path, spec))
    return {
        "annotation": str(canonical_file(root / "ann.json", videos=videos)),
        "num_frames": CACHE_FRAMES,
        "image_size": CACHE_SIZE,
        "batch_size": 1,
        "frame_cache": str(root / "cache"),
    }


# -- index folder (lit-retrieval index) -----------------------------------------------------------


def index_dir(
    root: Path,
    count: int = 3,
    dim: int = 4,
    videos: Any = None,
    model: Any = "/models/m",
    meta_dim: int | None = None,
    **meta: Any,
) -> Path:
    """An index folder as `lit-retrieval index` writes it: `count` random `dim`-vectors in a flat
    faiss index, `videos.json` (default one path per vector) and `meta.json` (its `dim` is
    `meta_dim`, default `dim`; `model` a model folder or what `model` holds instead; keys in `meta`
    replace or, given `None`, drop its fields)."""
    import faiss
    import numpy as np

    root.mkdir(parents=True, exist_ok=True)
    index = faiss.IndexFlatIP(dim)
    index.add(np.random.default_rng(0).standard_normal((count, dim)).astype("float32"))
    faiss.write_index(index, str(root / "index.faiss"))
    listed = [f"/videos/v{i}.mp4" for i in range(count)] if videos is None else videos
    (root / "videos.json").write_text(json.dumps(listed))
    fields = {
        "fingerprint": "0123abcd",
        "model": {"model": model, "config": None, "ckpt": None, "device": "cpu", "sampling": "exact"}
        if isinstance(model, str)
        else model,
        "settings": {"kind": "flat"},
        "dim": dim if meta_dim is None else meta_dim,
        "count": len(listed),
        "failed": 0,
    }
    fields.update(meta)
    (root / "meta.json").write_text(json.dumps({k: v for k, v in fields.items() if v is not None}))
    return root
