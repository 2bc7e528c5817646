"""CLIP4Clip tightTransf (Luo et al. 2022, arXiv:2104.08860, Sec. 3.3 "tight type"): a cross
encoder. For every (text i, video j) pair the sequence [t_i; F_j,1..T] (sentence feature, then
frame features) goes through frame/type positions and `layers` CLIP blocks with the key mask
[1, m_j]; token 0 is pooled (LayerNorm -> Linear -> QuickGELU) and a linear layer gives the score.

The score is a logit: no normalisation and no temperature (`logits` is the identity). Nothing is
indexable: scoring N_t x N_v pairs runs N_t * N_v sequences, in memory-bounded blocks at
evaluation (`score_blocks`). As in the reference, training contrasts the local batch only.
Difference from the reference: the final linear layer has no bias. It would add one constant to
every pair's score, which neither InfoNCE nor the MEA margins can see, so it never learns.
"""

from __future__ import annotations

import torch
from torch import nn

from lit_retrieval.models.encoders.base import VideoTextEncoder
from lit_retrieval.models.features import TextFeatures, VideoFeatures
from lit_retrieval.models.heads.base import SimilarityHead
from lit_retrieval.models.heads.temporal import CROSS_LAYER_NORM_EPS, ClipStyleTransformer, init_new_layers


class TightTransfHead(SimilarityHead):
    """Args:
    layers: cross-encoder blocks (CLIP4Clip: 4, copied from CLIP text blocks 0-3).
    max_frames: longest video; the position table holds 1 + max_frames rows.
    dropout: on the input embeddings (CLIP4Clip: 0.1).
    init_from_text: copy CLIP's text blocks and positions into the cross encoder.
    layer_norm_eps: LayerNorm eps of the cross encoder and the pooler (CLIP4Clip's 1e-12; 1e-5
        reproduces runs trained before this default).
    """

    indexable = False

    def __init__(
        self,
        layers: int = 4,
        max_frames: int = 76,
        dropout: float = 0.1,
        init_from_text: bool = True,
        layer_norm_eps: float = CROSS_LAYER_NORM_EPS,
    ) -> None:
        super().__init__(learn_logit_scale=False)
        self.layer_norm_eps = layer_norm_eps
        self.layers = layers
        self.max_frames = max_frames
        self.dropout = dropout
        self.init_from_text = init_from_text
        self.cross: ClipStyleTransformer | None = None
        self.pooler: nn.Sequential | None = None
        self.dense: nn.Linear | None = None

    def bind(self, encoder: VideoTextEncoder) -> None:
        width = encoder.embed_dim
        self.cross = ClipStyleTransformer.for_encoder(
            encoder,
            self.layers,
            1 + self.max_frames,
            self.dropout,
            copy_text=self.init_from_text,
            layer_norm_eps=self.layer_norm_eps,
        )
        # the reference's CrossPooler: its ln_pool is CLIP4Clip's LayerNorm too
        self.pooler = nn.Sequential(nn.LayerNorm(width, eps=self.layer_norm_eps), nn.Linear(width, width))
        self.dense = nn.Linear(width, 1, bias=False)  # a bias would be one constant on every score
        init_new_layers(self.pooler)
        init_new_layers(self.dense)

    def encode_text(self, text: TextFeatures) -> torch.Tensor:
        return text.pooled

    def encode_video(self, video: VideoFeatures) -> dict[str, torch.Tensor]:
        return {"frames": video.frames, "mask": video.mask}

    def joint_scores(self, text: torch.Tensor, frames: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Scores of aligned pairs: text n [N, D] with video n (frames [N, T, D], mask [N, T])."""
        if self.cross is None or self.pooler is None or self.dense is None:
            raise RuntimeError("TightTransfHead is not bound to an encoder: call head.bind(encoder) first")
        sequence = torch.cat([text.unsqueeze(1), frames], 1)
        keys = torch.cat([mask.new_ones(len(mask), 1), mask.bool()], 1)
        pooled = self.cross(sequence, keys)[:, 0]
        hidden = self.pooler(pooled)
        return self.dense(hidden * torch.sigmoid(1.702 * hidden)).squeeze(-1)  # QuickGELU

    def score(self, text_rep: torch.Tensor, video_rep: dict[str, torch.Tensor]) -> torch.Tensor:
        num_text, num_video = len(text_rep), len(video_rep["frames"])
        text = text_rep.repeat_interleave(num_video, 0)
        frames = video_rep["frames"].repeat(num_text, 1, 1)
        mask = video_rep["mask"].repeat(num_text, 1)
        return self.joint_scores(text, frames, mask).view(num_text, num_video)

    def score_pairs(self, text_rep: torch.Tensor, video_rep: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.joint_scores(text_rep, video_rep["frames"], video_rep["mask"])

    def pair_bytes(self, text_rep: torch.Tensor, video_rep: dict[str, torch.Tensor]) -> int:
        """A (1 + T) x D sequence with a 4x MLP and attention per block, under no_grad: about 16
        activations of (1 + T) x D floats (measured: 54 kB per pair at T = 12, D = 64)."""
        length, width = 1 + video_rep["frames"].shape[1], video_rep["frames"].shape[2]
        return 4 * 16 * length * width

    def logits(self, similarity: torch.Tensor) -> torch.Tensor:
        return similarity
