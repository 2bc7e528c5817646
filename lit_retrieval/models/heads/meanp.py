"""CLIP4Clip mean pooling ("meanP", Luo et al. 2022, arXiv:2104.08860, Sec. 3.3)."""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from lit_retrieval.errors import ConfigError
from lit_retrieval.models.features import TextFeatures, VideoFeatures
from lit_retrieval.models.heads.base import SimilarityHead


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `x` [B, T, D] over the positions where `mask` [B, T] is set (zeros if none)."""
    weights = mask.unsqueeze(-1).to(x.dtype)
    return (x * weights).sum(1) / weights.sum(1).clamp_min(1.0)


def shot_means(
    frames: torch.Tensor, frame_shots: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean frame feature per shot: `frames [B, T, D]`, `frame_shots [B, T]` (shot of each frame,
    -1 where padded; shots numbered 0..S-1) -> `(shots [B, S_max, D], shot_mask [B, S_max])` with
    S_max the largest shot count of the batch (at least 1)."""
    valid = mask & (frame_shots >= 0)
    count = int(frame_shots.masked_fill(~valid, -1).max().clamp_min(0)) + 1
    slots = torch.arange(count, device=frames.device)
    member = (frame_shots.unsqueeze(1) == slots[None, :, None]) & valid.unsqueeze(1)  # [B, S, T]
    weights = member.to(frames.dtype)
    sizes = weights.sum(-1, keepdim=True)
    return (weights @ frames) / sizes.clamp_min(1.0), sizes.squeeze(-1) > 0


class MeanPHead(SimilarityHead):
    """Parameter-free temporal pooling: v = norm(mean_k norm(f_k)) over valid frames,
    t = norm(sentence feature), s = t . v (cosine). Indexable.

    Args:
        pooling: `frames` (CLIP4Clip) or `shots`: the mean of the shot means, the single video
            vector of SALI's diagnosis (Sec. 2), which needs the data's shots (`data.shots`).
    """

    indexable = True

    def __init__(self, pooling: Literal["frames", "shots"] = "frames", **kwargs) -> None:
        super().__init__(**kwargs)
        if pooling not in ("frames", "shots"):
            raise ConfigError(f"pooling must be 'frames' or 'shots', got {pooling!r}")
        self.pooling = pooling

    def encode_text(self, text: TextFeatures) -> torch.Tensor:
        return F.normalize(text.pooled, dim=-1)

    def encode_video(self, video: VideoFeatures) -> torch.Tensor:
        frames = F.normalize(video.frames, dim=-1)
        if self.pooling == "frames":
            return F.normalize(masked_mean(frames, video.mask), dim=-1)
        if video.shots is None:
            raise ValueError("MeanPHead(pooling='shots') needs each frame's shot index: configure `data.shots`")
        return F.normalize(masked_mean(*shot_means(frames, video.shots, video.mask)), dim=-1)

    def score(self, text_rep: torch.Tensor, video_rep: torch.Tensor) -> torch.Tensor:
        return text_rep @ video_rep.t()

    def score_pairs(self, text_rep: torch.Tensor, video_rep: torch.Tensor) -> torch.Tensor:
        return (text_rep * video_rep).sum(-1)
