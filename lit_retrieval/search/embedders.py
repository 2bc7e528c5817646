"""One interface over every embedder the benchmark, the index and search use (UVR as GVE
Definition 1 states it: relevance s = cos(E(q), E(v)) of one embedding per side):
`embed(items, instruction, batch_size) -> [N, d]` L2-normalised float32 CPU tensors, a
`fingerprint` naming the model and its preprocessing (caches and indexes are keyed by it), and the
item `modalities` it accepts.

- `GVEItemEmbedder`, `DualEncoderEmbedder`: what the project's modules offer
  (`module.item_embedder()`, defined with the interface in `lit_retrieval/modules/item_embedders.py`).
- `MTEBEncoderEmbedder`: any object with MTEB's `encode(inputs, *, task_metadata, hf_split,
  hf_subset, prompt_type)` (batches are dicts of lists: `text`, `image` as PIL images, `video` as
  `[T, C, H, W]` uint8 tensors, which is what MTEB's frame collator hands a model).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from lit_retrieval.data.items import MediaItem
from lit_retrieval.data.media.identity import digest
from lit_retrieval.data.media.video import sample_frames
from lit_retrieval.models.heads.base import cat_reps, rep_len
from lit_retrieval.modules.item_embedders import (
    DualEncoderEmbedder,
    FrameInput,
    GVEItemEmbedder,
    HeadItemEncoder,
    ItemEmbedder,
    check_modalities,
)
from lit_retrieval.progress import Progress

__all__ = [
    "DualEncoderEmbedder",
    "FrameInput",
    "GVEItemEmbedder",
    "HeadItemEncoder",
    "ItemEmbedder",
    "MTEBEncoderEmbedder",
    "check_modalities",
    "embed_tracked",
]


def embed_tracked(
    embedder: ItemEmbedder | HeadItemEncoder,
    items: list[MediaItem],
    instruction: str | None,
    batch_size: int,
    label: str,
) -> Any:
    """`embedder.embed(items, instruction, batch_size)` in chunks of 16 batches, with the items
    embedded so far shown by a `Progress` (`uvrb` per dataset, `mine-negatives`). The batches are
    cut as one call cuts them, and every embedder embeds a batch on its own: the same vectors (or
    a `HeadItemEncoder`'s representations, concatenated with `cat_reps`)."""
    if not items:
        return embedder.embed(items, instruction, batch_size)
    step, parts = 16 * batch_size, []
    with Progress(f"embedding {label}", len(items), unit="items") as bar:
        for start in range(0, len(items), step):
            parts.append(embedder.embed(items[start : start + step], instruction, batch_size))
            bar.advance(rep_len(parts[-1]))
    return cat_reps(parts)


class MTEBEncoderEmbedder:
    """Adapts an MTEB-style encoder. `modalities` says which item kinds it handles."""

    def __init__(self, model, name: str, modalities: set[str], num_frames: int = 8) -> None:
        self.model = model
        self.modalities = modalities
        self.num_frames = num_frames
        self.fingerprint = digest("mteb", name, num_frames)

    def _batch(self, items: list[MediaItem]) -> dict[str, list]:
        batch: dict[str, list] = {}
        if any(i.text is not None for i in items):
            batch["text"] = [i.text or "" for i in items]
        if any(i.image is not None for i in items):
            batch["image"] = [Image.open(i.image).convert("RGB") if i.image else None for i in items]
        if any(i.video is not None for i in items):
            batch["video"] = [
                torch.from_numpy(sample_frames(i.video, self.num_frames, i.start, i.end).frames).permute(0, 3, 1, 2)
                if i.video
                else None
                for i in items
            ]
        return batch

    def embed(self, items: list[MediaItem], instruction: str | None = None, batch_size: int = 8) -> torch.Tensor:
        check_modalities(self, items)
        batches = [self._batch(items[i : i + batch_size]) for i in range(0, len(items), batch_size)]
        prompt_type = "query" if instruction else "document"
        metadata = {"prompt": {"query": instruction}} if instruction else None
        out = self.model.encode(
            batches, task_metadata=metadata, hf_split="test", hf_subset="default", prompt_type=prompt_type
        )
        return F.normalize(torch.as_tensor(np.asarray(out), dtype=torch.float32), dim=-1)
