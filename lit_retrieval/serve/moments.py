"""The moment of a found video that matches a query best.

A video embedder that accepts windows (`MediaItem(video, start, end)`; every video-capable model
of the project does) scores `segments` equal windows of the video against the query with the same
relevance as the index, s = cos(E(q), E(window)) (GVE Definition 1), and the window with the
highest score is the moment. The papers rank whole videos and say nothing about where in a video
the match is; equal windows are our choice (`--moment-segments`, 0 turns moments off). Window
embeddings are computed the first time a video is found and kept in `EmbeddingCache` under the
server's cache folder (keyed by model, file size/mtime and window) and in memory (`ByteBoundedLRU`,
keyed by the resolved file, size and mtime), so later queries take one `stat` and a dot product per found video.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lit_retrieval.data.items import ItemError, MediaItem
from lit_retrieval.data.media.identity import file_path, file_version
from lit_retrieval.data.media.video import VideoDecodeError, video_duration
from lit_retrieval.search.cache import EmbeddingCache
from lit_retrieval.search.embedders import ItemEmbedder
from lit_retrieval.serve.caches import ByteBoundedLRU


@dataclass(frozen=True)
class Moment:
    start: float
    end: float
    score: float

    @property
    def time(self) -> float:
        """Where playback starts and the thumbnail is taken: the window's middle."""
        return (self.start + self.end) / 2


def windows(duration: float, segments: int) -> list[tuple[float, float]]:
    edges = np.linspace(0.0, duration, segments + 1)
    return [(float(a), float(b)) for a, b in zip(edges[:-1], edges[1:])]


class MomentFinder:
    def __init__(
        self,
        embedder: ItemEmbedder,
        segments: int,
        cache_dir: str | Path,
        lock: threading.Lock,
        memory_bytes: int = 64 * 2**20,
    ) -> None:
        self.embedder = embedder
        self.segments = segments if "V" in embedder.modalities else 0
        self.cache = EmbeddingCache(Path(cache_dir) / "moments")
        self.memory: ByteBoundedLRU[tuple[list[tuple[float, float]], np.ndarray]] = ByteBoundedLRU(memory_bytes)
        self.lock = lock  # the embedder's lock (one embedding at a time)

    def window_vectors(self, video: str) -> tuple[list[tuple[float, float]], np.ndarray] | None:
        """The windows of `video` and their embeddings; None when it cannot be decoded."""
        real = file_path(video)  # entries linking to one file share its windows
        try:
            version = file_version(real)
        except OSError:
            return None
        if version is None:
            return None
        key = (real, *version)
        known = self.memory.get(key)
        if known is not None:
            return known
        try:
            spans = windows(video_duration(video), self.segments)
            items = [MediaItem(video=video, start=a, end=b) for a, b in spans]
            with self.lock:
                vectors = self.cache.embed(self.embedder, items, None, len(items), "moments").numpy()
        except (VideoDecodeError, ItemError, OSError):
            return None
        self.memory.put(key, (spans, vectors))
        return spans, vectors

    def best(self, video: str, query: np.ndarray) -> Moment | None:
        """The best window of `video` for the (normalised) query vector; None when moments are off
        or the video cannot be decoded."""
        if self.segments <= 0:
            return None
        found = self.window_vectors(video)
        if found is None:
            return None
        spans, vectors = found
        scores = vectors @ query
        best = int(np.argmax(scores))
        return Moment(spans[best][0], spans[best][1], float(scores[best]))
