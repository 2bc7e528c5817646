"""faiss on the GPU through fakes of faiss-gpu's API (faiss-gpu is not installed here; issue 57, item 4):
`StandardGpuResources`, `get_num_gpus`, `index_cpu_to_gpu` (which raises for HNSW as faiss does:
it cannot clone HNSW to the GPU) and `index_gpu_to_cpu`; the fake GPU index runs faiss' CPU code and
refuses k above 2,048 as faiss' GPU search does. benchmarks/device_check.sh runs the real one."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.known_vectors import KnownVectors
from helpers.media import write_noise_video
from lit_retrieval.commands import run_command
from lit_retrieval.errors import UsageError
from lit_retrieval.faiss_library import faiss
from lit_retrieval.search.index import GPU_MAX_K, IndexConfig, VideoIndex, build_video_index, list_videos, make_index
from lit_retrieval.search.loading import ModelSpec


class GpuIndexFake:
    """An index 'on the GPU': faiss' CPU index inside, its train/add calls recorded."""

    def __init__(self, cpu, calls: list[str]) -> None:
        self.cpu, self.calls = cpu, calls

    def __getattr__(self, name):
        return getattr(self.cpu, name)

    def train(self, vectors) -> None:
        self.calls.append("train")
        self.cpu.train(vectors)

    def add(self, vectors) -> None:
        self.calls.append("add")
        self.cpu.add(vectors)

    def search(self, queries, k):
        if not 0 < k <= 2048:  # faiss/gpu/utils/DeviceDefs.cuh: GPU_MAX_SELECTION_K
            raise RuntimeError("Error: 'k > 0 && k <= GPU_MAX_SELECTION_K' failed: k must be > 0 and <= 2048")
        self.calls.append("search")
        return self.cpu.search(queries, k)


@pytest.fixture
def gpu_faiss(monkeypatch) -> list[str]:
    """faiss-gpu's API with one GPU; the calls that reached the 'GPU'."""
    calls: list[str] = []

    def to_gpu(resources, device, index):
        assert isinstance(resources, StandardGpuResources) and device == 0
        if isinstance(index, faiss.IndexHNSW):  # faiss/gpu/GpuCloner.cpp, ToGpuCloner::clone_Index
            raise RuntimeError(
                "Error in virtual faiss::Index* faiss::gpu::ToGpuCloner::clone_Index(const faiss::Index*) at "
                "/project/faiss/faiss/gpu/GpuCloner.cpp:261: This index type is not implemented on GPU."
            )
        calls.append(f"to_gpu {type(index).__name__}")
        return GpuIndexFake(faiss.clone_index(index), calls)

    class StandardGpuResources:
        pass

    monkeypatch.setattr(faiss, "StandardGpuResources", StandardGpuResources, raising=False)
    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 1)
    monkeypatch.setattr(faiss, "index_cpu_to_gpu", to_gpu, raising=False)
    monkeypatch.setattr(faiss, "index_gpu_to_cpu", lambda index: faiss.clone_index(index.cpu), raising=False)
    return calls


def vectors(count: int = 400, dim: int = 16, seed: int = 0) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((count, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_index_gpu_builds_on_the_gpu_and_writes_the_cpu_index_it_would_build_on_the_cpu(gpu_faiss, kind):
    data, queries = vectors(), vectors(5, seed=1)
    on_gpu = make_index(data, IndexConfig(kind=kind, nlist=4, gpu=True))
    expected = ["to_gpu IndexFlatIP", "add"] if kind == "flat" else ["to_gpu IndexIVFFlat", "train", "add"]
    assert gpu_faiss == expected
    assert type(on_gpu).__name__ == type(make_index(data, IndexConfig(kind=kind, nlist=4))).__name__  # a CPU index
    on_cpu = make_index(data, IndexConfig(kind=kind, nlist=4))
    if kind == "ivf":
        assert on_gpu.nprobe == on_cpu.nprobe == 4
        scores, found = on_gpu.search(queries, 10)
        # k-means on the 'GPU' is faiss' own: the same lists; recall against the exact top 10
        exact = np.argsort(-(queries @ data.T), axis=1)[:, :10]
        assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found, exact)]) == 1.0  # nprobe = nlist: exact
    else:
        np.testing.assert_array_equal(on_gpu.search(queries, 10)[1], on_cpu.search(queries, 10)[1])


def test_index_gpu_with_hnsw_is_refused_in_one_line():
    with pytest.raises(UsageError, match="--gpu: faiss builds and searches HNSW indexes on the CPU only"):
        IndexConfig(kind="hnsw", gpu=True)


def test_gpu_without_faiss_gpu_is_refused_in_one_line():
    assert not hasattr(faiss, "StandardGpuResources")  # faiss-cpu here
    with pytest.raises(UsageError, match="--gpu: needs faiss-gpu and a visible GPU"):
        make_index(vectors(), IndexConfig(gpu=True))


@pytest.fixture
def hnsw_index(tmp_path):
    folder = tmp_path / "videos"
    folder.mkdir()
    for i in range(5):
        write_noise_video(folder / f"clip{i}.mp4", seconds=1, seed=i)
    settings = IndexConfig(kind="hnsw")
    build_video_index(
        KnownVectors(), ModelSpec(model="/nowhere"), list_videos(folder), tmp_path / "idx", settings, progress=False
    )
    return tmp_path / "idx"


def test_search_gpu_on_an_hnsw_index_falls_back_to_the_cpu_with_one_line(gpu_faiss, hnsw_index, capsys):
    index = VideoIndex.load(hnsw_index, gpu=True)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "faiss cannot search a IndexHNSWFlat on the GPU" in err[0] and "on the CPU" in err[0]
    assert not index.on_gpu and gpu_faiss == []
    embedder = KnownVectors()
    query = embedder.vector("clip2.mp4")[None].astype(np.float32)
    assert index.search(query, 1)[0][0][0].endswith("clip2.mp4")


def test_flat_index_searches_on_the_gpu_and_k_is_bounded(gpu_faiss, tmp_path):
    folder = tmp_path / "idx"
    data = vectors(3000, dim=8)
    names = [f"/v/{i}.mp4" for i in range(len(data))]
    folder.mkdir()
    faiss.write_index(make_index(data, IndexConfig()), str(folder / "index.faiss"))
    (folder / "videos.json").write_text(__import__("json").dumps(names))
    meta = {"fingerprint": "known", "model": {"model": "/nowhere"}, "settings": {}, "dim": 8, "count": len(names)}
    (folder / "meta.json").write_text(__import__("json").dumps(meta))
    index = VideoIndex.load(folder, gpu=True)
    assert index.on_gpu
    assert len(index.search(data[:2], GPU_MAX_K)[0]) == GPU_MAX_K and gpu_faiss[-1] == "search"
    with pytest.raises(UsageError, match=f"-k: {GPU_MAX_K + 1} is above {GPU_MAX_K}"):
        index.search(data[:2], GPU_MAX_K + 1)
    # the command refuses it before it loads a model (this index's model does not exist)
    with pytest.raises(UsageError, match=f"-k: 5000 is above {GPU_MAX_K}"):
        run_command("search", [str(folder), "noise", "-k", "5000", "--gpu"])
    with pytest.raises(UsageError, match="-k: must be at least 1, got 0"):
        run_command("search", [str(folder), "noise", "-k", "0"])
    assert len(VideoIndex.load(folder).search(data[:1], 2500)[0]) == 2500  # on the CPU: no bound
