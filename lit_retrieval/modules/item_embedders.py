"""The item embedders the retrieval modules offer for search and UVRB (`item_embedder()` of
`DualEncoderRetrieval` and `GVERetrieval`), and the interface they share (UVR as GVE Definition 1
states it: relevance s = cos(E(q), E(v)) of one embedding per side): `embed(items, instruction,
batch_size) -> [N, d]` L2-normalised float32 CPU tensors, a `fingerprint` naming the model and
its preprocessing (caches and indexes are keyed by it), and the item `modalities` it accepts.

- `GVEItemEmbedder`: a GVE / Qwen2.5-VL embedder (every modality and composition).
- `DualEncoderEmbedder`: a CLIP-style `DualEncoderRetrieval` whose head is indexable (text and
  video items; frames sampled as its data module does, `FrameInput`).
- `HeadItemEncoder`: the same items as any head's representations (pairwise heads, which UVRB
  scores with `score_blocks`; not an `ItemEmbedder`: no unit vectors, no index).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, Protocol

import numpy as np
import torch
import torch.nn.functional as F

from lit_retrieval.data.items import MediaItem
from lit_retrieval.data.media.identity import digest
from lit_retrieval.data.media.normalize import NormalizeFrames
from lit_retrieval.data.media.shots import Shots, frame_shot_index
from lit_retrieval.data.media.video import Sampling, SamplingSpec, sample_video
from lit_retrieval.errors import ConfigError
from lit_retrieval.models.gve import GVEEmbedder
from lit_retrieval.models.heads.base import cat_reps, map_rep


@dataclass(frozen=True)
class FrameInput:
    """How a training config's data module turns a video into frames (`data.init_args`), so an
    index embeds videos as the model saw them in training. Dual encoders use all of it, GVE (whose
    processing samples its own frames) only `sampling`."""

    num_frames: int = 12
    image_size: int = 224
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    sampling: Sampling = "exact"


class ItemEmbedder(Protocol):
    fingerprint: str
    modalities: set[str]

    def embed(self, items: list[MediaItem], instruction: str | None = None, batch_size: int = 8) -> torch.Tensor: ...


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


class HeadItemEncoder:
    """Text and video items as a CLIP-style `DualEncoderRetrieval`'s head representations, for any
    head (a tensor or a dict of tensors per item kind; UVRB scores pairwise heads from them with
    `SimilarityHead.score_blocks`). Text items go through `query_reps` (one-event queries); video
    items (their window) as `num_frames` frames at `image_size` (`sampling`: `exact` or
    `keyframe`), normalised with `mean`/`std`, through `encode_videos`, with each frame's shot
    (`frame_shot_index`) when `shots` gives the videos' shots (SALI's head needs them; `shot_key`
    names their settings in the fingerprint). Instructions do not apply to these models and are
    ignored."""

    modalities = {"T", "V"}
    kind = "head"  # part of the fingerprint: representations of another kind are never mixed up

    def __init__(
        self,
        module,
        identity: Any,
        num_frames: int,
        image_size: int,
        mean=None,
        std=None,
        sampling: Sampling = "exact",
        shots: Callable[[list[str]], list[Shots]] | None = None,
        shot_key: Any = None,
    ) -> None:
        self.module = module.eval()
        self.spec = SamplingSpec(num_frames, image_size, sampling=sampling)
        self.normalize = NormalizeFrames(**{k: v for k, v in (("mean", mean), ("std", std)) if v is not None})
        self.shots = shots
        settings = [num_frames, image_size, mean, std, sampling] + ([shot_key] if shots is not None else [])
        self.fingerprint = digest(self.kind, identity, *settings)

    @torch.no_grad()
    def embed(self, items: list[MediaItem], instruction: str | None = None, batch_size: int = 8) -> Any:
        """The head's representations of `items`, `batch_size` at a time, concatenated (`cat_reps`)."""
        check_modalities(self, items)
        out = [self.represent(items[start : start + batch_size]) for start in range(0, len(items), batch_size)]
        return cat_reps(out) if out else torch.empty(0)

    def represent(self, chunk: list[MediaItem]) -> Any:
        """One batch of items of one kind, as the head represents them (float32, on the CPU)."""
        if chunk[0].video is None:
            if any(i.video is not None for i in chunk):
                raise ValueError("a batch mixes text and video items")
            rep = self.module.query_reps([[i.text] for i in chunk])
        else:
            device = next(self.module.parameters()).device
            samples = [sample_video(i.video, self.spec, i.start, i.end) for i in chunk]
            batch = {
                "frames": torch.stack([self.normalize(s.frames) for s in samples]).to(device),
                "frame_mask": torch.from_numpy(np.stack([s.mask for s in samples])).to(device),
            }
            if self.shots is not None:
                shots = self.shots([str(i.video) for i in chunk])
                index = [frame_shot_index(s.times, video_shots) for s, video_shots in zip(samples, shots)]
                batch["frame_shots"] = torch.from_numpy(np.stack(index)).to(device)
            rep = self.module.encode_videos(batch)
        return map_rep(rep, lambda t: (t.float() if t.is_floating_point() else t).cpu())


class DualEncoderEmbedder(HeadItemEncoder):
    """A `HeadItemEncoder` of an indexable head: each item one L2-normalised vector."""

    kind = "dual"

    def __init__(
        self, module, identity: Any, num_frames: int, image_size: int, mean=None, std=None, sampling: Sampling = "exact"
    ) -> None:
        if not module.head.indexable:
            raise ConfigError(
                f"{type(module.head).__name__} is not indexable (its score is not a dot product of one vector per side)"
            )
        super().__init__(module, identity, num_frames, image_size, mean, std, sampling)

    def embed(self, items: list[MediaItem], instruction: str | None = None, batch_size: int = 8) -> torch.Tensor:
        return F.normalize(super().embed(items, instruction, batch_size), dim=-1) if items else torch.empty(0)
