"""One interface over every embedder the benchmark, the index and search use (UVR as GVE
Definition 1 states it: relevance s = cos(E(q), E(v)) of one embedding per side):
`embed(items, instruction, batch_size) -> [N, d]` L2-normalised float32 CPU tensors, a
`fingerprint` naming the model and its preprocessing (caches and indexes are keyed by it), and the
item `modalities` it accepts.

- `GVEItemEmbedder`: a GVE / Qwen2.5-VL embedder (every modality and composition).
- `DualEncoderEmbedder`: a CLIP-style `DualEncoderRetrieval` whose head is indexable (text and
  video items; frames sampled as its data module does).
- `MTEBEncoderEmbedder`: any object with MTEB's `encode(inputs, *, task_metadata, hf_split,
  hf_subset, prompt_type)` (batches are dicts of lists: `text`, `image` as PIL images, `video` as
  `[T, C, H, W]` uint8 tensors, which is what MTEB's frame collator hands a model).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from lit_retrieval.data.media import MediaItem
from lit_retrieval.data.transforms import NormalizeFrames
from lit_retrieval.data.video import Sampling, SamplingSpec, sample_frames, sample_video
from lit_retrieval.models.gve import GVEEmbedder


class ItemEmbedder(Protocol):
    fingerprint: str
    modalities: set[str]

    def embed(self, items: list[MediaItem], instruction: str | None = None, batch_size: int = 8) -> torch.Tensor: ...


def digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def file_identity(path: str | Path) -> list:
    """(resolved path, size, mtime) of a file, or of every file in a directory."""
    path = Path(path)
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return [[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns] for p in files]


def check_modalities(embedder: ItemEmbedder, items: list[MediaItem]) -> None:
    unsupported = {i.modality for i in items} - embedder.modalities
    if unsupported:
        raise ValueError(f"this model embeds {sorted(embedder.modalities)} items, not {sorted(unsupported)}")


class GVEItemEmbedder:
    modalities = {"T", "I", "V", "TI", "TV", "IV", "TIV"}

    def __init__(self, embedder: GVEEmbedder, identity: Any) -> None:
        self.embedder = embedder.eval()
        self.fingerprint = digest("gve", identity, asdict(embedder.processing.config))

    def embed(self, items: list[MediaItem], instruction: str | None = None, batch_size: int = 8) -> torch.Tensor:
        return self.embedder.embed(items, instruction, batch_size).float().cpu()


class DualEncoderEmbedder:
    """Text items through the text tower and head; video items (their window) as `num_frames`
    frames at `image_size` (`sampling`: `exact` or `keyframe`), normalised with `mean`/`std`, through
    the vision tower and head. Instructions do not apply to these models and are ignored."""

    modalities = {"T", "V"}

    def __init__(
        self, module, identity: Any, num_frames: int, image_size: int, mean=None, std=None, sampling: Sampling = "exact"
    ) -> None:
        if not module.head.indexable:
            raise ValueError(f"{type(module.head).__name__} is not indexable (its score is not a dot product of one vector per side)")
        self.module = module.eval()
        self.spec = SamplingSpec(num_frames, image_size, sampling=sampling)
        self.normalize = NormalizeFrames(**{k: v for k, v in (("mean", mean), ("std", std)) if v is not None})
        self.fingerprint = digest("dual", identity, num_frames, image_size, mean, std, sampling)

    @torch.no_grad()
    def embed(self, items: list[MediaItem], instruction: str | None = None, batch_size: int = 8) -> torch.Tensor:
        check_modalities(self, items)
        device = next(self.module.parameters()).device
        out = []
        for start in range(0, len(items), batch_size):
            chunk = items[start : start + batch_size]
            if chunk[0].video is None:
                if any(i.video is not None for i in chunk):
                    raise ValueError("a batch mixes text and video items")
                rep = self.module.head.encode_text(self.module.encode_queries([[i.text] for i in chunk]))
            else:
                samples = [sample_video(i.video, self.spec, i.start, i.end) for i in chunk]
                batch = {
                    "frames": torch.stack([self.normalize(s.frames) for s in samples]).to(device),
                    "frame_mask": torch.from_numpy(np.stack([s.mask for s in samples])).to(device),
                }
                rep = self.module.encode_videos(batch)
            out.append(F.normalize(rep.float(), dim=-1).cpu())
        return torch.cat(out) if out else torch.empty(0)


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
                torch.from_numpy(sample_frames(i.video, self.num_frames, i.start, i.end).frames).permute(0, 3, 1, 2) if i.video else None
                for i in items
            ]
        return batch

    def embed(self, items: list[MediaItem], instruction: str | None = None, batch_size: int = 8) -> torch.Tensor:
        check_modalities(self, items)
        batches = [self._batch(items[i : i + batch_size]) for i in range(0, len(items), batch_size)]
        prompt_type = "query" if instruction else "document"
        metadata = {"prompt": {"query": instruction}} if instruction else None
        out = self.model.encode(batches, task_metadata=metadata, hf_split="test", hf_subset="default", prompt_type=prompt_type)
        return F.normalize(torch.as_tensor(np.asarray(out), dtype=torch.float32), dim=-1)
