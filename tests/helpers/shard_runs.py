"""Shard folders of the test corpus (`lit-retrieval shard` as users run it) and the items a source data
module gives, to compare the streamed items with."""

from __future__ import annotations

from pathlib import Path

import torch
import yaml

from lit_retrieval.commands import run_command

FRAMES, SIZE = 2, 32


def data_config(corpus: Path, **data) -> dict:
    return {
        "class_path": "lit_retrieval.data.MultiEventDataModule",
        "init_args": {"annotation": str(corpus / "annotations.json"), "num_frames": FRAMES, "image_size": SIZE, **data},
    }


def shard_config(corpus: Path, path: Path, **data) -> Path:
    config = {
        "model": {
            "class_path": "lit_retrieval.modules.DualEncoderRetrieval",
            "init_args": {
                "encoder": {"class_path": "lit_retrieval.models.encoders.CLIPEncoder", "init_args": {}},
                "head": {"class_path": "lit_retrieval.models.heads.MeanPHead"},
            },
        },
        "data": data_config(corpus, **data),
    }
    path.write_text(yaml.safe_dump(config))
    return path


def shard(corpus: Path, out: Path, *extra: str, **data) -> int:
    config = shard_config(corpus, out.parent / f"{out.name}.yaml", **data)
    return run_command("shard", ["--config", str(config), "--out", str(out), *extra])


def assert_same_item(got: dict, want: dict) -> None:
    assert got["index"] == want["index"] and got["video_id"] == want["video_id"]
    assert got["events"] == want["events"] and got["duration"] == want["duration"]
    for key in ("frames", "frame_mask", "frame_times"):
        assert torch.equal(torch.as_tensor(got[key]), torch.as_tensor(want[key])), key


def folder_bytes(folder: Path) -> dict[str, bytes]:
    """Every file of a shard folder but the lock and litdata's `updated_at` stamp in the index."""
    import json

    out = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")):
        data = path.read_bytes()
        if path.name == "index.json":
            content = json.loads(data)
            content.pop("updated_at", None)
            data = json.dumps(content, sort_keys=True).encode()
        out[str(path.relative_to(folder))] = data
    return out
