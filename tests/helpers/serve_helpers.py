"""Shared by the serve tests: an index of the synthetic corpus embedded by `AnnotationVectors`, a
stand-in for a perfect model whose vectors come from the corpus annotations (not from the project's
code), and a live server on a loopback port."""

from __future__ import annotations

import hashlib
import socket
import threading
import time
from pathlib import Path

import numpy as np
import torch

from lit_retrieval.data.annotations import load_annotations
from lit_retrieval.data.text.queries import concat_query
from lit_retrieval.data.media.video import VideoDecodeError
from lit_retrieval.search.index import VideoIndex, build_video_index, list_videos
from lit_retrieval.search.loading import ModelSpec
from lit_retrieval.serve.app import Limits, SearchService, create_app

DIM = 256


class AnnotationVectors:
    """Each event of the corpus is a random unit vector. A video window (whole video by default)
    embeds as the events it shows, weighted by their seconds on screen; a text as the events it
    names (one description, or a video's descriptions concatenated in order). A video file is
    recognised by its bytes (so an uploaded copy embeds as the original)."""

    modalities = {"T", "V"}
    fingerprint = "annotation-vectors"

    def __init__(self, corpus: Path) -> None:
        records = load_annotations(corpus / "annotations.json")
        self.records = {hashlib.sha256((corpus / r.path).read_bytes()).hexdigest(): r for r in records}
        events = sorted({e.event_id for r in self.records.values() for e in r.events})
        rng = np.random.default_rng(0)
        self.event_vectors = {e: rng.standard_normal(DIM) for e in events}
        self.texts = {}
        for record in self.records.values():
            self.texts[concat_query(record.descriptions)] = [e.event_id for e in record.events]
            for event in record.events:
                self.texts[event.description] = [event.event_id]

    def _video(self, path: str, start: float | None, end: float | None) -> np.ndarray:
        record = self.records.get(hashlib.sha256(Path(path).read_bytes()).hexdigest())
        if record is None:
            raise VideoDecodeError(path, "not a video of the corpus")
        lo, hi = start or 0.0, record.duration if end is None else end
        if start is None and end is None:  # the whole video: each of its events once
            return sum(self.event_vectors[e.event_id] for e in record.events)
        return sum(
            max(0.0, min(b, hi) - max(a, lo)) * self.event_vectors[e.event_id]
            for e in record.events
            for a, b in e.intervals
        )

    def _text(self, text: str) -> np.ndarray:
        return sum(self.event_vectors[e] for e in self.texts[text])

    def embed(self, items, instruction=None, batch_size=8) -> torch.Tensor:
        rows = [self._video(i.video, i.start, i.end) if i.video else self._text(i.text) for i in items]
        rows = np.stack([r / np.linalg.norm(r) for r in rows])
        return torch.tensor(rows, dtype=torch.float32)


def build_index(corpus: Path, out: Path) -> tuple[VideoIndex, AnnotationVectors]:
    embedder = AnnotationVectors(corpus)
    build_video_index(embedder, ModelSpec(model="/nowhere/model"), list_videos(corpus / "videos"), out, progress=False)
    return VideoIndex.load(out), embedder


def make_service(corpus: Path, index_dir: Path, cache_dir: Path, limits: Limits | None = None) -> SearchService:
    index, embedder = build_index(corpus, index_dir)
    return SearchService(index, embedder, index_dir, cache_dir, moment_segments=6, limits=limits)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """uvicorn serving `service` on 127.0.0.1 in a thread, with the `serve` command's protocol
    (header deadline: the service's limits) (stopped on exit)."""

    def __init__(self, service: SearchService) -> None:
        import uvicorn

        from lit_retrieval.serve.guards import GuardedH11Protocol

        GuardedH11Protocol.header_timeout_s = service.limits.header_timeout_s
        self.port = free_port()
        config = uvicorn.Config(
            create_app(service), host="127.0.0.1", port=self.port, log_level="warning", http=GuardedH11Protocol
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def serve_in_this_process(corpus: str, index: str, cache: str, port: str, shutdown_timeout_s: str) -> None:
    """A server process as `lit-retrieval serve` runs one (`serve_forever`: signals, timeouts, logs),
    over the annotation-vector index (no model to load); prints "ready" once listening."""
    from lit_retrieval.serve.server import listening_socket, serve_forever

    sock = listening_socket("127.0.0.1", int(port))
    service = SearchService(VideoIndex.load(index), AnnotationVectors(Path(corpus)), index, cache, moment_segments=2)
    print("ready", flush=True)
    serve_forever(create_app(service), sock, service.limits.header_timeout_s, float(shutdown_timeout_s))


if __name__ == "__main__":
    import sys

    serve_in_this_process(*sys.argv[1:])
