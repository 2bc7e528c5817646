"""Frame cache (`lit-retrieval cache-frames` + `data.init_args.frame_cache`): frames read back equal
the frames decoded on the fly (real mp4 files written with PyAV: VFR with B-frames, an offset start,
constant rate), mismatched parameters are refused, changed videos, frames cut short and unreadable
index lines are named and decoded again, an interrupted run (also by a full disk) resumes to the same
bytes, array shards merge, undecodable videos follow `on_bad_video`, JPEG costs a bounded PSNR,
and GVE's clips read from the cache equal its own sampling."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from lit_retrieval.commands import run_command
from lit_retrieval.data import MultiEventDataModule
from lit_retrieval.data.media.frame_cache import (
    CacheJob,
    CacheWriter,
    CorruptFrameCache,
    FrameCache,
    FrameCacheMismatch,
    StaleCacheEntry,
)
from lit_retrieval.data.media.video import VideoDecodeError
from helpers.media import write_noise_video, write_timed_video

FRAMES, SIZE = 6, 24


def _record(video_id: str, split: str, duration: float) -> dict:
    events = [
        {
            "event_id": f"{video_id}-e{k}",
            "theme": "",
            "description": f"event {k} of {video_id}",
            "start": k,
            "end": k + 1.0,
            "intervals": [[k, k + 1.0]],
        }
        for k in range(2)
    ]
    return {
        "video_id": video_id,
        "path": f"videos/{video_id}.mp4",
        "duration": duration,
        "split": split,
        "events": events,
    }


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Five real videos (VFR + B-frames, offset start, two constant-rate) and one that is not a video."""
    root = tmp_path_factory.mktemp("frame_cache")
    (root / "videos").mkdir()
    gaps = np.random.default_rng(5).choice([40, 100, 900], size=29, p=[0.45, 0.45, 0.1])
    write_timed_video(root / "videos/vfr.mp4", [0] + np.cumsum(gaps).tolist(), bframes=2)
    write_timed_video(root / "videos/offset.mp4", [10_000 + 100 * k for k in range(30)], gop=6)
    write_noise_video(root / "videos/noise_a.mp4", seconds=3, seed=1)
    write_noise_video(root / "videos/noise_b.mp4", seconds=4, width=40, height=56, seed=2)
    (root / "videos/broken.mp4").write_bytes(b"not a video" * 50)
    records = [
        _record("vfr", "train", 4.0),
        _record("offset", "train", 3.0),
        _record("noise_a", "train", 3.0),
        _record("noise_b", "test", 4.0),
        _record("broken", "test", 2.0),
    ]
    (root / "annotations.json").write_text(
        json.dumps({"format": "lit-retrieval/multi-event", "version": 1, "videos": records})
    )
    return root


def _config(corpus: Path, out: Path, **data) -> Path:
    config = {
        "model": {
            "class_path": "lit_retrieval.modules.DualEncoderRetrieval",
            "init_args": {
                "encoder": {"class_path": "lit_retrieval.models.encoders.CLIPEncoder", "init_args": {}},
                "head": {"class_path": "lit_retrieval.models.heads.MeanPHead"},
            },
        },
        "data": {
            "class_path": "lit_retrieval.data.MultiEventDataModule",
            "init_args": {
                "annotation": str(corpus / "annotations.json"),
                "num_frames": FRAMES,
                "image_size": SIZE,
                "on_bad_video": "skip",
                **data,
            },
        },
    }
    path = out.with_suffix(".yaml")
    path.write_text(yaml.safe_dump(config))
    return path


def _cache(corpus: Path, out: Path, *extra: str, **data) -> int:
    return run_command("cache-frames", ["--config", str(_config(corpus, out, **data)), "--out", str(out), *extra])


def _module(corpus: Path, **kwargs) -> MultiEventDataModule:
    module = MultiEventDataModule(
        str(corpus / "annotations.json"), num_frames=FRAMES, image_size=SIZE, on_bad_video="skip", **kwargs
    )
    module.setup()
    return module


def _items(module: MultiEventDataModule, role: str) -> list[dict]:
    dataset = module.datasets[role]
    return [dataset[i] for i in range(len(dataset))]


@pytest.fixture(scope="module")
def raw_cache(corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("caches") / "raw"
    assert _cache(corpus, out) == 0  # one undecodable video under on_bad_video: skip
    return out


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("shard-*"))} | {
        "cache.json": (folder / "cache.json").read_bytes()
    }


def test_cached_frames_equal_decoded_frames(corpus, raw_cache):
    plain, cached = _module(corpus), _module(corpus, frame_cache=str(raw_cache))
    assert len(cached.datasets["train"].frame_cache) == 5
    for role in ("train", "test"):
        for want, got in zip(_items(plain, role), _items(cached, role), strict=True):
            assert want.keys() == got.keys()
            for key in want:
                if isinstance(want[key], torch.Tensor):
                    assert np.array_equal(
                        want[key].numpy(), got[key].numpy(), equal_nan=want[key].is_floating_point()
                    ), key
                else:
                    assert want[key] == got[key], key


def test_undecodable_video_is_listed_and_follows_on_bad_video(corpus, raw_cache):
    listed = (raw_cache / "shard-00000-of-00001.failed.txt").read_text().splitlines()
    assert [line.split("\t")[0] for line in listed] == [str(corpus / "videos/broken.mp4")]
    skipped = _items(_module(corpus, frame_cache=str(raw_cache)), "test")
    assert [("error" in item) for item in skipped] == [False, True]  # noise_b, then broken, as annotated
    strict = MultiEventDataModule(
        str(corpus / "annotations.json"), num_frames=FRAMES, image_size=SIZE, frame_cache=str(raw_cache)
    )
    strict.setup()
    with pytest.raises(VideoDecodeError, match="broken.mp4"):
        [strict.datasets["test"][i] for i in range(2)]


def test_other_sampling_parameters_are_refused(corpus, raw_cache):
    with pytest.raises(FrameCacheMismatch, match=r"num_frames=6 \(wanted 8\)"):
        MultiEventDataModule(
            str(corpus / "annotations.json"), num_frames=8, image_size=SIZE, frame_cache=str(raw_cache)
        ).setup()
    with pytest.raises(FrameCacheMismatch, match=r"sampling='exact' \(wanted 'keyframe'\)"):
        _module(corpus, frame_cache=str(raw_cache), sampling="keyframe")
    with pytest.raises(FrameCacheMismatch, match="trim_to_annotation"):
        _module(corpus, frame_cache=str(raw_cache), trim_to_annotation=True)
    header = json.loads((raw_cache / "cache.json").read_text())
    assert header["version"] == 1 and header["format"] == "raw" and header["sampling"]["num_frames"] == FRAMES


def _two_videos(root: Path) -> Path:
    """`root` with noise_a (train) and noise_b (test) as fresh files (changed later by the tests)."""
    (root / "videos").mkdir()
    write_noise_video(root / "videos/noise_a.mp4", seconds=3, seed=1)
    write_noise_video(root / "videos/noise_b.mp4", seconds=4, width=40, height=56, seed=2)
    records = [_record("noise_a", "train", 3.0), _record("noise_b", "test", 4.0)]
    (root / "annotations.json").write_text(
        json.dumps({"format": "lit-retrieval/multi-event", "version": 1, "videos": records})
    )
    return root


def _decoded(root: Path, name: str) -> np.ndarray:
    from lit_retrieval.data.media.video import SamplingSpec, sample_video

    return sample_video(root / f"videos/{name}.mp4", SamplingSpec(FRAMES, SIZE)).frames


def _cached(root: Path, cache: Path, name: str, **kwargs) -> np.ndarray:
    cached = FrameCache(cache, json.loads((cache / "cache.json").read_text())["sampling"])
    return cached.get(root / f"videos/{name}.mp4", **kwargs).frames


def test_changed_video_is_named_skipped_and_decoded_again(tmp_path, capsys):
    root = _two_videos(tmp_path)
    assert _cache(root, tmp_path / "cache") == 0
    write_noise_video(root / "videos/noise_a.mp4", seconds=3, seed=9)  # new content, same name
    skipped = _module(root, frame_cache=str(tmp_path / "cache")).datasets["train"][0]  # on_bad_video: skip
    assert "noise_a.mp4: changed since it was cached" in skipped["error"] and "frames" not in skipped
    strict = MultiEventDataModule(
        str(root / "annotations.json"), num_frames=FRAMES, image_size=SIZE, frame_cache=str(tmp_path / "cache")
    )
    strict.setup()
    with pytest.raises(StaleCacheEntry, match=r"noise_a.mp4: changed since it was cached .*rerun lit-retrieval"):
        strict.datasets["train"][0]
    capsys.readouterr()
    assert _cache(root, tmp_path / "cache") == 0
    out = capsys.readouterr().out
    assert f"{root}/videos/noise_a.mp4: changed since it was cached" in out
    assert "(1 already cached, 1 decoded, 1 stale or unreadable entries dropped, 0 failed)" in out
    assert np.array_equal(_cached(root, tmp_path / "cache", "noise_a"), _decoded(root, "noise_a"))
    assert len(FrameCache(tmp_path / "cache", json.loads((tmp_path / "cache/cache.json").read_text())["sampling"])) == 2


def test_frames_cut_short_are_never_read_and_are_decoded_again(tmp_path, capsys):
    root = _two_videos(tmp_path)
    cache = tmp_path / "cache"
    assert _cache(root, cache) == 0
    whole = _files(cache)
    first = json.loads(whole["shard-00000-of-00001.index.jsonl"].splitlines()[0])
    assert first["video"].endswith("noise_a.mp4")
    with open(cache / "shard-00000-of-00001.frames", "r+b") as handle:
        handle.truncate(first["lengths"][0] + 100)  # noise_b's frames, the second, cut short
    item = _module(root, frame_cache=str(cache)).datasets["test"][0]  # on_bad_video: skip
    assert "cut short" in item["error"] and "noise_b.mp4" in item["error"] and "frames" not in item
    capsys.readouterr()
    assert _cache(root, cache) == 0
    out = capsys.readouterr().out
    assert "noise_b.mp4: its frames in" in out and "cut short" in out
    assert "(1 already cached, 1 decoded," in out  # not "2 already cached"
    assert _files(cache) == whole  # the same bytes as the first run


def test_unreadable_index_line_is_named_then_dropped_and_decoded_again(tmp_path, capsys):
    root = _two_videos(tmp_path)
    cache = tmp_path / "cache"
    assert _cache(root, cache) == 0
    whole = _files(cache)
    index = cache / "shard-00000-of-00001.index.jsonl"
    lines = whole["shard-00000-of-00001.index.jsonl"].splitlines(keepends=True)
    index.write_bytes(lines[0] + b'{"video": "x", "garbage\n')
    with pytest.raises(CorruptFrameCache, match=r"index.jsonl: line 2: not valid JSON"):
        _module(root, frame_cache=str(cache))
    capsys.readouterr()
    assert _cache(root, cache) == 0
    assert "index.jsonl: line 2: not valid JSON" in capsys.readouterr().out
    assert _files(cache) == whole


def test_cache_frames_writes_the_configs_own_frame_cache(tmp_path):
    root = _two_videos(tmp_path)
    config = _config(root, tmp_path / "train", frame_cache=str(tmp_path / "cache"))
    assert run_command("cache-frames", ["--config", str(config)]) == 0  # no --out: the cache does not exist yet
    assert np.array_equal(_cached(root, tmp_path / "cache", "noise_b"), _decoded(root, "noise_b"))


@pytest.fixture()
def small_disk(tmp_path, monkeypatch):
    """A folder on a 48 KiB tmpfs (real ENOSPC), and how to make room; where mounting is not
    allowed, an ordinary folder whose frame writes fail with ENOSPC (fsync) until room is made."""
    import errno
    import subprocess

    folder = tmp_path / "disk"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48k", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode == 0:
        yield folder, lambda: subprocess.run(["mount", "-o", "remount,size=4m", str(folder)], check=True)
        subprocess.run(["umount", str(folder)], check=True)
        return
    import lit_retrieval.data.media.frame_cache as frame_cache

    calls = []

    def full(fd):
        calls.append(fd)
        if len(calls) > 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(frame_cache.os, "fsync", full)
    yield folder, monkeypatch.undo


def test_full_disk_is_one_line_and_the_rerun_after_making_room_is_complete(
    corpus, raw_cache, small_disk, capsys, monkeypatch
):
    from lit_retrieval.cli import main

    folder, make_room = small_disk
    out = folder / "cache"
    config = _config(corpus, folder / "train")
    monkeypatch.delenv("LIT_RETRIEVAL_DEBUG", raising=False)
    with pytest.raises(SystemExit) as finished:
        main(["cache-frames", "--config", str(config), "--out", str(out)])
    err = capsys.readouterr().err
    assert finished.value.code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        f"lit-retrieval cache-frames: {out}: No space left on device; the videos cached so far are kept: "
        "make room and rerun lit-retrieval cache-frames to continue"
    )
    assert 0 < len((out / "shard-00000-of-00001.index.jsonl").read_bytes().splitlines()) < 5
    make_room()
    assert run_command("cache-frames", ["--config", str(config), "--out", str(out)]) == 0
    assert _files(out) == _files(raw_cache)


def test_missing_video_is_decoded_with_a_warning(corpus, tmp_path, caplog):
    assert _cache(corpus, tmp_path / "train_only", "--splits", "train") == 0
    cached = _module(corpus, frame_cache=str(tmp_path / "train_only"))
    with caplog.at_level(logging.WARNING, logger="lit_retrieval.data.media.frame_cache"):
        item = cached.datasets["test"][0]
    assert "has no entry for" in caplog.text and "noise_b.mp4" in caplog.text
    assert torch.equal(item["frames"], _module(corpus).datasets["test"][0]["frames"])


def test_interrupted_run_resumes_to_the_same_bytes(corpus, raw_cache, tmp_path):
    out = tmp_path / "resumed"
    whole = _files(raw_cache)
    # an interrupted writer: the first two videos indexed, a third half written (frames and a torn line)
    out.mkdir()
    (out / "cache.json").write_bytes(whole["cache.json"])
    index = whole["shard-00000-of-00001.index.jsonl"].splitlines(keepends=True)
    first_two = json.loads(index[1])
    end = first_two["offset"] + sum(first_two["lengths"])
    (out / "shard-00000-of-00001.index.jsonl").write_bytes(b"".join(index[:2]) + index[2][:40])
    (out / "shard-00000-of-00001.frames").write_bytes(whole["shard-00000-of-00001.frames"][: end + 1000])
    assert _cache(corpus, out) == 0
    assert _files(out) == whole


def test_array_shards_merge_without_a_step(corpus, raw_cache, tmp_path):
    out = tmp_path / "sharded"
    for shard in ("0", "1"):
        assert _cache(corpus, out, "--shard", shard, "--num-shards", "2") == 0
    assert sorted(p.name for p in out.glob("*.index.jsonl")) == [
        "shard-00000-of-00002.index.jsonl",
        "shard-00001-of-00002.index.jsonl",
    ]
    params = json.loads((raw_cache / "cache.json").read_text())["sampling"]
    merged, single = FrameCache(out, params), FrameCache(raw_cache, params)
    assert merged.entries.keys() == single.entries.keys()
    for video, start, end in single.entries:
        if "broken" not in video:
            assert np.array_equal(merged.get(video, start, end).frames, single.get(video, start, end).frames)


def test_jpeg_cache_states_its_quality_and_costs_bounded_psnr(corpus, tmp_path):
    assert _cache(corpus, tmp_path / "jpeg", "--format", "jpeg", "--quality", "95") == 0
    header = json.loads((tmp_path / "jpeg/cache.json").read_text())
    assert (header["format"], header["quality"]) == ("jpeg", 95)
    plain, cached = _module(corpus), _module(corpus, frame_cache=str(tmp_path / "jpeg"))
    dataset = cached.datasets["train"]
    for i in range(len(dataset)):
        path = str(corpus / dataset.records[i].path)
        want = _raw_frames(plain, i)
        got = dataset.frame_cache.get(path, None, None).frames.astype(float)
        mse = ((got - want) ** 2).mean()
        assert 0 < mse and 10 * np.log10(255**2 / mse) > 30  # lossy, but close


def _raw_frames(module: MultiEventDataModule, index: int) -> np.ndarray:
    from lit_retrieval.data.media.video import sample_video

    dataset = module.datasets["train"]
    return sample_video(dataset.video_root / dataset.records[index].path, dataset.spec).frames.astype(float)


def test_cache_writer_refuses_another_format_in_the_same_folder(raw_cache):
    params = json.loads((raw_cache / "cache.json").read_text())["sampling"]
    with pytest.raises(FrameCacheMismatch, match="format='raw' \\(wanted 'jpeg'\\)"):
        CacheWriter(raw_cache, params, "jpeg", 90)
    with pytest.raises(FrameCacheMismatch, match="image_size|size=24"):
        CacheWriter(raw_cache, {**params, "size": 32})
    assert CacheJob("a.mp4", None, 2.0).key == ("a.mp4", None, 2.0)


def test_gve_clips_from_the_cache_equal_its_sampling(corpus, tiny_qwen, tmp_path):
    from transformers import AutoProcessor

    from lit_retrieval.data.items import MediaItem
    from lit_retrieval.models.gve.processing import GVEProcessing, InputConfig

    videos = corpus / "videos"
    # a negative beyond num_negatives is never used, so not cached: offset.mp4 whole is read with the fallback
    lines = [
        {
            "query": {"video": str(videos / "offset.mp4"), "start": 0.5},
            "positive": {"video": str(videos / "vfr.mp4"), "start": 1.0, "end": 3.5},
            "negatives": [{"video": str(videos / "offset.mp4")}],
        },
        {
            "query": {"video": str(videos / "noise_a.mp4")},
            "positive": {"video": str(videos / "noise_b.mp4")},
            "negatives": [],
        },
    ]
    (tmp_path / "t2v.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    inputs = {"max_frames": 4, "video_min_pixels": 3136, "video_max_pixels": 3136}
    config = {
        "model": {
            "class_path": "lit_retrieval.modules.GVERetrieval",
            "init_args": {"embedder": {"model_path": str(tiny_qwen), "inputs": inputs}},
        },
        "data": {
            "class_path": "lit_retrieval.data.MultiTaskDataModule",
            "init_args": {
                "tasks": [{"name": "mixed", "path": str(tmp_path / "t2v.jsonl"), "format": "V->V", "num_negatives": 0}],
                "frame_cache": str(tmp_path / "gve_cache"),
            },
        },
    }
    (tmp_path / "gve.yaml").write_text(yaml.safe_dump(config))
    assert run_command("cache-frames", ["--config", str(tmp_path / "gve.yaml"), "--workers", "2"]) == 0
    processing = GVEProcessing(AutoProcessor.from_pretrained(str(tiny_qwen)), InputConfig(**inputs))
    cached = processing.with_frame_cache(str(tmp_path / "gve_cache"))
    assert len(cached.frame_cache) == 4 and processing.frame_cache is None
    items = [
        MediaItem(video=str(videos / "vfr.mp4"), start=1.0, end=3.5),
        MediaItem(video=str(videos / "offset.mp4")),
        MediaItem(video=str(videos / "offset.mp4"), start=0.5),
        MediaItem(video=str(videos / "noise_b.mp4")),
    ]
    for item in items:
        want, got = processing.load_video(item), cached.load_video(item)
        assert np.array_equal(want.frames, got.frames) and want.fps == got.fps
    other = GVEProcessing(AutoProcessor.from_pretrained(str(tiny_qwen)), InputConfig(**{**inputs, "max_frames": 8}))
    with pytest.raises(FrameCacheMismatch, match=r"max_frames=4 \(wanted 8\)"):
        other.with_frame_cache(str(tmp_path / "gve_cache"))


def test_normalisation_is_clips_formula():
    """The loader's normalisation (in place, the cache path's largest cost) is CLIP's
    (x / 255 - mean) / std per channel, computed here in float32 with NumPy."""
    from lit_retrieval.data.media.normalize import CLIP_MEAN, CLIP_STD, NormalizeFrames

    frames = np.random.default_rng(0).integers(0, 256, (3, 5, 7, 3), dtype=np.uint8)
    mean, std = np.float32(CLIP_MEAN), np.float32(CLIP_STD)
    want = ((frames.astype(np.float32) / np.float32(255.0) - mean) / std).transpose(0, 3, 1, 2)
    got = NormalizeFrames()(frames)
    assert got.shape == (3, 3, 5, 7) and got.is_contiguous()
    assert np.array_equal(got.numpy(), want)


def test_frames_normalised_on_the_device_equal_the_loaders(corpus, raw_cache):
    """`normalize_on_device`: uint8 frames through the loader, normalised after the transfer hook,
    equal the frames the loader normalises itself."""
    from lit_retrieval.data.batching.dataset import collate_items

    plain = _module(corpus)
    late = _module(corpus, frame_cache=str(raw_cache), normalize_on_device=True)
    items = _items(late, "train")
    assert all(item["frames"].dtype == torch.uint8 for item in items)
    batch = late.on_after_batch_transfer(collate_items(items), 0)
    assert torch.equal(batch["frames"], collate_items(_items(plain, "train"))["frames"])
