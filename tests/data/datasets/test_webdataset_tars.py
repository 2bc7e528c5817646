"""video2dataset's tars (`{key}.mp4`, `{key}.txt`, `{key}.json`) read by `WebDatasetTarsDataModule` and
converted once by `lit-retrieval shard`: the shards hold each clip's frames as PyAV samples them from the clip
file itself, with the tar's caption; a rerun extracts nothing twice."""

from __future__ import annotations

import io
import json
import tarfile

import yaml
from litdata import StreamingDataset

from helpers.media import write_noise_video
from lit_retrieval.commands import run_command
from lit_retrieval.data.media.video import SamplingSpec, sample_video


def write_tar(path, clips: dict[str, tuple[bytes, str, dict | None]]) -> None:
    with tarfile.open(path, "w") as tar:
        for key, (mp4, caption, meta) in clips.items():
            files = {f"{key}.mp4": mp4, f"{key}.txt": caption.encode()}
            if meta is not None:
                files[f"{key}.json"] = json.dumps(meta).encode()
            for name, data in files.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def test_tars_converted_by_shard_hold_each_clips_frames_and_caption(tmp_path):
    clips = {}
    for seed, key in enumerate(("000000", "000001", "000002")):
        source = write_noise_video(tmp_path / f"src{seed}.mp4", 1.5 + seed * 0.5, seed=seed)
        meta = None if seed == 1 else {"url": f"http://x/{key}", "duration": 1.5 + seed * 0.5}
        clips[key] = (source.read_bytes(), f"clip {seed} of a dog", meta)
    (tmp_path / "tars").mkdir()
    write_tar(tmp_path / "tars" / "00000.tar", dict(list(clips.items())[:2]))
    write_tar(tmp_path / "tars" / "00001.tar", dict(list(clips.items())[2:]))
    data = {
        "tars": {"train": str(tmp_path / "tars" / "*.tar"), "test": str(tmp_path / "tars" / "00001.tar")},
        "num_frames": 3,
        "image_size": 16,
        "allow_split_overlap": True,
    }
    config = {"model": {"class_path": "lightning.pytorch.demos.boring_classes.BoringModel"}}
    config["data"] = {"class_path": "lit_retrieval.data.WebDatasetTarsDataModule", "init_args": data}
    (tmp_path / "tars.yaml").write_text(yaml.safe_dump(config))
    argv = ["--config", str(tmp_path / "tars.yaml"), "--out", str(tmp_path / "shards"), "--splits", "train"]
    assert run_command("shard", argv) == 0
    stored = StreamingDataset(str(tmp_path / "shards" / "train"))
    assert len(stored) == 3
    for i, (key, (mp4, caption, _)) in enumerate(clips.items()):
        (tmp_path / f"clip{i}.mp4").write_bytes(mp4)
        want = sample_video(tmp_path / f"clip{i}.mp4", SamplingSpec(3, 16))
        sample = stored[i]
        assert sample["video_id"] == f"{'00000' if i < 2 else '00001'}/{key}"
        assert json.loads(sample["events"]) == [caption]
        assert (sample["frames"] == want.frames).all()
    extracted = sorted(p.relative_to(tmp_path) for p in (tmp_path / "tars" / "extracted").rglob("*.mp4"))
    assert [str(p) for p in extracted] == [
        "tars/extracted/00000/000000.mp4",
        "tars/extracted/00000/000001.mp4",
        "tars/extracted/00001/000002.mp4",
    ]
