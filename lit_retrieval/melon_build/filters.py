"""MELON's two quality filters (supp. C.2).

- T2T: cosine similarity of adjacent event descriptions under a sentence encoder (SBERT; the packaged
  all-MiniLM-L6-v2 by default, loaded offline with sentence-transformers); a video with any adjacent
  pair above the threshold (0.70) lacks distinct events and is removed. `validate-melon --t2t`
  runs the same function over an annotation.
- V2T: each segment's similarity to its own video window (cosine of the L2-normalised embeddings of
  any `ItemEmbedder`: a GVE model folder, a training config + checkpoint of a dual encoder, or an
  embedder class); segments under their source's threshold (0.12-0.18, Tab. 9) are removed.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import torch

from lit_retrieval.data.items import MediaItem
from lit_retrieval.data.media.identity import digest, tree_identity
from lit_retrieval.errors import ConfigError
from lit_retrieval.melon_build.config import T2TConfig, V2TConfig
from lit_retrieval.melon_build.sources import Segment
from lit_retrieval.shipped import resolve_model_path

if TYPE_CHECKING:  # the embedders' module imports the models: only the V2T filter loads it (`load_embedder`)
    from lit_retrieval.search.embedders import ItemEmbedder


class SentenceEncoder:
    """A sentence-transformers model from a local folder or `package:MODULE` (no download)."""

    def __init__(self, spec: str = T2TConfig.model, batch_size: int = 64) -> None:
        from sentence_transformers import SentenceTransformer

        path = resolve_model_path(spec)
        self.model = SentenceTransformer(path, device="cpu", local_files_only=True)
        self.batch_size = batch_size
        self.identity = digest(tree_identity(path))

    def adjacent_similarities(self, texts: list[str]) -> list[float]:
        """cos(text_i, text_{i+1}) for every adjacent pair, in order (supp. C.2's T2T score)."""
        if len(texts) < 2:
            return []
        vectors = self.model.encode(
            texts,
            batch_size=self.batch_size,
            convert_to_tensor=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return [float(s) for s in (vectors[:-1] * vectors[1:]).sum(-1).cpu()]


@functools.lru_cache(maxsize=2)
def sentence_encoder(spec: str, batch_size: int = 64) -> SentenceEncoder:
    """The encoder of `spec`, loaded once per process (a build, then validate-melon, share it)."""
    return SentenceEncoder(spec, batch_size)


def redundant_pairs(similarities: list[float], threshold: float) -> list[tuple[int, float]]:
    """(i, similarity) of each adjacent pair (i, i + 1) whose similarity exceeds `threshold`."""
    return [(i, s) for i, s in enumerate(similarities) if s > threshold]


def _import(class_path: str) -> Any:
    module, _, name = class_path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as err:
        raise ConfigError(f"v2t.embedder.class_path: cannot import {class_path!r} ({err})") from None


def v2t_identity(config: V2TConfig) -> str:
    """What the V2T similarities depend on: the model's files (or the embedder class and its
    arguments) and the frame sampling; the cache key of stage `v2t`."""
    files = [tree_identity(p) for p in (config.model, config.config, config.ckpt) if p is not None]
    return digest(config.model, config.config, config.ckpt, config.embedder, config.sampling, files)


def load_embedder(config: V2TConfig) -> ItemEmbedder:
    """The item embedder `config` names (see `V2TConfig`)."""
    if config.embedder is not None:
        if "class_path" not in config.embedder:
            raise ConfigError("v2t.embedder needs a class_path (and optional init_args)")
        return _import(config.embedder["class_path"])(**(config.embedder.get("init_args") or {}))
    from lit_retrieval.search.loading import ModelSpec, load_item_embedder

    return load_item_embedder(
        ModelSpec(model=config.model, config=config.config, ckpt=config.ckpt, sampling=config.sampling)
    )


def segment_similarities(
    embedder: ItemEmbedder, video: str, segments: tuple[Segment, ...], batch_size: int
) -> list[float]:
    """cos(E(segment text), E(video window [start, end])) for every segment of `video`."""
    windows = [MediaItem(video=video, start=s.start, end=s.end) for s in segments]
    texts = [MediaItem(text=s.text) for s in segments]
    with torch.no_grad():
        v = embedder.embed(windows, batch_size=batch_size)
        t = embedder.embed(texts, batch_size=batch_size)
    v = torch.nn.functional.normalize(v.float(), dim=-1)
    t = torch.nn.functional.normalize(t.float(), dim=-1)
    return [float(s) for s in (v * t).sum(-1)]


def t2t_settings(config: T2TConfig) -> dict[str, Any]:
    """What the T2T similarities depend on (the threshold is applied afterwards)."""
    return {k: v for k, v in asdict(config).items() if k == "model"}
