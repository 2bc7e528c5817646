"""UATVR: uncertainty-adaptive text-video retrieval (Fang et al., ICCV 2023, arXiv:2301.06309).

Deterministic matcher ("dynamic semantic adaptation", used for training and inference):
- E_v = 2 learnable extra video tokens (rows T, T+1 of the frame-position table, T the sampled frames;
  no content) and E_t = 2 extra text tokens (the last 2 rows of a separate word-position table of
  max_words rows, N(0, 0.02) init; the words take its first rows) are appended;
- one *shared* CLIP-style transformer (4 blocks, copied from CLIP's text blocks as CLIP4Clip does)
  processes the video sequence [frames; extras] and the text sequence [words; extras]; the
  residual is added to the original positions only;
- all tokens are L2-normalised; token weights pi = softmax over valid tokens of a
  Linear-ReLU-Linear head per modality; the score is the two-sided weighted max-sim

      S_ab = 1/2 [ sum_i pi^t_ai max_j c_ab,ij + sum_j pi^v_bj max_i c_ab,ij ].

Probabilistic branch (training-only regulariser, as in the reference code): per modality a PIE-style head gives
mu = normalize(LN(pooled + sigmoid(FC(attention-pooled)))) and log sigma = FC(attention-pooled) +
FC(pooled); K = 7 samples z = mu + eps * exp(log sigma) per item enter a multi-instance NCE over
all samples (positives: the paired item's K samples; no temperature) and a KL term to N(0, I),
a *sum* over batch and dimensions as in the reference. Loss weights 0.01 and 1e-4 (reference).
Inference never touches this branch.

Differences from the reference, each a fix: the text extras take the word-position table's last rows
whatever the batch's padding (the reference pads to a fixed max_words, so they follow it; padding to the
batch's longest caption moved them with the batch, and a caption's score with it: 2 evaluation ranks gave
other metrics than one, issue 57); padded positions are excluded from the max and from
the token weights (the reference zeroes their cosines, so a padded position can win the max when
all real cosines are negative), and the attention pooling of the text PIE head honours the word
mask (the reference pools over padding too). The reference's KL mixes a log-variance reading of
log sigma with sampling by exp(log sigma) as a standard deviation; we keep both as they are.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lit_retrieval.models.encoders.base import VideoTextEncoder
from lit_retrieval.models.features import TextFeatures, VideoFeatures
from lit_retrieval.models.heads.base import SimilarityHead, masked_softmax
from lit_retrieval.models.heads.meanp import masked_mean
from lit_retrieval.models.heads.temporal import CROSS_LAYER_NORM_EPS, ClipStyleTransformer, init_new_layers


def token_weight_head(width: int) -> nn.Sequential:
    """Linear-ReLU-Linear token scorer. The last layer has no bias: a constant added before the
    softmax over tokens changes nothing, so the reference's bias never receives a gradient."""
    return nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1, bias=False))


class ProbabilisticEmbedding(nn.Module):
    """PIE-style mean and log-sigma heads over a token sequence (UATVR `prob_models`)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.attention = nn.Sequential(nn.Linear(width, width // 2), nn.Tanh(), nn.Linear(width // 2, 1, bias=False))
        self.mean_fc = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        self.sigma_attended = nn.Linear(width, width)
        self.sigma_pooled = nn.Linear(width, width)

    def forward(
        self, tokens: torch.Tensor, mask: torch.Tensor, pooled: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        weights = masked_softmax(self.attention(tokens).squeeze(-1), mask)
        attended = (weights.unsqueeze(-1) * tokens).sum(1)
        mu = F.normalize(self.norm(pooled + torch.sigmoid(self.mean_fc(attended))), dim=-1)
        log_sigma = self.sigma_attended(attended) + self.sigma_pooled(pooled)
        return mu, log_sigma


def mil_nce(video_samples: torch.Tensor, text_samples: torch.Tensor) -> torch.Tensor:
    """Multi-instance NCE over samples `[B, K, D]`: every sample of item b against all B*K samples
    of the other modality, the K samples of item b being the positives; both directions averaged."""
    size, k, _ = video_samples.shape
    logits = video_samples.reshape(size * k, -1) @ text_samples.reshape(size * k, -1).t()
    owner = torch.arange(size, device=logits.device).repeat_interleave(k)
    positive = (owner[:, None] == owner[None, :]).to(logits.dtype)

    def direction(rows: torch.Tensor) -> torch.Tensor:
        return -(torch.log_softmax(rows, 1) * positive).sum(1).div(k).mean()

    return 0.5 * (direction(logits) + direction(logits.t()))


def gaussian_kl(samples: torch.Tensor, log_sigma: torch.Tensor) -> torch.Tensor:
    """The reference's KL to N(0, I): 1/2 sum(exp(log sigma) + m^2 - 1 - log sigma), m the mean of
    the samples; a sum over items and dimensions."""
    m = samples.mean(1)
    return 0.5 * (log_sigma.exp() + m.pow(2) - 1 - log_sigma).sum()


class UATVRHead(SimilarityHead):
    """UATVR head (see the module notes). Not indexable (pairwise max-sim).

    Args:
        extra_video_tokens / extra_text_tokens: E_v, E_t (2 and 2).
        layers: blocks of the shared transformer (4).
        max_frames: rows of the frame-position table (frames + E_v must fit; 77 as CLIP4Clip).
        max_words: rows of the word-position table (words + E_t must fit); by default the
            encoder's `max_text_len` + E_t (79 for CLIP, 250 for Long-CLIP).
        samples: K sampled embeddings per item (7).
        mil_weight / kl_weight: 0.01 and 1e-4 (reference).
        init_from_text: copy CLIP's text blocks and positions into the shared transformer.
        layer_norm_eps: LayerNorm eps of the shared transformer (CLIP4Clip's 1e-12, as UATVR's
            `module_cross.py`; 1e-5 reproduces runs trained before this default). The PIE heads'
            LayerNorm keeps torch's 1e-5, as the reference's `prob_models/pie_model.py`.
    """

    grad_cache_obstacle = (
        "its text tokens (words padded to the call's longest text, then learned extras at positions after them) "
        "depend on the other texts of a chunk"
    )

    def __init__(
        self,
        extra_video_tokens: int = 2,
        extra_text_tokens: int = 2,
        layers: int = 4,
        max_frames: int = 77,
        max_words: int | None = None,
        samples: int = 7,
        mil_weight: float = 0.01,
        kl_weight: float = 1e-4,
        init_from_text: bool = True,
        layer_norm_eps: float = CROSS_LAYER_NORM_EPS,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.layer_norm_eps = layer_norm_eps
        self.extra_video, self.extra_text = extra_video_tokens, extra_text_tokens
        self.layers, self.max_frames, self.max_words = layers, max_frames, max_words
        self.samples = samples
        self.mil_weight, self.kl_weight = mil_weight, kl_weight
        self.init_from_text = init_from_text
        self.fusion: ClipStyleTransformer | None = None

    def bind(self, encoder: VideoTextEncoder) -> None:
        width = encoder.embed_dim
        self.max_words = self.max_words or encoder.max_text_len + self.extra_text
        self.fusion = ClipStyleTransformer.for_encoder(
            encoder, self.layers, self.max_frames, copy_text=self.init_from_text, layer_norm_eps=self.layer_norm_eps
        )
        self.word_positions = nn.Embedding(self.max_words, width)
        self.text_weights, self.video_weights = token_weight_head(width), token_weight_head(width)
        self.text_prob, self.video_prob = ProbabilisticEmbedding(width), ProbabilisticEmbedding(width)
        for module in (self.word_positions, self.text_weights, self.video_weights, self.text_prob, self.video_prob):
            init_new_layers(module)

    def _fuse(
        self, tokens: torch.Tensor, mask: torch.Tensor, extras: int, positions: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """[tokens; extras] through the shared transformer; residual on the originals; normalised."""
        if self.fusion is None:
            raise RuntimeError("UATVRHead is not bound to an encoder: call head.bind(encoder) first")
        size, length, width = tokens.shape
        sequence = torch.cat([tokens, tokens.new_zeros(size, extras, width)], 1)
        full_mask = torch.cat([mask.bool(), mask.new_ones(size, extras, dtype=torch.bool)], 1)
        fused = self.fusion(sequence, full_mask, positions)
        fused = torch.cat([fused[:, :length] + tokens, fused[:, length:]], 1)
        return F.normalize(fused, dim=-1), full_mask

    def encode_text(self, text: TextFeatures) -> dict[str, torch.Tensor]:
        """Words at rows 0..L-1 of the word-position table, the extras at its last rows, whatever the
        batch's padding L (the reference pads every caption to its max_words, so its extras always
        take the rows after it): a caption's tokens do not depend on the captions batched with it."""
        words = text.tokens.shape[1]
        if words + self.extra_text > self.max_words:
            raise ValueError(
                f"{words + self.extra_text} text positions (words + extras) but max_words is {self.max_words}"
            )
        table = self.word_positions.weight
        positions = torch.cat([table[:words], table[self.max_words - self.extra_text :]])
        tokens, mask = self._fuse(text.tokens, text.mask, self.extra_text, positions)
        return {"tokens": tokens, "mask": mask}

    def encode_video(self, video: VideoFeatures) -> dict[str, torch.Tensor]:
        if video.frames.shape[1] + self.extra_video > self.max_frames:
            raise ValueError(
                f"{video.frames.shape[1]} frames + {self.extra_video} extras exceed max_frames {self.max_frames}"
            )
        tokens, mask = self._fuse(video.frames, video.mask, self.extra_video, None)
        return {"tokens": tokens, "mask": mask}

    def pair_bytes(self, text_rep: dict, video_rep: dict) -> int:
        return 4 * 3 * text_rep["tokens"].shape[1] * video_rep["tokens"].shape[1]

    def score(self, text_rep: dict, video_rep: dict) -> torch.Tensor:
        t_tokens, t_mask = text_rep["tokens"], text_rep["mask"]
        v_tokens, v_mask = video_rep["tokens"], video_rep["mask"]
        cos = torch.einsum("aid,bjd->abij", t_tokens, v_tokens)
        pair_mask = t_mask[:, None, :, None] & v_mask[None, :, None, :]
        cos = cos.masked_fill(~pair_mask, float("-inf"))
        text_best = cos.amax(-1).masked_fill(~t_mask[:, None, :], 0.0)  # [A, B, I]
        video_best = cos.amax(-2).masked_fill(~v_mask[None, :, :], 0.0)  # [A, B, J]
        pi_t = masked_softmax(self.text_weights(t_tokens).squeeze(-1), t_mask)  # [A, I]
        pi_v = masked_softmax(self.video_weights(v_tokens).squeeze(-1), v_mask)  # [B, J]
        return 0.5 * ((text_best * pi_t[:, None, :]).sum(-1) + (video_best * pi_v[None, :, :]).sum(-1))

    def auxiliary_losses(self, text_rep: dict, video_rep: dict, similarity: torch.Tensor) -> dict[str, torch.Tensor]:
        """The probabilistic branch (training only): MIL-NCE over sampled embeddings and KL."""
        if similarity.shape[0] != similarity.shape[1]:
            raise ValueError(
                f"UATVR's probabilistic branch needs paired texts and videos, got {tuple(similarity.shape)}"
            )
        frames = video_rep["tokens"].shape[1] - self.extra_video  # within a batch the extras come last
        v_tokens, v_mask = video_rep["tokens"][:, :frames], video_rep["mask"][:, :frames]
        words = text_rep["tokens"].shape[1] - self.extra_text
        t_tokens, t_mask = text_rep["tokens"][:, :words], text_rep["mask"][:, :words].clone()
        t_mask[:, 0] = False  # the pooled text leaves out the start token, as the reference does
        v_pooled = F.normalize(masked_mean(v_tokens, v_mask), dim=-1)
        t_pooled = F.normalize(masked_mean(t_tokens, t_mask), dim=-1)
        v_mu, v_log_sigma = self.video_prob(v_tokens, v_mask, v_pooled)
        t_mu, t_log_sigma = self.text_prob(t_tokens, t_mask, t_pooled)
        v_samples = (
            v_mu[:, None]
            + torch.randn(len(v_mu), self.samples, v_mu.shape[-1], device=v_mu.device, dtype=v_mu.dtype)
            * v_log_sigma.exp()[:, None]
        )
        t_samples = (
            t_mu[:, None]
            + torch.randn(len(t_mu), self.samples, t_mu.shape[-1], device=t_mu.device, dtype=t_mu.dtype)
            * t_log_sigma.exp()[:, None]
        )
        kl = gaussian_kl(v_samples, v_log_sigma) + gaussian_kl(t_samples, t_log_sigma)
        return {"mil": self.mil_weight * mil_nce(v_samples, t_samples), "kl": self.kl_weight * kl}
