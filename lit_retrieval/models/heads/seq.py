"""CLIP4Clip seqLSTM and seqTransf (Luo et al. 2022, arXiv:2104.08860, Sec. 3.3
"sequential type"): a temporal module over the frame features with a residual connection, F' = M(F) + F,
then meanP pooling. The video side stays text-independent, so both heads are indexable."""

from __future__ import annotations

from abc import abstractmethod

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from lit_retrieval.models.encoders.base import VideoTextEncoder
from lit_retrieval.models.features import VideoFeatures
from lit_retrieval.models.heads.meanp import MeanPHead, masked_mean
from lit_retrieval.models.heads.temporal import CROSS_LAYER_NORM_EPS, ClipStyleTransformer


class _TemporalMeanPHead(MeanPHead):
    """meanP over `temporal(F) + F`; subclasses build `temporal` in `bind`."""

    def __init__(self, **kwargs) -> None:
        super().__init__(pooling="frames", **kwargs)  # the temporal module works on frames
        self.temporal: nn.Module | None = None

    @abstractmethod
    def temporal_features(self, frames: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """M(F) [B, T, D] for frame features `frames` with valid positions `mask`."""

    def encode_video(self, video: VideoFeatures) -> torch.Tensor:
        if self.temporal is None:
            raise RuntimeError(f"{type(self).__name__} is not bound to an encoder: call head.bind(encoder) first")
        frames = self.temporal_features(video.frames, video.mask) + video.frames
        return F.normalize(masked_mean(F.normalize(frames, dim=-1), video.mask), dim=-1)


class SeqLSTMHead(_TemporalMeanPHead):
    """seqLSTM: a one-layer unidirectional LSTM (D -> D) over each video's valid frames.

    Difference from the reference: a video without valid frames gets length 1 instead of failing
    in `pack_padded_sequence` (its features are masked out of the mean anyway); the unused
    frame-position table of the reference is not created.
    """

    def bind(self, encoder: VideoTextEncoder) -> None:
        width = encoder.embed_dim
        self.temporal = nn.LSTM(width, width, batch_first=True)

    def temporal_features(self, frames: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        lengths = mask.sum(1).clamp_min(1).cpu()
        packed = pack_padded_sequence(frames, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.temporal(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=frames.shape[1])
        return out * mask.unsqueeze(-1).to(out.dtype)


class SeqTransfHead(_TemporalMeanPHead):
    """seqTransf: frame positions + `layers` CLIP blocks with a key mask over padded frames.

    Args:
        layers: transformer blocks (CLIP4Clip `cross_num_hidden_layers`, 4).
        max_frames: rows of the frame-position table (CLIP4Clip: 77).
        init_from_text: copy CLIP's text blocks 0..layers-1 and positions, as CLIP4Clip does.
        layer_norm_eps: LayerNorm eps of the blocks (CLIP4Clip's 1e-12; 1e-5 reproduces runs
            trained before this default).
    """

    def __init__(
        self,
        layers: int = 4,
        max_frames: int = 77,
        init_from_text: bool = True,
        layer_norm_eps: float = CROSS_LAYER_NORM_EPS,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.layers = layers
        self.max_frames = max_frames
        self.init_from_text = init_from_text
        self.layer_norm_eps = layer_norm_eps

    def bind(self, encoder: VideoTextEncoder) -> None:
        self.temporal = ClipStyleTransformer.for_encoder(
            encoder, self.layers, self.max_frames, copy_text=self.init_from_text, layer_norm_eps=self.layer_norm_eps
        )

    def temporal_features(self, frames: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.temporal(frames, mask)
