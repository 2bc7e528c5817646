"""TS2-Net (Liu et al., ECCV 2022, arXiv:2207.07852): token shift inside the last ViT blocks,
token selection, a temporal transformer over the selected tokens, and text-conditioned frame
weighting.

- Token shift (reference until_module.py), through `encoder.add_vision_hook`: in the last `shift_blocks` vision
  blocks, before attention, the patch positions 1, 1 + fold, 1 + 2 fold, ... below N take their
  whole feature vector from the previous frame and 4, 4 + fold, ... from the next, fold =
  N // n_div (7 positions each way at 50 and 197 tokens, 8 at 257, as in the reference); the class
  token and the residual path are untouched.
- Token selection (reference differential_topk.py): a scorer (LayerNorm, Linear, GELU, concatenated with the frame's
  class-token code, Linear, GELU, Linear, tanh) rates the patches; a perturbed top-k (k tokens,
  `samples` Gaussian perturbations of scale `sigma`, gradients by the perturbed-optimiser
  estimator) softly selects k of them, so each frame becomes [CLS; k tokens].
- Temporal module (reference modeling.py): seqTransf over all (1 + k) T tokens, positions per token, residual;
  each frame's class token is kept: F' [B, T, D].
- Score (reference modeling.py): s_k = t . f'_k; r = (m * s) / ||m * s||; a = softmax_k(4 r) over valid frames;
  S = sum_k a_k s_k (the logit temperature is the head's).

Differences from the reference, on purpose: the frame mask is interleaved per token
(`repeat_interleave`, fixing the reference's tiling bug); padded frames take no part in the shift
(only valid frames are encoded; a video's first and last valid frames keep their own tokens);
selection is a deterministic hard top-k at evaluation (the reference perturbs at test time too,
which makes its scores stochastic); the position table holds (1 + k) * max_frames rows instead of
77, so 32 or 64 frames fit. The transductive dual-softmax re-scoring the reference applies at test
time is not used. A token count whose two shift position sets would share a position (fold 1 or 3:
7-13 or 21-27 tokens at `n_div` 7) is refused; the reference lets the second shift overwrite the
first there.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lit_retrieval.models.encoders.base import VideoTextEncoder
from lit_retrieval.models.features import TextFeatures, VideoFeatures
from lit_retrieval.models.heads.base import SimilarityHead
from lit_retrieval.models.heads.temporal import CROSS_LAYER_NORM_EPS, ClipStyleTransformer, init_new_layers

FRAME_WEIGHT_SCALE = 4.0  # fixed in the reference


class TokenShift:
    """The vision hook: shift the positions `offsets[0] + k fold` (k = 0, 1, ... while below N)
    from the previous and `offsets[1] + k fold` from the next frame of the same video, fold =
    N // n_div, every such position as the reference does (not only the first `n_div`). Where the
    two sets would share a position (fold 1 or 3 with the offsets 1 and 4, i.e. tiny token counts)
    it refuses; the reference lets the second shift overwrite the first there."""

    def __init__(self, n_div: int = 7, offsets: tuple[int, int] = (1, 4)) -> None:
        self.n_div = n_div
        self.offsets = offsets

    def positions(self, num_tokens: int) -> tuple[list[int], list[int]]:
        fold = max(1, num_tokens // self.n_div)
        back = list(range(self.offsets[0], num_tokens, fold))
        ahead = list(range(self.offsets[1], num_tokens, fold))
        if set(back) & set(ahead):
            raise ValueError(
                f"token shift: {num_tokens} tokens are too few for n_div={self.n_div} with offsets {self.offsets}"
            )
        return back, ahead

    def __call__(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        back, ahead = self.positions(tokens.shape[1])
        ends = torch.cumsum(lengths.to(tokens.device), 0)
        starts = ends - lengths.to(tokens.device)
        index = torch.arange(len(tokens), device=tokens.device)
        video_start = torch.repeat_interleave(starts, lengths.to(tokens.device))
        video_end = torch.repeat_interleave(ends, lengths.to(tokens.device))
        previous = torch.where(index > video_start, index - 1, index)
        following = torch.where(index + 1 < video_end, index + 1, index)
        shifted = tokens.clone()
        shifted[:, back] = tokens[previous][:, back]
        shifted[:, ahead] = tokens[following][:, ahead]
        return shifted


class PerturbedTopK(torch.autograd.Function):
    """Soft top-k indicators E[onehot(topk(x + sigma Z))] with Z ~ N(0, 1); backward by the
    perturbed-optimiser estimator E[onehot * Z] / sigma (Berthet et al. 2020), as TS2-Net does."""

    @staticmethod
    def forward(ctx, scores: torch.Tensor, k: int, samples: int, sigma: float) -> torch.Tensor:
        noise = torch.randn(*scores.shape[:-1], samples, scores.shape[-1], device=scores.device, dtype=scores.dtype)
        picks = torch.topk(scores.unsqueeze(-2) + sigma * noise, k, dim=-1).indices.sort(-1).values
        onehot = F.one_hot(picks, scores.shape[-1]).to(scores.dtype)  # [..., samples, k, P]
        ctx.save_for_backward(onehot, noise)
        ctx.sigma = sigma
        return onehot.mean(-3)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        onehot, noise = ctx.saved_tensors
        weight = torch.einsum("...kp,...skp->...s", grad, onehot)
        return torch.einsum("...s,...sq->...q", weight, noise) / (noise.shape[-2] * ctx.sigma), None, None, None


class TokenScorer(nn.Module):
    """TS2-Net's `PredictorLG`: a score in (-1, 1) for every patch token given its frame's CLS."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.local = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width // 2, bias=False), nn.GELU())
        self.joint = nn.Sequential(
            nn.Linear(width // 2 * 2, width // 2, bias=False),
            nn.GELU(),
            nn.Linear(width // 2, 1, bias=False),
            nn.Tanh(),
        )
        init_new_layers(self)

    def forward(self, cls: torch.Tensor, patches: torch.Tensor) -> torch.Tensor:
        """`cls` [F, D], `patches` [F, P, D] -> scores [F, P]."""
        codes = self.local(torch.cat([cls.unsqueeze(1), patches], 1))
        joint = torch.cat([codes[:, 1:], codes[:, :1].expand_as(codes[:, 1:])], -1)
        return self.joint(joint).squeeze(-1)


class PatchSelectingHead(SimilarityHead):
    """A head whose frames keep their CLS and k selected patch tokens, with TS2-Net's token shift in
    the last vision blocks (UCoFiA, arXiv:2309.10091, uses both too). Subclasses call
    `bind_patch_selection` from `bind` and `selected_tokens` from `encode_video`.

    Args:
        select: k patch tokens kept per frame besides CLS (reference: 3).
        samples, sigma: perturbed top-k (reference: 500, 0.05).
        shift_blocks: last vision blocks with token shift (reference: 2); 0 turns the shift off.
        n_div: the fold divisor: positions fold = N // n_div apart shift (reference: 7).
    """

    indexable = False
    needs_patches = True

    def __init__(
        self, select: int = 3, samples: int = 500, sigma: float = 0.05, shift_blocks: int = 2, n_div: int = 7, **kwargs
    ) -> None:
        super().__init__(**kwargs)
        self.select, self.samples, self.sigma = select, samples, sigma
        self.shift_blocks = shift_blocks
        self.shift = TokenShift(n_div)
        self.scorer: TokenScorer | None = None

    def bind_patch_selection(self, encoder: VideoTextEncoder) -> None:
        for block in range(-self.shift_blocks, 0):
            encoder.add_vision_hook(block, self.shift)
        self.scorer = TokenScorer(encoder.embed_dim)

    def selected_tokens(self, video: VideoFeatures) -> tuple[torch.Tensor, torch.Tensor]:
        """`[B, T (1 + k), D]`: each frame's CLS then its k selected patches (soft perturbed top-k
        indicators in training, a deterministic hard top-k at evaluation), and their mask."""
        name = type(self).__name__
        if self.scorer is None:
            raise RuntimeError(f"{name} is not bound to an encoder: call head.bind(encoder) first")
        if video.patches is None:
            raise ValueError(f"{name} needs patch tokens: encode videos with with_patches=True")
        batch, length, dim = video.frames.shape
        cls, patches = video.frames.reshape(-1, dim), video.patches.reshape(batch * length, -1, dim)
        scores = self.scorer(cls, patches)
        if self.training:
            indicators = PerturbedTopK.apply(scores, self.select, self.samples, self.sigma)
        else:
            picks = torch.topk(scores, self.select, dim=-1).indices.sort(-1).values
            indicators = F.one_hot(picks, scores.shape[-1]).to(patches.dtype)
        per_frame = torch.cat([cls.unsqueeze(1), indicators @ patches], 1)
        # mask interleaved per token (the reference's `repeat` tiles it)
        return per_frame.reshape(batch, length * (1 + self.select), dim), video.mask.bool().repeat_interleave(
            1 + self.select, dim=1
        )


class TS2NetHead(PatchSelectingHead):
    """Args:
    select, samples, sigma, shift_blocks, n_div: see `PatchSelectingHead`.
    temporal_layers, max_frames, init_from_text: the seqTransf temporal module.
    layer_norm_eps: LayerNorm eps of the temporal module (CLIP4Clip's 1e-12; 1e-5 reproduces
        runs trained before this default). The token scorer keeps torch's 1e-5, as the
        reference's `PredictorLG` does.
    """

    def __init__(
        self,
        temporal_layers: int = 4,
        max_frames: int = 64,
        init_from_text: bool = True,
        layer_norm_eps: float = CROSS_LAYER_NORM_EPS,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.layer_norm_eps = layer_norm_eps
        self.temporal_layers = temporal_layers
        self.max_frames = max_frames
        self.init_from_text = init_from_text
        self.temporal: ClipStyleTransformer | None = None

    def bind(self, encoder: VideoTextEncoder) -> None:
        self.bind_patch_selection(encoder)
        self.temporal = ClipStyleTransformer.for_encoder(
            encoder,
            self.temporal_layers,
            (1 + self.select) * self.max_frames,
            copy_text=self.init_from_text,
            layer_norm_eps=self.layer_norm_eps,
        )

    def encode_text(self, text: TextFeatures) -> torch.Tensor:
        return F.normalize(text.pooled, dim=-1)

    def encode_video(self, video: VideoFeatures) -> dict[str, torch.Tensor]:
        if video.frames.shape[1] > self.max_frames:
            raise ValueError(f"{video.frames.shape[1]} frames but TS2NetHead.max_frames is {self.max_frames}")
        tokens, token_mask = self.selected_tokens(video)
        tokens = self.temporal(tokens, token_mask) + tokens
        frames = tokens[:, :: 1 + self.select] * video.mask.unsqueeze(-1)
        return {"frames": F.normalize(frames, dim=-1), "mask": video.mask.bool()}

    @staticmethod
    def weighted(similarities: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """sum_k a_k s_k with a = softmax(4 * normalised masked s) over valid frames (last dim)."""
        masked = similarities * mask
        r = masked / masked.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        attend = mask | ~mask.any(-1, keepdim=True)
        weights = torch.softmax((FRAME_WEIGHT_SCALE * r).masked_fill(~attend, float("-inf")), -1)
        return (weights * masked).sum(-1)

    def score(self, text_rep: torch.Tensor, video_rep: dict[str, torch.Tensor]) -> torch.Tensor:
        similarities = torch.einsum("id,jkd->ijk", text_rep, video_rep["frames"])
        return self.weighted(similarities, video_rep["mask"].unsqueeze(0))

    def score_pairs(self, text_rep: torch.Tensor, video_rep: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.weighted(torch.einsum("nd,nkd->nk", text_rep, video_rep["frames"]), video_rep["mask"])

    def pair_bytes(self, text_rep: torch.Tensor, video_rep: dict[str, torch.Tensor]) -> int:
        return 4 * 4 * video_rep["frames"].shape[1]
