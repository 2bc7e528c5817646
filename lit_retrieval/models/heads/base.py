"""The similarity-head contract (docs/extending.md, "Add a similarity head").

A head turns encoder token features into per-side representations and scores any set of texts
against any set of videos. `score` returns the similarity s(v, q) of the papers (cosine for the
CLIP4Clip family), which margin losses such as MEA use directly; `logits` applies the head's
learnable inverse temperature for InfoNCE (MELON Eq. 2: s / tau). A head is *indexable* when each
side is one vector and the score is their dot product, so a faiss index can serve it.

`score_blocks` is the evaluation entry point: it scores in float32 under every training precision
(representations cast up, autocast off, the head's weights in float32; `lit_retrieval.precision`),
so no head ranks from bf16 scores. Training calls `score` directly, in the trainer's precision.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from lit_retrieval.models.encoders.base import VideoTextEncoder
from lit_retrieval.models.features import TextFeatures, VideoFeatures
from lit_retrieval.precision import full_precision, full_precision_scoring

RetrievalMetricsFn = Callable[[torch.Tensor, torch.Tensor], dict[str, float]]
"""A score matrix and each text's video column -> metrics keyed like `t2v/R@1`, `v2t/R@1`."""


def map_rep(rep: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """Apply `fn` to a representation: a tensor, or each tensor of a dict (batch first)."""
    return {k: fn(v) for k, v in rep.items()} if isinstance(rep, dict) else fn(rep)


def masked_softmax(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension's valid entries (zeros elsewhere, and for all-padding rows)."""
    return torch.softmax(logits.masked_fill(~mask, float("-inf")), -1).nan_to_num(0.0)


def rep_len(rep: Any) -> int:
    """Rows (texts or videos) of a representation."""
    return len(next(iter(rep.values()))) if isinstance(rep, dict) else len(rep)


def rep_device(rep: Any) -> torch.device:
    """Device of a representation (of its first tensor)."""
    return (next(iter(rep.values())) if isinstance(rep, dict) else rep).device


def cat_padded(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Concatenate along the batch, zero-padding the other dimensions to the largest size (word
    tokens of batches tokenised to different lengths; padded masks are False)."""
    shape = [max(t.shape[d] for t in tensors) for d in range(1, tensors[0].ndim)]
    padded = []
    for t in tensors:
        pad = [x for d in reversed(range(1, t.ndim)) for x in (0, shape[d - 1] - t.shape[d])]
        padded.append(torch.nn.functional.pad(t, pad) if any(pad) else t)
    return torch.cat(padded)


def cat_reps(reps: list[Any]) -> Any:
    """Concatenate representations along the batch (see `cat_padded`)."""
    if isinstance(reps[0], dict):
        return {k: cat_padded([r[k] for r in reps]) for k in reps[0]}
    return cat_padded(reps)


def word_level_text(text: TextFeatures, max_words: int, head: str) -> dict[str, torch.Tensor]:
    """The text side of the word-level heads (X-CLIP, UCoFiA): unit sentence and word features and
    the word mask; more words than the head's position table (`max_words`) is an error naming it."""
    if text.tokens.shape[1] > max_words:
        raise ValueError(f"{text.tokens.shape[1]} text tokens but {head}.max_words is {max_words}")
    return {
        "sentence": F.normalize(text.pooled, dim=-1),
        "words": F.normalize(text.tokens, dim=-1),
        "word_mask": text.mask.bool(),
    }


class SimilarityHead(nn.Module, ABC):
    indexable: bool = False
    needs_patches: bool = False
    calibration_bank: int | None = None  # training-split queries `calibrate` wants at evaluation
    # why gradient caching cannot train the head exactly (a row's representation depends on the other
    # rows of its chunk), or None: chunks give each row its full-batch representation
    grad_cache_obstacle: str | None = None

    def __init__(
        self,
        logit_scale_init: float = math.log(100.0),
        learn_logit_scale: bool = True,
        max_logit_scale: float = math.log(100.0),
    ) -> None:
        super().__init__()
        self.logit_scale = nn.Parameter(torch.tensor(float(logit_scale_init)), requires_grad=learn_logit_scale)
        self.max_logit_scale = max_logit_scale

    def bind(self, encoder: VideoTextEncoder) -> None:
        """Called once by the LightningModule with its encoder, before training or loading a
        checkpoint: heads with layers of their own build them here at `encoder.embed_dim` (and may
        copy weights from the encoder). Parameter-free heads need nothing."""

    @abstractmethod
    def encode_text(self, text: TextFeatures) -> Any:
        """Text representation (a tensor, or a dict of tensors with the batch first)."""

    @abstractmethod
    def encode_video(self, video: VideoFeatures) -> Any:
        """Video representation; text-independent, so evaluation computes it once per video."""

    @abstractmethod
    def score(self, text_rep: Any, video_rep: Any) -> torch.Tensor:
        """Similarity matrix `[N_text, N_video]`."""

    def score_pairs(self, text_rep: Any, video_rep: Any) -> torch.Tensor:
        """Scores of aligned rows `[N]`: text n vs video n (e.g. MEA's video-partial query pairs).
        This generic version takes the diagonal of `score`; heads with a cheaper form override it."""
        return self.score(text_rep, video_rep).diagonal()

    def pair_bytes(self, text_rep: Any, video_rep: Any) -> int:
        """Working memory one (text, video) pair costs inside `score`, in bytes; sizes evaluation
        blocks. A dot-product head needs one output value per pair."""
        return 4

    def score_blocks(self, text_rep: Any, video_rep: Any, budget_bytes: int) -> torch.Tensor:
        """`score` computed block by block so that no block costs more than `budget_bytes` of
        pairwise working memory: evaluating 3,600 x 3,600 with a cross-encoder head never holds
        all pairwise token tensors at once. Blocks span whole gallery rows when they fit.
        Scores are float32 whatever the representations' dtype, the head's weights or an
        enclosing autocast (module docstring)."""
        with full_precision_scoring(self, rep_device(text_rep)):
            text_rep, video_rep = map_rep(text_rep, full_precision), map_rep(video_rep, full_precision)
            return self._score_blocks(text_rep, video_rep, budget_bytes)

    def _score_blocks(self, text_rep: Any, video_rep: Any, budget_bytes: int) -> torch.Tensor:
        num_text, num_video = rep_len(text_rep), rep_len(video_rep)
        pairs = max(1, budget_bytes // max(1, self.pair_bytes(text_rep, video_rep)))
        cols = min(num_video, pairs)
        rows = max(1, min(num_text, pairs // cols))
        if rows >= num_text and cols >= num_video:
            return self.score(text_rep, video_rep)
        out = None
        for r in range(0, num_text, rows):
            text_block = map_rep(text_rep, lambda t: t[r : r + rows])
            for c in range(0, num_video, cols):
                block = self.score(text_block, map_rep(video_rep, lambda t: t[c : c + cols]))
                if out is None:
                    out = block.new_empty(num_text, num_video)
                out[r : r + rows, c : c + cols] = block
        assert out is not None
        return out

    def auxiliary_losses(self, text_rep: Any, video_rep: Any, similarity: torch.Tensor) -> dict[str, torch.Tensor]:
        """Weighted extra training terms of the head (added to the contrastive loss and logged as
        `train/aux/<name>`), from the batch's representations and its similarity matrix (texts x
        videos, the i-th text belonging to the i-th video). Most heads have none."""
        return {}

    def calibrate(self, bank_rep: Any, video_rep: Any, budget_bytes: int) -> Any:
        """The evaluation gallery adjusted with a bank of `calibration_bank` training queries
        (UCoFiA's SK-norm); the module calls it when `calibration_bank` is set."""
        return video_rep

    def before_evaluation(self, stage: str) -> None:
        """Called before a `val` or `test` split is scored (e.g. to refuse a test-time option that
        needs a validation fit first). Most heads need nothing."""

    def fit_on_validation(
        self, text_rep: Any, video_rep: Any, targets: torch.Tensor, metrics: RetrievalMetricsFn
    ) -> dict[str, float]:
        """Fit test-time parameters of the head (e.g. PAU's re-ranking) on a validation split's
        queries against its whole gallery (`targets[i]`: query i's video column); returns values
        to report. `metrics(scores, targets)` gives the evaluation's metrics (`t2v/R@1`, ...) of a
        score matrix; the evaluator passes it in, so heads (a lower layer) never import `metrics`.
        Called after every validation, never on test. Most heads have none."""
        return {}

    def logits(self, similarity: torch.Tensor) -> torch.Tensor:
        """InfoNCE logits `s * exp(logit_scale)`."""
        return similarity * self.logit_scale.exp()

    @torch.no_grad()
    def clamp_logit_scale(self) -> None:
        """Keep 1/tau <= exp(max_logit_scale) (CLIP's clamp at 100, kept by CLIP4Clip's training loop)."""
        self.logit_scale.clamp_(max=self.max_logit_scale)
