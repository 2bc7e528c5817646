"""CLIP4Clip mean pooling ("meanP", Luo et al. 2022, Sec. 3.3; baselines spec 1.1)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lit_retrieval.models.features import TextFeatures, VideoFeatures
from lit_retrieval.models.heads.base import SimilarityHead


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `x` [B, T, D] over the positions where `mask` [B, T] is set (zeros if none)."""
    weights = mask.unsqueeze(-1).to(x.dtype)
    return (x * weights).sum(1) / weights.sum(1).clamp_min(1.0)


class MeanPHead(SimilarityHead):
    """Parameter-free temporal pooling: v = norm(mean_k norm(f_k)) over valid frames,
    t = norm(sentence feature), s = t . v (cosine). Indexable."""

    indexable = True

    def encode_text(self, text: TextFeatures) -> torch.Tensor:
        return F.normalize(text.pooled, dim=-1)

    def encode_video(self, video: VideoFeatures) -> torch.Tensor:
        return F.normalize(masked_mean(F.normalize(video.frames, dim=-1), video.mask), dim=-1)

    def score(self, text_rep: torch.Tensor, video_rep: torch.Tensor) -> torch.Tensor:
        return text_rep @ video_rep.t()

    def score_pairs(self, text_rep: torch.Tensor, video_rep: torch.Tensor) -> torch.Tensor:
        return (text_rep * video_rep).sum(-1)
