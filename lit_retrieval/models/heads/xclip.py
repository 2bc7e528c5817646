"""X-CLIP (Ma et al., ACM MM 2022, arXiv:2207.07285): multi-grained contrast with attention over
similarity matrices (AOSM), four granularities averaged with equal weights:

    S = (S_vs + S_vw + S_sf + S_fw) / 4

- video-sentence  S_vs = s^T G v                  (v: meanP over the seqTransf output)
- video-word      S_vw = AOSM_{U_w}(w_m^T v)      over words
- sentence-frame  S_sf = AOSM_{U_f}(s^T f_k)      over frames (f: CLIP frame features, before
                                                  the temporal module, as the reference does)
- frame-word      c_mk = w_m^T A f_k; S_fw = (AOSM_{U_f2}(AOSM_{U_w1} over words) +
                                              AOSM_{U_w2}(AOSM_{U_f1} over frames)) / 2

with AOSM_U(x) = sum_k x_k (U^T softmax(x / 0.01))_k and every vector L2-normalised. G, A (D x D)
and the U matrices (L x L over words, T x T over frames) are the reference code's learnable
matrices, initialised to the identity (with U = I, AOSM is the paper's softmax-weighted sum).

Differences from the reference, on purpose: padding word tokens and padded frames are masked out
of every softmax and sum (the reference code lets them take part), and inputs shorter than
`max_words`/`max_frames` use the leading block of each U, so evaluation may use any length up to
the training maxima. The logit temperature is the head's `logit_scale` (S is scaled once, which
equals scaling each term). Not indexable: three of the four terms need word and frame tokens.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lit_retrieval.models.encoders.base import VideoTextEncoder
from lit_retrieval.models.features import TextFeatures, VideoFeatures
from lit_retrieval.models.heads.base import SimilarityHead, word_level_text
from lit_retrieval.models.heads.meanp import masked_mean
from lit_retrieval.models.heads.temporal import CROSS_LAYER_NORM_EPS, ClipStyleTransformer

AOSM_TEMPERATURE = 0.01  # hard-coded in the reference


def aosm(x: torch.Tensor, mask: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Attention over similarities along the last dimension (n): sum_k x_k (U^T softmax(x/0.01))_k
    over the positions `mask` keeps, with U = `weight[:n, :n]`. A row with nothing valid gives 0."""
    n = x.shape[-1]
    mask = mask.expand_as(x)
    attend = torch.where(mask.any(-1, keepdim=True), mask, torch.ones_like(mask))
    probs = torch.softmax((x / AOSM_TEMPERATURE).masked_fill(~attend, float("-inf")), dim=-1)
    return (x * (probs @ weight[:n, :n]) * mask).sum(-1)


class XCLIPHead(SimilarityHead):
    """Args:
    max_words: rows of the word-sized matrices (the text length used in training).
    max_frames: rows of the frame-sized matrices and the temporal module's positions.
    temporal_layers: seqTransf blocks for the video-level feature (0: plain meanP).
    init_from_text: copy CLIP text blocks into the temporal module (CLIP4Clip init).
    layer_norm_eps: LayerNorm eps of the temporal module (CLIP4Clip's 1e-12; 1e-5 reproduces
        runs trained before this default).
    """

    indexable = False

    def __init__(
        self,
        max_words: int = 77,
        max_frames: int = 64,
        temporal_layers: int = 4,
        init_from_text: bool = True,
        layer_norm_eps: float = CROSS_LAYER_NORM_EPS,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.layer_norm_eps = layer_norm_eps
        self.max_words = max_words
        self.max_frames = max_frames
        self.temporal_layers = temporal_layers
        self.init_from_text = init_from_text
        self.temporal: ClipStyleTransformer | None = None
        self.bound = False

    def bind(self, encoder: VideoTextEncoder) -> None:
        width = encoder.embed_dim
        if self.temporal_layers:
            self.temporal = ClipStyleTransformer.for_encoder(
                encoder,
                self.temporal_layers,
                self.max_frames,
                copy_text=self.init_from_text,
                layer_norm_eps=self.layer_norm_eps,
            )
        self.global_mat = nn.Parameter(torch.eye(width))
        self.local_mat = nn.Parameter(torch.eye(width))
        for name, size in (
            ("word_logit", self.max_words),
            ("word_mat", self.max_words),
            ("word_mat2", self.max_words),
            ("frame_logit", self.max_frames),
            ("frame_mat", self.max_frames),
            ("frame_mat2", self.max_frames),
        ):
            self.register_parameter(name, nn.Parameter(torch.eye(size)))
        self.bound = True

    def encode_text(self, text: TextFeatures) -> dict[str, torch.Tensor]:
        return word_level_text(text, self.max_words, "XCLIPHead")

    def encode_video(self, video: VideoFeatures) -> dict[str, torch.Tensor]:
        if not self.bound:
            raise RuntimeError("XCLIPHead is not bound to an encoder: call head.bind(encoder) first")
        if video.frames.shape[1] > self.max_frames:
            raise ValueError(f"{video.frames.shape[1]} frames but XCLIPHead.max_frames is {self.max_frames}")
        frames = video.frames
        if self.temporal is not None:
            frames = self.temporal(frames, video.mask) + frames
        pooled = F.normalize(masked_mean(F.normalize(frames, dim=-1), video.mask), dim=-1)
        return {"video": pooled, "frames": F.normalize(video.frames, dim=-1), "frame_mask": video.mask.bool()}

    def _scores(self, text: dict[str, torch.Tensor], video: dict[str, torch.Tensor], aligned: bool) -> torch.Tensor:
        """All four terms for every (text, video) pair, or for aligned rows when `aligned`."""
        t, v = ("n", "n") if aligned else ("i", "j")
        out = "n" if aligned else "ij"
        text_side = (lambda x: x) if aligned else (lambda x: x.unsqueeze(1))  # insert the video axis
        video_side = (lambda x: x) if aligned else (lambda x: x.unsqueeze(0))  # insert the text axis
        words, word_mask = text["words"], text["word_mask"]
        frames, frame_mask = video["frames"], video["frame_mask"]
        video_sentence = torch.einsum(f"{t}d,de,{v}e->{out}", text["sentence"], self.global_mat, video["video"])
        video_word = aosm(
            torch.einsum(f"{t}md,{v}d->{out}m", words, video["video"]), text_side(word_mask), self.word_logit
        )
        sentence_frame = aosm(
            torch.einsum(f"{t}d,{v}kd->{out}k", text["sentence"], frames), video_side(frame_mask), self.frame_logit
        )
        local = torch.einsum(f"{t}md,de,{v}ke->{out}mk", words, self.local_mat, frames)
        word_mask_mk, frame_mask_mk = text_side(word_mask).unsqueeze(-1), video_side(frame_mask).unsqueeze(-2)
        per_frame = aosm(
            local.transpose(-1, -2), word_mask_mk.transpose(-1, -2), self.word_mat
        )  # over words -> [.., k]
        per_word = aosm(local, frame_mask_mk, self.frame_mat)  # over frames -> [.., m]
        frame_word = (
            aosm(per_frame, video_side(frame_mask), self.frame_mat2)
            + aosm(per_word, text_side(word_mask), self.word_mat2)
        ) / 2
        return (video_sentence + video_word + sentence_frame + frame_word) / 4

    def score(self, text_rep: dict[str, torch.Tensor], video_rep: dict[str, torch.Tensor]) -> torch.Tensor:
        return self._scores(text_rep, video_rep, aligned=False)

    def score_pairs(self, text_rep: dict[str, torch.Tensor], video_rep: dict[str, torch.Tensor]) -> torch.Tensor:
        return self._scores(text_rep, video_rep, aligned=True)

    def pair_bytes(self, text_rep: dict[str, torch.Tensor], video_rep: dict[str, torch.Tensor]) -> int:
        """The frame-word similarity [L, T] per pair and its softmax intermediates (about 6)."""
        return 4 * 6 * text_rep["words"].shape[1] * video_rep["frames"].shape[1]
