"""Video index: exact top-k round trip, IVF/HNSW, resume after an interrupted run, undecodable
videos listed, and refusal of an index built by another model or settings."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from lit_retrieval.commands import run_command
from lit_retrieval.data.items import MediaItem
from lit_retrieval.errors import UsageError
from lit_retrieval.search.index import (
    IndexMismatch,
    IndexConfig,
    VideoIndex,
    build_video_index,
    list_videos,
    make_index,
)
from lit_retrieval.search.loading import ModelSpec
from helpers.media import write_noise_video
from helpers.known_vectors import KnownVectors


@pytest.fixture()
def videos(tmp_path):
    folder = tmp_path / "videos"
    folder.mkdir()
    for i in range(7):
        write_noise_video(folder / f"clip{i}.mp4", seconds=1, seed=i)
    (folder / "broken.mp4").write_bytes(b"\x00" * 64)
    (folder / "notes.txt").write_text("not a video")
    return folder


SPEC = ModelSpec(model="/nowhere/model")


def test_round_trip_returns_the_exact_top_k(tmp_path, videos):
    embedder = KnownVectors()
    paths = list_videos(videos)
    assert len(paths) == 8 and all(p.endswith(".mp4") for p in paths)
    meta = build_video_index(embedder, SPEC, paths, tmp_path / "idx", progress=False)
    assert meta["count"] == 7 and meta["failed"] == 1
    assert "broken.mp4" in next(iter(json.loads((tmp_path / "idx" / "failed.json").read_text())))
    index = VideoIndex.load(tmp_path / "idx")
    index.check(embedder)
    query = embedder.vector("clip3.mp4")[None] * 0.9 + embedder.vector("clip5.mp4")[None] * 0.1
    hits = index.search(query, k=3)[0]
    gallery = np.stack([embedder.vector(v.rsplit("/", 1)[-1]) for v in index.videos])
    order = np.argsort(-(gallery @ query[0]))[:3]
    assert [h[0] for h in hits] == [index.videos[j] for j in order] and hits[0][0].endswith("clip3.mp4")
    assert [h[1] for h in hits] == pytest.approx((gallery @ query[0])[order].tolist(), abs=1e-5)


def test_resume_after_an_interrupted_run_keeps_finished_chunks(tmp_path, videos):
    paths = list_videos(videos)
    with pytest.raises(KeyboardInterrupt):
        build_video_index(KnownVectors(fail_after=4), SPEC, paths, tmp_path / "idx", chunk=2, progress=False)
    # sorted: broken (fails, listed), clip0 | clip1, clip2 | clip3, crash at clip4: two finished chunks
    assert len(list((tmp_path / "idx" / "parts").glob("part-*.npy"))) == 2
    second = KnownVectors()
    meta = build_video_index(second, SPEC, paths, tmp_path / "idx", chunk=2, progress=False)
    assert [p.rsplit("/", 1)[-1] for p in second.embedded] == ["clip3.mp4", "clip4.mp4", "clip5.mp4", "clip6.mp4"]
    assert meta["count"] == 7 and meta["failed"] == 1
    assert sorted(VideoIndex.load(tmp_path / "idx").videos) == sorted(p for p in paths if "broken" not in p)


def test_index_of_another_model_is_refused(tmp_path, videos):
    build_video_index(KnownVectors(), SPEC, list_videos(videos), tmp_path / "idx", progress=False)
    with pytest.raises(IndexMismatch, match="another model or with other settings"):
        VideoIndex.load(tmp_path / "idx").check(KnownVectors(fingerprint="other"))
    with pytest.raises(IndexMismatch, match="embeddings of another model"):
        build_video_index(
            KnownVectors(fingerprint="other"), SPEC, list_videos(videos), tmp_path / "idx", progress=False
        )


def test_query_model_of_another_dimension_is_refused(tmp_path, videos):
    """Same fingerprint, but the query model embeds 12 numbers where the index holds 8: refused at
    load, before faiss would assert on the first query."""
    build_video_index(KnownVectors(), SPEC, list_videos(videos), tmp_path / "idx", progress=False)
    index = VideoIndex.load(tmp_path / "idx")
    index.check(KnownVectors())  # the model that built it
    with pytest.raises(IndexMismatch, match="holds 8-dimensional vectors, the query model embeds 12"):
        index.check(KnownVectors(dim=12))


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_approximate_indexes_find_near_duplicates(kind):
    rng = np.random.default_rng(0)
    base = rng.standard_normal((2000, 32)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    index = make_index(base, IndexConfig(kind=kind, nlist=16, nprobe=16))
    noisy = base[:50] + 0.01 * rng.standard_normal((50, 32)).astype(np.float32)
    _, found = index.search(noisy, 1)
    assert (found[:, 0] == np.arange(50)).mean() >= 0.98


def test_index_and_search_commands_with_a_tiny_gve(tmp_path, tiny_qwen, videos, capsys):
    shutil.copytree(tiny_qwen, tmp_path / "model")
    assert (
        run_command(
            "index", ["--model", str(tmp_path / "model"), "--videos", str(videos), "--out", str(tmp_path / "idx")]
        )
        == 0
    )
    assert (
        run_command(
            "search", [str(tmp_path / "idx"), "noise", "--event", "first", "--event", "second", "-k", "3", "--json"]
        )
        == 0
    )
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [line["query"] for line in lines] == ["noise", "first second"] and all(
        len(line["results"]) == 3 for line in lines
    )
    from lit_retrieval.search.loading import load_item_embedder

    embedder = load_item_embedder(ModelSpec(model=str(tmp_path / "model")))
    index = VideoIndex.load(tmp_path / "idx")
    brute = embedder.embed([MediaItem(text="noise")]) @ embedder.embed([MediaItem(video=v) for v in index.videos]).t()
    assert [r["video"] for r in lines[0]["results"]] == [
        index.videos[j] for j in brute[0].argsort(descending=True)[:3].tolist()
    ]
    shutil.copytree(tiny_qwen, tmp_path / "other")
    with pytest.raises(UsageError, match="built with"):
        run_command("search", [str(tmp_path / "idx"), "noise", "--model", str(tmp_path / "other")])
    (tmp_path / "model" / "config.json").touch()  # the model changed since indexing
    with pytest.raises(IndexMismatch, match="another model or with other settings"):
        run_command("search", [str(tmp_path / "idx"), "noise"])


def test_array_shards_embed_apart_then_one_run_builds_the_index(tmp_path, videos):
    paths = list_videos(videos)
    embedders = [KnownVectors() for _ in range(3)]
    for k, embedder in enumerate(embedders):
        assert (
            build_video_index(embedder, SPEC, paths, tmp_path / "idx", shard=(k, 3), embed_only=True, progress=False)
            is None
        )
    assert sorted(v for e in embedders for v in e.embedded) == sorted(p for p in paths if "broken" not in p)
    assert len({tuple(e.embedded) for e in embedders}) == 3  # each shard did its own share
    final = KnownVectors()
    meta = build_video_index(final, SPEC, paths, tmp_path / "idx", progress=False)
    assert final.embedded == [] and meta["count"] == 7 and meta["failed"] == 1
