"""On-disk cache of embeddings, keyed by the embedder's fingerprint, the items' content and the
instruction: a changed model, file, prompt or preprocessing gives another key, so a stale entry is
never reused. Entries are written atomically (temporary file, then rename): a tensor as `.npy`, a
pairwise head's dict of tensors (`HeadItemEncoder`) as `.npz`, one array per key, dtypes kept."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lit_retrieval.data.items import MediaItem
from lit_retrieval.data.media.identity import digest, tree_identity
from lit_retrieval.search.embedders import HeadItemEncoder, ItemEmbedder, embed_tracked

Encoder = ItemEmbedder | HeadItemEncoder


def items_identity(items: list[MediaItem]) -> str:
    """Content of the items, including size and mtime of every media file they name."""
    media = sorted({p for i in items for p in (i.image, i.video) if p})
    return digest([i.key for i in items], [tree_identity(p) if os.path.exists(p) else [p, "missing"] for p in media])


def _embed_at_once(
    embedder: Encoder, items: list[MediaItem], instruction: str | None, batch_size: int, label: str
) -> Any:
    return embedder.embed(items, instruction, batch_size)


def _save(vectors: Any, path: Path) -> None:
    """`vectors` (a tensor, or a dict of tensors) atomically at `path` (`.npy` / `.npz`)."""
    partial = path.with_suffix(f".{os.getpid()}.tmp{path.suffix}")  # two processes never write one temporary file
    if isinstance(vectors, dict):
        np.savez(partial, **{k: v.numpy() for k, v in vectors.items()})
    else:
        np.save(partial, vectors.numpy())
    os.replace(partial, path)


def _load(path: Path) -> Any:
    if path.suffix == ".npz":
        with np.load(path) as arrays:
            return {k: torch.from_numpy(arrays[k]) for k in arrays.files}
    return torch.from_numpy(np.load(path))


class EmbeddingCache:
    """`progress`: what is embedded is shown (`search.embedders.embed_tracked`), as by `uvrb`."""

    def __init__(self, root: str | Path | None, progress: bool = False) -> None:
        self.root = Path(root) if root else None
        self.hits = self.misses = 0
        self._embed = embed_tracked if progress else _embed_at_once

    def embed(
        self, embedder: Encoder, items: list[MediaItem], instruction: str | None, batch_size: int, label: str
    ) -> Any:
        if self.root is None:
            return self._embed(embedder, items, instruction, batch_size, label)
        key = digest(embedder.fingerprint, items_identity(items), instruction)
        stem = f"{label}-{key}"
        for path in (self.root / f"{stem}.npy", self.root / f"{stem}.npz"):
            if path.is_file():
                self.hits += 1
                return _load(path)
        self.misses += 1
        vectors = self._embed(embedder, items, instruction, batch_size, label)
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / f"{stem}.{'npz' if isinstance(vectors, dict) else 'npy'}"
        _save(vectors, path)
        path.with_suffix(".json").write_text(
            json.dumps({"fingerprint": embedder.fingerprint, "items": len(items), "instruction": instruction})
        )
        return vectors
