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
    from helpers.media import write_noise_video

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


# -- MSVD (CLIP4Clip's msvd_data.zip) ------------------------------------------------------------

MSVD_CAPTIONS = {
    "-4wsuPCjDBc_5_15": [["a", "man", "is", "cooking"], ["someone", "cooks", "food"]],
    "ab_cd_0_10": [["a", "dog", "runs"]],
    "zz9_3_7": [["a", "cat", "sleeps"]],
}
MSVD_LISTS = {"train": ["-4wsuPCjDBc_5_15", "ab_cd_0_10"], "val": [], "test": ["zz9_3_7"]}


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def msvd_dir(root: Path, captions: Any = None, **lists: list[str]) -> Path:
    """`raw-captions.pkl` (`captions`, default `MSVD_CAPTIONS`, pickled) and `{split}_list.txt` of
    each split (a keyword `train`/`val`/`test` replaces that list's clip names)."""
    import pickle

    root.mkdir(parents=True, exist_ok=True)
    (root / "raw-captions.pkl").write_bytes(pickle.dumps(MSVD_CAPTIONS if captions is None else captions))
    for split, names in MSVD_LISTS.items():
        write_lines(root / f"{split}_list.txt", lists.get(split, names))
    return root


# -- VATEX (the release's caption files, HGR's split lists) --------------------------------------


def vatex_clip(video_id: str, **changes: Any) -> dict:
    clip = {
        "videoID": video_id,
        "enCap": ["A man plays a guitar.", "Someone strums a guitar on a stage."],
        "chCap": ["一个男人在弹吉他。", "有人在舞台上弹吉他。"],
    }
    clip.update(changes)
    return clip


VATEX_LISTS = {
    "train": ["Ptf_2VRj-V0_000122_000132"],
    "val": ["abcdefghijk_000000_000010"],
    "test": ["0123456789A_000005_000015"],
}


def vatex_dir(root: Path, training: Any = None, validation: Any = None, **lists: list[str]) -> Path:
    """`vatex_training_v1.0.json` / `vatex_validation_v1.0.json` (lists of clips; `training` or
    `validation` replaces one) and the three split lists (`train`/`val`/`test` replaces one)."""
    root.mkdir(parents=True, exist_ok=True)
    default_training = [vatex_clip(v) for v in VATEX_LISTS["train"]]
    default_validation = [vatex_clip(v) for v in VATEX_LISTS["val"] + VATEX_LISTS["test"]]
    files = {"vatex_training_v1.0.json": training, "vatex_validation_v1.0.json": validation}
    defaults = {"vatex_training_v1.0.json": default_training, "vatex_validation_v1.0.json": default_validation}
    for name, data in files.items():
        (root / name).write_text(json.dumps(defaults[name] if data is None else data, ensure_ascii=False))
    for split, names in VATEX_LISTS.items():
        write_lines(root / f"{split}_list.txt", lists.get(split, names))
    return root


# -- LSMDC 2016 (tab-separated, six fields, no header) -------------------------------------------


def lsmdc_line(
    clip: str = "0001_American_Beauty_00.00.51.926-00.00.54.530",
    extracted: tuple[str, str] = ("00.00.51.926", "00.00.54.530"),
    sentence: str = "SOMEONE opens the door.",
) -> str:
    """One line: CLIP_ID, START/END_ALIGNED (the clip id's stamps), START/END_EXTRACTED, SENTENCE."""
    aligned = clip.rsplit("_", 1)[-1].split("-") if "-" in clip else ["", ""]
    return "\t".join([clip, *aligned, *extracted, sentence])


LSMDC_TEST_CLIP = "0002_Forrest_Gump_00.10.02.000-00.10.03.250"


def lsmdc_dir(root: Path, train: list[str] | None = None, test: list[str] | None = None) -> Path:
    """The training file and the 1,000-clip public test file (`train`/`test` replace their lines)."""
    root.mkdir(parents=True, exist_ok=True)
    default_train = [lsmdc_line(), lsmdc_line(sentence="He looks around.")]
    default_test = [lsmdc_line(LSMDC_TEST_CLIP, ("00.10.01.625", "00.10.03.625"), "SOMEONE smiles.")]
    write_lines(root / "LSMDC16_annos_training.csv", default_train if train is None else train)
    write_lines(root / "LSMDC16_challenge_1000_publictect.csv", default_test if test is None else test)
    return root


# -- Charades (Charades-STA sentences, Charades' lengths) ----------------------------------------

CHARADES_HEADER = ["id", "subject", "scene", "quality", "relevance", "verified", "script", "objects"]
CHARADES_HEADER += ["descriptions", "actions", "length"]


def charades_row(video: str, length: str) -> list[str]:
    """One row of `Charades_v1_*.csv` (every column of the release; only `id` and `length` are read)."""
    script = "A person walks in and sits on a chair."
    return [video, "HR43", "Living room", "7", "7", "Yes", script, "chair", script, "c059 5.40 12.00", length]


CHARADES_FILES = {
    "charades_sta_train.txt": ["ZZXQF 0.0 8.2##a person walks into the room.", "ZZXQF 5.4 12.0##person sits down."],
    "charades_sta_test.txt": ["AO8RW 0.0 6.9##a person is putting a book on a shelf."],
}
CHARADES_LENGTHS = {"Charades_v1_train.csv": [charades_row("ZZXQF", "30.96")]}
CHARADES_LENGTHS["Charades_v1_test.csv"] = [charades_row("AO8RW", "33.67")]


def charades_dir(
    root: Path,
    train: list[str] | None = None,
    test: list[str] | None = None,
    train_lengths: list[list[str]] | None = None,
) -> Path:
    """The two STA files (`train`/`test` replace their lines) and the two length CSVs
    (`train_lengths` replaces the training CSV's rows, header included)."""
    root.mkdir(parents=True, exist_ok=True)
    lines = {"charades_sta_train.txt": train, "charades_sta_test.txt": test}
    for name, default in CHARADES_FILES.items():
        write_lines(root / name, default if lines[name] is None else lines[name])
    lengths = {"Charades_v1_train.csv": train_lengths}
    for name, rows in CHARADES_LENGTHS.items():
        write_csv(root / name, lengths.get(name) or [CHARADES_HEADER, *rows])
    return root


# -- YouCook2 (youcookii_annotations_trainval.json) ----------------------------------------------


def youcook2_video(video: str, subset: str = "training", **changes: Any) -> dict:
    record = {
        "duration": 241.62,
        "subset": subset,
        "recipe_type": "113",
        "annotations": [
            {"segment": [90, 102], "id": 0, "sentence": "spread margarine on two slices of white bread"},
            {"segment": [114, 127], "id": 1, "sentence": "place a slice of cheese on the bread"},
        ],
        "video_url": f"https://www.youtube.com/watch?v={video}",
    }
    record.update(changes)
    return record


def youcook2_file(path: Path, database: Any = None) -> Path:
    """The trainval file: `{"database": database}` (default one training, one validation video)."""
    if database is None:
        database = {
            "GLd3aX16zBg": youcook2_video("GLd3aX16zBg"),
            "xHr8X2Wpmno": youcook2_video("xHr8X2Wpmno", "validation"),
        }
    path.write_text(json.dumps({"database": database}))
    return path
