"""A folder of a user's videos as a searchable faiss index.

`build_video_index` embeds videos in chunks, writing each finished chunk atomically under
`OUT/parts/` (so a crash keeps every finished chunk and a re-run skips those videos), lists videos
that fail to decode in `OUT/failed.json` instead of stopping (with the file's size and modification
time: a re-run retries a file that changed since, e.g. a repaired video, and `retry_failed` retries
every listed one), and then builds the index:
exact inner product (`flat`, default), `ivf` (IVF-Flat, `nlist` lists, `nprobe` at search) or
`hnsw` for large collections. `meta.json`
records the model (`ModelSpec`), its fingerprint and the index settings; searching with another
model or settings is refused.

`VideoIndex.load` checks the folder whole before anything searches it (`search` and `serve` both
load through it): `meta.json` holds a model description, a fingerprint and the dimension,
`videos.json` lists as many videos as `index.faiss` holds (not one fewer, not one more, not none),
and the faiss dimension is `meta.json`'s; `VideoIndex.check` then refuses a query model with another
fingerprint or another embedding dimension. Each is one line naming the file (`UsageError`,
`IndexMismatch`), never a traceback or a 500 at the first query.

On the GPU (`--gpu`, faiss-gpu): `flat` and `ivf` build (IVF's k-means and the adds) and search on
GPU 0; the written file is the CPU copy, so an index built on a GPU searches anywhere. faiss cannot
clone HNSW to the GPU: `index --kind hnsw --gpu` is refused, and `search`/`serve --gpu` on an HNSW
index search it on the CPU after one line saying so. faiss' GPU search returns at most `GPU_MAX_K`
(2,048) neighbours per query: a larger `-k` / `--max-k` with `--gpu` is refused.
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from lit_retrieval.data.items import ItemError, MediaItem
from lit_retrieval.data.reading import read_json, read_text
from lit_retrieval.data.media.identity import file_version
from lit_retrieval.data.media.video import VideoDecodeError
from lit_retrieval.errors import ConfigError, InputError, UsageError
from lit_retrieval.progress import Progress
from lit_retrieval.search.embedders import ItemEmbedder
from lit_retrieval.faiss_library import faiss
from lit_retrieval.search.loading import ModelSpec

VIDEO_SUFFIXES = {".mp4", ".mkv", ".avi", ".mov", ".webm", ".m4v", ".mpg", ".mpeg"}


class IndexMismatch(InputError, RuntimeError):
    """An index was built with another model or other settings (one line naming the folder)."""


@dataclass
class IndexConfig:
    kind: str = "flat"  # flat | ivf | hnsw
    nlist: int | None = None  # IVF lists (default 4 sqrt(N))
    nprobe: int = 32  # IVF lists searched
    hnsw_m: int = 32
    ef_search: int = 128
    gpu: bool = False  # build on GPU 0 (flat, ivf)

    def __post_init__(self) -> None:
        if self.kind not in ("flat", "ivf", "hnsw"):
            raise ConfigError(f"index kind must be flat, ivf or hnsw, got {self.kind!r}")
        if self.gpu and self.kind == "hnsw":
            raise UsageError(
                "--gpu",
                "faiss builds and searches HNSW indexes on the CPU only; leave --gpu out, or build --kind flat or ivf",
            )


GPU_MAX_K = 2048  # faiss' GPU k-selection limit (GPU_MAX_SELECTION_K): its GPU search refuses a larger k


def check_k(k: int, gpu: bool, gallery: int, option: str = "-k") -> None:
    """Refuse a `k` below 1, or one that asks a search on the GPU for more than `GPU_MAX_K` of the
    `gallery`'s videos."""
    if k < 1:
        raise UsageError(option, f"must be at least 1, got {k}")
    if gpu and min(k, gallery) > GPU_MAX_K:
        raise UsageError(
            option, f"{k} is above {GPU_MAX_K}, the most faiss' GPU search returns; lower it or leave --gpu out"
        )


def list_videos(source: str | Path) -> list[str]:
    """Video files under a folder (recursively, sorted) or listed one per line in a text file (UTF-8;
    a video file given instead of the list is a `UsageError`)."""
    source = Path(source)
    if source.is_dir():
        return sorted(str(p.resolve()) for p in source.rglob("*") if p.suffix.lower() in VIDEO_SUFFIXES)
    if source.is_file():
        if source.suffix.lower() in VIDEO_SUFFIXES:
            raise UsageError(
                str(source), "a video file, where a folder of videos or a list file (one path per line) is expected"
            )
        base = source.parent
        lines = [line.strip() for line in read_text(source).splitlines() if line.strip() and not line.startswith("#")]
        return [str((base / line).resolve()) if not os.path.isabs(line) else line for line in lines]
    raise FileNotFoundError(f"{source}: neither a folder of videos nor a list file")


IVF_POINTS_PER_LIST = 39  # faiss' k-means warns below 39 training vectors per list (and fails below 1)


def check_ivf_lists(settings: IndexConfig, count: int) -> None:
    """Refuse an IVF index of more lists (`--nlist`) than `count` vectors: k-means needs at least one
    vector per list to train (faiss' `Clustering::train_encoded` error otherwise)."""
    if settings.kind == "ivf" and settings.nlist is not None and settings.nlist > count:
        raise UsageError(
            "--nlist",
            f"{settings.nlist} IVF lists need at least {settings.nlist} vectors to train (faiss warns below "
            f"{IVF_POINTS_PER_LIST * settings.nlist}, {IVF_POINTS_PER_LIST} per list) but there are {count}: give "
            f"--nlist {count} or fewer ({max(1, count // IVF_POINTS_PER_LIST)} or fewer for {IVF_POINTS_PER_LIST} "
            "per list), or leave it out (the default is min(N/39, 4 sqrt(N)))",
        )


def make_index(vectors: np.ndarray, settings: IndexConfig) -> faiss.Index:
    """The index of `vectors` (rows) that `settings` describe, built on GPU 0 with `settings.gpu`
    and returned as its CPU copy."""
    dim = vectors.shape[1]
    if settings.kind == "flat":
        index = faiss.IndexFlatIP(dim)
    elif settings.kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, settings.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efSearch = settings.ef_search
    else:
        check_ivf_lists(settings, len(vectors))
        nlist = settings.nlist or max(1, min(len(vectors) // IVF_POINTS_PER_LIST, int(4 * math.sqrt(len(vectors)))))
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
    built = on_gpu(index) if settings.gpu else index
    if not built.is_trained:
        built.train(vectors)
    built.add(vectors)
    index = faiss.index_gpu_to_cpu(built) if settings.gpu else built
    if settings.kind == "ivf":
        index.nprobe = min(settings.nprobe, index.nlist)
    return index


def on_gpu(index: faiss.Index) -> faiss.Index:
    """`index` cloned to GPU 0 (faiss-gpu)."""
    resources = gpu_resources()
    moved = faiss.index_cpu_to_gpu(resources, 0, index)
    moved.lit_resources = resources  # the GPU memory it lives in, as long as the index does
    return moved


def gpu_resources() -> faiss.StandardGpuResources:
    if not hasattr(faiss, "StandardGpuResources") or faiss.get_num_gpus() == 0:
        raise UsageError("--gpu", "needs faiss-gpu and a visible GPU (pip install 'lit-retrieval[gpu]')")
    return faiss.StandardGpuResources()


def to_gpu(index: faiss.Index, path: Path) -> faiss.Index:
    """`index` on GPU 0; an index faiss cannot clone to the GPU (HNSW) stays on the CPU, said in one
    line on stderr."""
    try:
        return on_gpu(index)
    except RuntimeError as err:
        reason = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        print(
            f"{path}: faiss cannot search a {type(index).__name__} on the GPU ({reason}); searching it on the CPU",
            file=sys.stderr,
        )
        return index


def _write_atomic(path: Path, write) -> None:
    partial = path.with_name(path.name + ".partial")
    write(partial)
    os.replace(partial, path)


def _save_array(path: Path, array: np.ndarray) -> None:
    with open(path, "wb") as handle:
        np.save(handle, array)


def _failed(out: Path) -> dict[str, dict]:
    """Every listed failure, `{video: {"reason", "size", "mtime_ns"}}` (an entry of an older index
    that holds only the reason has no size and mtime, so its video is retried)."""
    failed: dict[str, dict] = {}
    for path in sorted(out.glob("failed*.json")):
        failed.update(_failed_file(path))
    return failed


def _failed_file(path: Path) -> dict[str, dict]:
    if not path.is_file():
        return {}
    return {video: entry if isinstance(entry, dict) else {"reason": entry} for video, entry in read_json(path).items()}


def _failure(video: str, reason: str) -> dict:
    """A failure entry: the reason and the file's size and modification time (when it exists)."""
    try:
        version = file_version(video)
    except OSError:
        version = None
    return {"reason": reason} if version is None else {"reason": reason, "size": version[0], "mtime_ns": version[1]}


def _changed(video: str, entry: dict) -> bool:
    """Whether `video` differs from the file that failed (size or mtime), i.e. is worth a retry."""
    now = _failure(video, "")
    return any(now.get(key) != entry.get(key) for key in ("size", "mtime_ns"))


def _done_parts(parts: Path) -> tuple[list[str], list[np.ndarray]]:
    videos, vectors = [], []
    for meta in sorted(parts.glob("part-*.json")):  # part-00003 or, from array shards, part-s2-00003
        array = meta.with_suffix(".npy")
        if array.is_file():  # a chunk counts only once both files exist
            videos += json.loads(meta.read_text())
            vectors.append(np.load(array))
    return videos, vectors


def build_video_index(
    embedder: ItemEmbedder,
    spec: ModelSpec,
    videos: list[str],
    out: str | Path,
    settings: IndexConfig | None = None,
    chunk: int = 16,
    batch_size: int = 8,
    progress: bool = True,
    shard: tuple[int, int] | None = None,
    embed_only: bool = False,
    retry_failed: bool = False,
) -> dict | None:
    """Embed `videos` (this shard's share when `shard` = (k, n): every n-th from k) and, unless
    `embed_only`, build the index over everything embedded so far. Shards of an array job write
    their own chunk and failure files, so they never race. A video that failed before is skipped
    while its size and mtime are unchanged; `retry_failed` retries it anyway."""
    settings = settings or IndexConfig()
    out = Path(out)
    parts = out / "parts"
    parts.mkdir(parents=True, exist_ok=True)
    owner = out / "embedder.json"
    if owner.is_file() and _fingerprint(owner) != embedder.fingerprint:
        raise IndexMismatch(f"{out} holds embeddings of another model or settings; use a new --out folder")
    owner.write_text(json.dumps({"fingerprint": embedder.fingerprint, "model": asdict(spec.resolved())}))
    done_videos, _ = _done_parts(parts)
    tag = f"s{shard[0]}-" if shard else ""
    failed_path = out / f"failed{'-' + tag.rstrip('-') if shard else ''}.json"
    known_failures = _failed(out)
    mine = videos[shard[0] :: shard[1]] if shard else videos
    done = set(done_videos)
    todo = [
        v for v in mine if v not in done and (retry_failed or v not in known_failures or _changed(v, known_failures[v]))
    ]
    retried = set(todo)  # listed again only if they fail again
    failed = _failed_file(failed_path)
    if retried & set(failed):
        failed = {v: entry for v, entry in failed.items() if v not in retried}
        _write_atomic(failed_path, lambda p: p.write_text(json.dumps(failed, indent=1)))
    before = len(done.intersection(mine))
    skipped = len(mine) - len(todo) - before  # failed before, unchanged since
    counts = {"done_before": before, "skipped": skipped, "failed": 0}
    with Progress("embedding videos", len(mine), completed=before + skipped, counts=counts, enabled=progress) as bar:
        for start in range(0, len(todo), chunk):
            names, vectors = [], []
            group = todo[start : start + chunk]
            try:  # the whole chunk in batches; on a decode error, video by video to find the bad ones
                vectors.append(embedder.embed([MediaItem(video=v) for v in group], None, batch_size).numpy())
                names = list(group)
            except (VideoDecodeError, ItemError):
                for video in group:
                    try:
                        vectors.append(embedder.embed([MediaItem(video=video)], None, 1).numpy())
                        names.append(video)
                    except (VideoDecodeError, ItemError) as err:
                        failed[video] = _failure(video, str(err))
                        _write_atomic(failed_path, lambda p: p.write_text(json.dumps(failed, indent=1)))
            bar.advance(len(group), failed=len(group) - len(names))
            if names:
                stem = parts / f"part-{tag}{len(list(parts.glob(f'part-{tag}*.npy'))):05d}"
                _write_atomic(
                    stem.with_suffix(".npy"), lambda p: _save_array(p, np.concatenate(vectors).astype(np.float32))
                )
                _write_atomic(stem.with_suffix(".json"), lambda p: p.write_text(json.dumps(names)))
    if embed_only:
        return None
    all_videos, arrays = _done_parts(parts)
    embedded = set(all_videos)
    failed = {v: entry for v, entry in _failed(out).items() if v not in embedded}  # not a retried video that now works
    if not all_videos:
        raise RuntimeError(f"no video could be embedded ({len(failed)} failed; see {out}/failed*.json)")
    vectors = np.ascontiguousarray(np.concatenate(arrays), dtype=np.float32)
    index = make_index(vectors, settings)
    faiss.write_index(index, str(out / "index.faiss"))
    meta = {
        "fingerprint": embedder.fingerprint,
        "model": asdict(spec.resolved()),
        "settings": asdict(settings),
        "dim": int(vectors.shape[1]),
        "count": len(all_videos),
        "failed": len(failed),
    }
    _write_atomic(out / "videos.json", lambda p: p.write_text(json.dumps(all_videos)))
    _write_atomic(out / "meta.json", lambda p: p.write_text(json.dumps(meta, indent=2)))  # last: the index is done
    return meta


def _fingerprint(owner: Path) -> object:
    """The fingerprint `embedder.json` records (a `UsageError` naming it when it is not that file)."""
    found = read_json(owner)
    if not isinstance(found, dict) or not isinstance(found.get("fingerprint"), str):
        raise UsageError(str(owner), "not what `lit-retrieval index` writes (no 'fingerprint'); use a new --out folder")
    return found["fingerprint"]


def _meta_problem(meta: object) -> str | None:
    """What makes `meta.json` not the object `build_video_index` writes, None if nothing."""
    if not isinstance(meta, dict):
        return f"expected a JSON object, got {type(meta).__name__}"
    fingerprint = meta.get("fingerprint")
    if not isinstance(fingerprint, str) or not fingerprint:
        return f"no model fingerprint ('fingerprint': {fingerprint!r})"
    model = meta.get("model")
    try:
        if not isinstance(model, dict) or not all(v is None or isinstance(v, str) for v in model.values()):
            raise TypeError
        ModelSpec(**model)
    except (TypeError, ValueError):
        return f"no model description ('model': {model!r})"
    dim = meta.get("dim")
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        return f"no embedding dimension ('dim': {dim!r})"
    return None


@dataclass
class VideoIndex:
    index: faiss.Index
    videos: list[str]
    meta: dict
    path: Path | None = None  # the folder it was loaded from

    @classmethod
    def load(cls, path: str | Path, gpu: bool = False) -> VideoIndex:
        """The index folder `build_video_index` wrote, checked whole (see the module docstring)."""
        path = Path(path)
        if not (path / "meta.json").is_file() or not (path / "index.faiss").is_file():
            raise FileNotFoundError(
                f"{path}: not a finished index (no meta.json / index.faiss); run `lit-retrieval index` again"
            )
        meta = read_json(path / "meta.json")
        problem = _meta_problem(meta)
        if problem:
            raise UsageError(
                str(path / "meta.json"), f"is not what `lit-retrieval index` writes: {problem}; run it again"
            )
        videos = read_json(path / "videos.json")
        if not isinstance(videos, list) or not all(isinstance(v, str) and v for v in videos):
            raise UsageError(
                str(path / "videos.json"), "is not what `lit-retrieval index` writes (a list of paths); run it again"
            )
        try:
            index = faiss.read_index(str(path / "index.faiss"))
        except RuntimeError:
            raise UsageError(
                str(path / "index.faiss"),
                "not a readable faiss index (corrupt or partial); run `lit-retrieval index` again",
            ) from None
        if index.ntotal != len(videos) or not videos:
            raise UsageError(
                str(path / "videos.json"),
                f"lists {len(videos)} videos but index.faiss holds {index.ntotal}"
                + ("" if videos else ": an index of no videos")
                + "; run `lit-retrieval index` again",
            )
        if index.d != meta["dim"]:
            raise UsageError(
                str(path / "index.faiss"),
                f"holds {index.d}-dimensional vectors, meta.json says {meta['dim']}; run `lit-retrieval index` again",
            )
        return cls(to_gpu(index, path / "index.faiss") if gpu else index, videos, meta, path)

    def check(self, embedder: ItemEmbedder) -> None:
        """Refuse a query model other than the one that built the index: another fingerprint, or
        (a faiss file of another model) another embedding dimension."""
        if embedder.fingerprint != self.meta["fingerprint"]:
            raise IndexMismatch(
                f"{self.path}: this index was built by another model or with other settings "
                f"(index: {self.meta['model']}, fingerprint {self.meta['fingerprint']}; "
                f"query model fingerprint {embedder.fingerprint}); search with its model or index again"
            )
        dim = embedder.embed([MediaItem(text="a probe of the embedding dimension")]).shape[-1]
        if dim != self.index.d:
            raise IndexMismatch(
                f"{self.path}: index.faiss holds {self.index.d}-dimensional vectors, the query model embeds "
                f"{dim} (a faiss file of another model?); run `lit-retrieval index` again"
            )

    @property
    def on_gpu(self) -> bool:
        return type(self.index).__name__.startswith("Gpu")

    def search(self, queries: np.ndarray, k: int) -> list[list[tuple[str, float]]]:
        check_k(k, self.on_gpu, len(self.videos))
        scores, found = self.index.search(np.ascontiguousarray(queries, dtype=np.float32), min(k, len(self.videos)))
        return [
            [(self.videos[j], float(s)) for j, s in zip(row_ids, row_scores) if j >= 0]
            for row_ids, row_scores in zip(found, scores)
        ]
