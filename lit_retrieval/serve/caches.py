"""In-memory caches of the search service, bounded in bytes (least recently used entries go first).

The service keeps query vectors (by text and instruction) and moment-window vectors (by video file)
here, so a repeated query or a found video costs a dict look-up, and memory stays below the bound
however many distinct queries arrive (`--text-cache-mb`). Hand-written: `functools.lru_cache` bounds
entries, not bytes, and cannot be shared across threads with a size per entry.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import numpy as np

V = TypeVar("V")


def entry_bytes(key: Hashable, value: object) -> int:
    """Approximate memory of one entry: the key's and the value's own size, arrays by their buffer."""
    size = sys.getsizeof(key) + sys.getsizeof(value)
    for part in value if isinstance(value, tuple) else (value,):
        if isinstance(part, np.ndarray):
            size += part.nbytes
    return size


class ByteBoundedLRU(Generic[V]):
    """A thread-safe LRU mapping whose entries together take at most `max_bytes` (0: keeps nothing)."""

    def __init__(self, max_bytes: int, size: Callable[[Hashable, V], int] = entry_bytes) -> None:
        self.max_bytes = max_bytes
        self.size = size
        self.bytes = 0
        self._entries: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: Hashable, value: V) -> None:
        nbytes = self.size(key, value)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
            if nbytes > self.max_bytes:
                return
            self._entries[key] = (value, nbytes)
            self.bytes += nbytes
            while self.bytes > self.max_bytes:
                _, (_, dropped) = self._entries.popitem(last=False)
                self.bytes -= dropped
