"""UCoFiA: unified coarse-to-fine alignment (Wang et al., ICCV 2023, arXiv:2309.10091).

Three similarity levels, each aggregated by "interactive similarity aggregation" (ISA) with
identity-initialised re-weighting matrices, then averaged (reference modeling_ucofia.py). With SM(x) = softmax(x / tau),
tau = 0.01, and ISA_W(x) = sum_j SM(SM(x) W)_j x_j over the valid entries of x:

- level 1, video-sentence: S1 = (s G1) . (v G2), v the seqTransf mean video (G1, G2: D x D);
- level 2, sentence-frame: S2 = ISA_WF(s . f_j) over the original CLIP frames (WF: T x T);
- level 3, word-patch: u_ip = (w_i L1) . (x_p L2) over words w and selected patch tokens x (each
  frame's CLS and k patches picked by a perturbed top-k, TS2-Net's selector; x not normalised);
  g_p = ISA_WL(u_:p) over words, h_i = ISA_WP(u_i:) over patches,
  S3 = 1/2 [ISA_WP2(g) + ISA_WL2(h)].

The reference's training logit is (lambda S1 + lambda S2 + S3) / 3 (level 3 has no temperature);
`score` returns (S1 + S2 + S3 / lambda) / 3 so that the head's logits are exactly that. The last
`shift_blocks` ViT blocks shift patch tokens between neighbouring frames (TS2-Net's patch shift,
through the encoder hook).

SK-norm (reference eval_t2v/main_ucofia.py), an evaluation option (`sk_norm_bank`): each level's logits of a bank of
training captions against the evaluation gallery are Sinkhorn-normalised (`sk_norm_iters`
rounds of a = 1/(K b), b = 1/(K^T a) on K = exp(Q - max Q)); the gallery bias log_softmax(log b)
of each level is added to that level's test logits. It corrects text-to-video rankings only (a
per-video bias leaves video-to-text rankings unchanged); the reference's video-to-text variant
(a bank of training videos) is not implemented. The bank is drawn from the training split by the
LightningModule (`DualEncoderRetrieval`), never from the evaluated split.

Differences from the reference, each a fix: evaluation keeps the trained patch-side matrix L2
(the reference's evaluation code drops it, so checkpoints are evaluated with another level-3
function than they were trained with); patch selection is a deterministic hard top-k at
evaluation (the reference still draws 500 noisy samples at test time); padded words and frames
are masked out of every ISA (the reference includes padding and the start token).

The patch scorer follows the reference's *training* copy (`train/modules/differential_topk.py`:
LayerNorm(D), Linear(D, D/2), GELU on every token, joined with its frame's CLS code, Linear(D, D/2),
GELU, Linear(D/2, 1), tanh). The released evaluation copy (`eval_t2v/`, `eval_v2t/`) has other
widths (it joins each token with its CLS before a LayerNorm(2D) and Linear(2D, D), then with the sum
of the video's CLS codes before Linear(2D, D), GELU, Linear(D, 1)), so a checkpoint of one cannot
load into the other; we train and evaluate with the one function the method is trained with.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lit_retrieval.models.encoders.base import VideoTextEncoder
from lit_retrieval.models.features import TextFeatures, VideoFeatures
from lit_retrieval.models.heads.base import map_rep, masked_softmax, word_level_text
from lit_retrieval.models.heads.meanp import masked_mean
from lit_retrieval.models.heads.temporal import CROSS_LAYER_NORM_EPS, ClipStyleTransformer
from lit_retrieval.models.heads.ts2net import PatchSelectingHead

TAU = 0.01  # hard-coded in the reference


def isa(values: torch.Tensor, mask: torch.Tensor, matrix: torch.Tensor) -> torch.Tensor:
    """Interactive similarity aggregation over the last dimension: sum_j SM(SM(x) W)_j x_j with
    SM = softmax(. / 0.01) over the valid entries; `matrix` is sliced to the dimension's size."""
    size = values.shape[-1]
    first = masked_softmax(values / TAU, mask)
    weights = masked_softmax((first @ matrix[:size, :size]) / TAU, mask)
    return (weights * values.masked_fill(~mask, 0.0)).sum(-1)


def identity(size: int) -> nn.Parameter:
    return nn.Parameter(torch.eye(size))


def sk_norm_bias(logits: torch.Tensor, iters: int) -> torch.Tensor:
    """UCoFiA's SK-norm gallery bias `[N_gallery]` from bank x gallery `logits`: Sinkhorn scaling
    of K = exp(Q - max Q) (b = 1/colsum(K), then `iters` rounds of a = 1/(K b), b = 1/(K^T a)),
    returned as log_softmax(log b). Computed in float64."""
    kernel = torch.exp((logits - logits.max()).double())
    b = 1.0 / kernel.sum(0)
    for _ in range(iters):
        a = 1.0 / (kernel @ b)
        b = 1.0 / (kernel.t() @ a)
    return torch.log_softmax(torch.log(b), 0).to(logits.dtype)


class UCoFiAHead(PatchSelectingHead):
    """UCoFiA head (see the module notes). Not indexable.

    Args:
        select / samples / sigma / shift_blocks / n_div: patch selection and shift
            (`PatchSelectingHead`; 3, 500, 0.05, 2, 7).
        temporal_layers / init_from_text: the seqTransf of level 1 (4, copied from CLIP text).
        layer_norm_eps: LayerNorm eps of that seqTransf (CLIP4Clip's 1e-12; 1e-5 reproduces runs
            trained before this default).
        max_frames / max_words: sizes of the T x T, (1+k)T x (1+k)T and L x L matrices
            (`max_words` defaults to the encoder's `max_text_len`).
        sk_norm_bank: bank size of SK-norm at evaluation (training captions; `None`: off).
        sk_norm_iters: its Sinkhorn rounds (4).
    """

    def __init__(
        self,
        temporal_layers: int = 4,
        max_frames: int = 64,
        max_words: int | None = None,
        init_from_text: bool = True,
        sk_norm_bank: int | None = None,
        sk_norm_iters: int = 4,
        layer_norm_eps: float = CROSS_LAYER_NORM_EPS,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.layer_norm_eps = layer_norm_eps
        self.temporal_layers, self.init_from_text = temporal_layers, init_from_text
        self.max_frames, self.max_words = max_frames, max_words
        self.calibration_bank = sk_norm_bank
        self.sk_norm_iters = sk_norm_iters
        self.temporal: ClipStyleTransformer | None = None

    def bind(self, encoder: VideoTextEncoder) -> None:
        width = encoder.embed_dim
        self.max_words = self.max_words or encoder.max_text_len
        self.bind_patch_selection(encoder)
        self.temporal = ClipStyleTransformer.for_encoder(
            encoder,
            self.temporal_layers,
            self.max_frames,
            copy_text=self.init_from_text,
            layer_norm_eps=self.layer_norm_eps,
        )
        pixels = (1 + self.select) * self.max_frames
        self.global_text, self.global_video = identity(width), identity(width)
        self.frame_weight = identity(self.max_frames)
        self.local_text, self.local_patch = identity(width), identity(width)
        self.word_weight, self.word_weight2 = identity(self.max_words), identity(self.max_words)
        self.patch_weight, self.patch_weight2 = identity(pixels), identity(pixels)

    def encode_text(self, text: TextFeatures) -> dict[str, torch.Tensor]:
        return word_level_text(text, self.max_words, "UCoFiAHead")

    def encode_video(self, video: VideoFeatures) -> dict[str, torch.Tensor]:
        if video.frames.shape[1] > self.max_frames:
            raise ValueError(f"{video.frames.shape[1]} frames but UCoFiAHead.max_frames is {self.max_frames}")
        pixels, pixel_mask = self.selected_tokens(video)
        mask = video.mask.bool()
        temporal = self.temporal(video.frames, mask) + video.frames
        mean = F.normalize(masked_mean(F.normalize(temporal, dim=-1), mask), dim=-1)
        return {
            "mean": mean,
            "frames": F.normalize(video.frames, dim=-1),
            "frame_mask": mask,
            "pixels": pixels,
            "pixel_mask": pixel_mask,
        }

    def levels(self, text_rep: dict, video_rep: dict) -> torch.Tensor:
        """The three level similarities `[3, N_text, N_video]` (S1, S2, S3 of the module notes)."""
        s1 = (text_rep["sentence"] @ self.global_text) @ (video_rep["mean"] @ self.global_video).t()
        frame_cos = torch.einsum("ad,btd->abt", text_rep["sentence"], video_rep["frames"])
        s2 = isa(frame_cos, video_rep["frame_mask"][None], self.frame_weight)
        words = text_rep["words"] @ self.local_text
        pixels = video_rep["pixels"] @ self.local_patch
        u = torch.einsum("ald,bpd->ablp", words, pixels)
        word_mask = text_rep["word_mask"][:, None, None, :]  # for ISA over words (u transposed)
        pixel_mask = video_rep["pixel_mask"][None, :, None, :]
        per_pixel = isa(u.transpose(-1, -2), word_mask, self.word_weight)  # g [A, B, P]
        per_word = isa(u, pixel_mask, self.patch_weight)  # h [A, B, L]
        s3 = 0.5 * (
            isa(per_pixel, video_rep["pixel_mask"][None], self.patch_weight2)
            + isa(per_word, text_rep["word_mask"][:, None], self.word_weight2)
        )
        return torch.stack([s1, s2, s3])

    def level_logits(self, text_rep: dict, video_rep: dict) -> torch.Tensor:
        """The reference's logits per level: lambda S1, lambda S2, S3."""
        scale = self.logit_scale.exp()
        levels = self.levels(text_rep, video_rep)
        return torch.stack([scale * levels[0], scale * levels[1], levels[2]])

    def score(self, text_rep: dict, video_rep: dict) -> torch.Tensor:
        logits = self.level_logits(text_rep, video_rep)
        if "sk_bias" in video_rep:
            logits = logits + video_rep["sk_bias"].t()[:, None, :].to(logits.dtype)
        return logits.mean(0) / self.logit_scale.exp()

    def pair_bytes(self, text_rep: dict, video_rep: dict) -> int:
        return 4 * 6 * text_rep["words"].shape[1] * video_rep["pixels"].shape[1]

    @torch.no_grad()
    def calibrate(self, bank_rep: dict, video_rep: dict, budget_bytes: int) -> dict:
        """The gallery with SK-norm biases `sk_bias` [N_video, 3] from a bank of text queries."""
        video_rep = {k: v for k, v in video_rep.items() if k != "sk_bias"}
        num_bank = len(bank_rep["sentence"])
        rows = max(1, budget_bytes // max(1, self.pair_bytes(bank_rep, video_rep) * len(video_rep["mean"])))
        blocks = [
            self.level_logits(map_rep(bank_rep, lambda t: t[r : r + rows]), video_rep) for r in range(0, num_bank, rows)
        ]
        logits = torch.cat(blocks, 1)
        bias = torch.stack([sk_norm_bias(logits[level], self.sk_norm_iters) for level in range(3)], 1)
        return {**video_rep, "sk_bias": bias}
