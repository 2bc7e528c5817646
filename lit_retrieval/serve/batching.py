"""Micro-batching of concurrent text queries: one forward pass and one index search for every query
waiting.

Request threads hand their text and k to `TextBatcher.query` and wait; one batching thread takes the
first waiting query, gathers every other query that arrives within `window_s` (a few milliseconds)
or is already queued, up to `max_batch`, embeds each instruction's group in one `embed` call under
the model lock, and searches the index once for the group's largest k (each query keeps its first
k hits: for an exact or IVF index the same as searching with its own k). Eight concurrent clients
thus cost about one batched forward pass and one scan of the index instead of eight of each queued
one after another. Padding a batch does not change a text's embedding (attention masks), so the
answer to a query does not depend on what it was batched with. Hand-written: no library batches
calls of an in-process PyTorch model for a thread-pool server.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

import numpy as np

from lit_retrieval.data.items import MediaItem
from lit_retrieval.search.embedders import ItemEmbedder

_STOP = object()
Hits = list[tuple[str, float]]


class TextBatcher:
    def __init__(
        self,
        embedder: ItemEmbedder,
        lock: threading.Lock,
        search: Callable[[np.ndarray, int], list[Hits]],
        window_s: float = 0.002,
        max_batch: int = 32,
    ) -> None:
        self.embedder = embedder
        self.lock = lock
        self.search = search  # (queries [n, d], k) -> the top k of each query, best first
        self.window_s = window_s
        self.max_batch = max_batch
        self.batches: list[int] = []  # sizes of the last batches (bounded; for tests and the benchmark)
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="text-batcher", daemon=True)
        self._thread.start()

    def query(self, text: str, instruction: str | None, k: int) -> tuple[np.ndarray, Hits]:
        """The (normalised) embedding of one text query and its top k, computed together with any
        concurrent ones."""
        future: Future = Future()
        self._queue.put((text, instruction, k, future))
        return future.result()

    def close(self) -> None:
        self._queue.put(_STOP)
        self._thread.join(10)

    def _gather(self, first) -> list:
        batch = [first]
        deadline = time.monotonic() + self.window_s
        while len(batch) < self.max_batch:
            try:
                item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if item is _STOP:
                self._queue.put(_STOP)
                break
            batch.append(item)
        return batch

    def _run(self) -> None:
        while (first := self._queue.get()) is not _STOP:
            batch = self._gather(first)
            self.batches = [*self.batches[-99:], len(batch)]
            for instruction in dict.fromkeys(i for _, i, _, _ in batch):
                group = [(text, k, future) for text, i, k, future in batch if i == instruction]
                try:
                    with self.lock:
                        items = [MediaItem(text=text) for text, _, _ in group]
                        vectors = self.embedder.embed(items, instruction, len(items)).numpy()
                    hits = self.search(vectors, max(k for _, k, _ in group))
                except Exception as err:  # handed to every waiting request, which answers with it
                    for _, _, future in group:
                        future.set_exception(err)
                    continue
                for (_, k, future), vector, found in zip(group, vectors, hits):
                    future.set_result((vector, found[:k]))
