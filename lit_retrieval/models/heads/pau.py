"""PAU: prototype-based aleatoric uncertainty (Li et al., NeurIPS 2023, arXiv:2309.17093).

Score (reference `_loose_similarity`): half the cosine of the sentence with the seqTransf mean
video, half its best cosine with a single (original CLIP) frame,

    S_ab = 1/2 (s_a . v_b + max_j s_a . f_bj).

Uncertainty (reference modeling_pau.py): K learnable prototypes per modality; a video's evidence comes from its
similarity to the *text* prototypes and a text's from the *video* prototypes,
e = exp(lambda x . P^T / tau), alpha = e + 1, U = K / sum(alpha), so U lies in (0, 1]; the
certainty 1 - U is what the reference calls `vu`/`tu`.

Auxiliary losses (reference criterion.py), weights from the reference scripts: the uncertainty loss regresses
each item's certainty onto c times its mean logit with the in-batch negatives (c = mean certainty
/ mean of those, not detached), and the diversity loss pushes the prototypes of each modality
apart (MSE of the off-diagonal lambda-scaled cosines against 0).

Test-time re-ranking (reference main_pau.py): S'_ab = S_ab exp(-beta_v (1 - U^v_b)) exp(-beta_t (1 - U^t_a)).
`rerank: fixed` uses `rerank_betas`; `rerank: fit` fits them on the *validation* split after
each validation (grid search, then Nelder-Mead from the best point, maximising the mean of the
t2v and v2t R@1 counts); validations score with the previous fit (none at first), and testing
before any fit is refused.

Differences from the reference (leolee99/PAU), each a fix:
- the test split is never used for fitting (the reference's `run_msrvtt_learn.sh` fits beta on it);
- the best-frame term takes its max over a video's valid frames only; the reference takes it over
  every frame slot, padded ones included (the features CLIP gives the zero-filled padding frames),
  so a padding frame can win the max of a short video. A video without valid frames gets 0 for
  this term here.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from lit_retrieval.errors import ConfigError
from lit_retrieval.models.encoders.base import VideoTextEncoder
from lit_retrieval.models.features import TextFeatures, VideoFeatures
from lit_retrieval.models.heads.base import RetrievalMetricsFn, SimilarityHead
from lit_retrieval.models.heads.meanp import masked_mean
from lit_retrieval.models.heads.temporal import CROSS_LAYER_NORM_EPS, ClipStyleTransformer


def certainty(
    features: torch.Tensor, prototypes: torch.Tensor, scale: torch.Tensor, temperature: float
) -> torch.Tensor:
    """1 - U of each row of `features` [N, D] against `prototypes` [K, D] (PAU's evidence model):
    alpha = exp(scale * cos / temperature) + 1, U = K / sum(alpha). Lies in [0, 1)."""
    cos = F.normalize(features.float(), dim=-1) @ F.normalize(prototypes.float(), dim=-1).t()
    alpha = torch.exp(scale.float() * cos / temperature) + 1.0
    return 1.0 - prototypes.shape[0] / alpha.sum(-1)


def uncertainty_loss(logits: torch.Tensor, item_certainty: torch.Tensor) -> torch.Tensor:
    """PAU's L_u for the rows of `logits` [B, B] (diagonal = positives): MSE between each row's
    certainty and c times its mean negative logit, c = mean certainty / mean of those."""
    size = logits.shape[0]
    negatives = logits.masked_fill(torch.eye(size, dtype=torch.bool, device=logits.device), 0.0).sum(1) / size
    mean = negatives.mean()
    mean = torch.where(mean.abs() < 1e-6, torch.full_like(mean, 1e-6), mean)
    return F.mse_loss(item_certainty, item_certainty.mean() / mean * negatives)


def diversity_loss(prototypes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """MSE of the off-diagonal scaled prototype cosines against zero (over all K^2 entries)."""
    unit = F.normalize(prototypes, dim=-1)
    gram = scale * unit @ unit.t()
    off = gram.masked_fill(torch.eye(len(unit), dtype=torch.bool, device=unit.device), 0.0)
    return off.pow(2).mean()


class PAUHead(SimilarityHead):
    """PAU head (see the module notes).

    Args:
        prototypes: K per modality (8 for MSR-VTT and DiDeMo in the reference, 32 for MSVD).
        evidence_temperature: tau of the evidence (5).
        uncertainty_weight / diversity_weight: lambda_2 = 100 and lambda_3 = 0.025 (reference).
        layers / max_frames / init_from_text: the seqTransf of the mean term (CLIP4Clip's).
        layer_norm_eps: LayerNorm eps of that seqTransf (CLIP4Clip's 1e-12, as PAU's
            `module_cross.py`; 1e-5 reproduces runs trained before this default).
        rerank: `none`, `fixed` (`rerank_betas`) or `fit` (fitted on validation).
        rerank_betas: (beta_v, beta_t); the reference's fixed default is 0.05 each. Not
            constrained to be positive (the reference's fitted values have either sign).
        rerank_grid: grid points per beta for `fit`, over [-1, 1].
    """

    def __init__(
        self,
        prototypes: int = 8,
        evidence_temperature: float = 5.0,
        uncertainty_weight: float = 100.0,
        diversity_weight: float = 0.025,
        layers: int = 4,
        max_frames: int = 77,
        init_from_text: bool = True,
        rerank: Literal["none", "fixed", "fit"] = "none",
        rerank_betas: tuple[float, float] = (0.05, 0.05),
        rerank_grid: int = 21,
        layer_norm_eps: float = CROSS_LAYER_NORM_EPS,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.layer_norm_eps = layer_norm_eps
        if rerank not in ("none", "fixed", "fit"):  # not "off": YAML reads a bare off as false
            raise ConfigError(f"rerank must be 'none', 'fixed' or 'fit', got {rerank!r}")
        self.num_prototypes = prototypes
        self.evidence_temperature = evidence_temperature
        self.uncertainty_weight = uncertainty_weight
        self.diversity_weight = diversity_weight
        self.layers, self.max_frames, self.init_from_text = layers, max_frames, init_from_text
        self.rerank = rerank
        self.rerank_grid = rerank_grid
        self.register_buffer("betas", torch.tensor([float(b) for b in rerank_betas]))
        self.register_buffer("betas_fitted", torch.tensor(False))
        self.temporal: ClipStyleTransformer | None = None

    def bind(self, encoder: VideoTextEncoder) -> None:
        width = encoder.embed_dim
        self.temporal = ClipStyleTransformer.for_encoder(
            encoder, self.layers, self.max_frames, copy_text=self.init_from_text, layer_norm_eps=self.layer_norm_eps
        )
        self.video_prototypes = nn.Parameter(nn.init.xavier_uniform_(torch.empty(self.num_prototypes, width)))
        self.text_prototypes = nn.Parameter(nn.init.xavier_uniform_(torch.empty(self.num_prototypes, width)))

    def encode_text(self, text: TextFeatures) -> dict[str, torch.Tensor]:
        sentence = F.normalize(text.pooled, dim=-1)
        return {
            "sentence": sentence,
            "certainty": certainty(sentence, self.video_prototypes, self.logit_scale.exp(), self.evidence_temperature),
        }

    def encode_video(self, video: VideoFeatures) -> dict[str, torch.Tensor]:
        if self.temporal is None:
            raise RuntimeError("PAUHead is not bound to an encoder: call head.bind(encoder) first")
        temporal = self.temporal(video.frames, video.mask) + video.frames
        mean = F.normalize(masked_mean(F.normalize(temporal, dim=-1), video.mask), dim=-1)
        return {
            "mean": mean,
            "frames": F.normalize(video.frames, dim=-1),
            "mask": video.mask,
            "certainty": certainty(mean, self.text_prototypes, self.logit_scale.exp(), self.evidence_temperature),
        }

    def pair_bytes(self, text_rep: dict[str, torch.Tensor], video_rep: dict[str, torch.Tensor]) -> int:
        return 4 * (video_rep["frames"].shape[1] + 1)

    def raw_score(self, text_rep: dict[str, torch.Tensor], video_rep: dict[str, torch.Tensor]) -> torch.Tensor:
        """S = 1/2 (mean-video cosine + best-frame cosine), before any re-ranking."""
        mean_term = text_rep["sentence"] @ video_rep["mean"].t()
        frame_cos = torch.einsum("nd,vtd->nvt", text_rep["sentence"], video_rep["frames"])
        best = frame_cos.masked_fill(~video_rep["mask"][None], float("-inf")).amax(-1)
        best = torch.where(video_rep["mask"].any(-1)[None], best, torch.zeros_like(best))
        return 0.5 * (mean_term + best)

    def rescale(
        self, scores: torch.Tensor, text_certainty: torch.Tensor, video_certainty: torch.Tensor, betas: torch.Tensor
    ) -> torch.Tensor:
        """S'_ab = S_ab exp(-beta_v c^v_b) exp(-beta_t c^t_a) (c = 1 - U)."""
        video_factor = torch.exp(-betas[0] * video_certainty.to(scores.dtype))
        text_factor = torch.exp(-betas[1] * text_certainty.to(scores.dtype))
        return scores * video_factor[None, :] * text_factor[:, None]

    def score(self, text_rep: dict[str, torch.Tensor], video_rep: dict[str, torch.Tensor]) -> torch.Tensor:
        scores = self.raw_score(text_rep, video_rep)
        if self.training or self.rerank == "none" or (self.rerank == "fit" and not bool(self.betas_fitted)):
            return scores  # the first validation of `fit` scores without re-ranking, then fits
        return self.rescale(scores, text_rep["certainty"], video_rep["certainty"], self.betas)

    def before_evaluation(self, stage: str) -> None:
        if stage == "test" and self.rerank == "fit" and not bool(self.betas_fitted):
            raise RuntimeError(
                "PAU rerank: fit needs a validation run first (set data.val_split); "
                "beta is never fitted on the test split"
            )

    def auxiliary_losses(self, text_rep, video_rep, similarity) -> dict[str, torch.Tensor]:
        scale = self.logit_scale.exp()
        logits = similarity * scale
        u_loss = 0.5 * (
            uncertainty_loss(logits, text_rep["certainty"]) + uncertainty_loss(logits.t(), video_rep["certainty"])
        )
        d_loss = diversity_loss(self.video_prototypes, scale) + diversity_loss(self.text_prototypes, scale)
        return {"uncertainty": self.uncertainty_weight * u_loss, "diversity": self.diversity_weight * d_loss}

    @torch.no_grad()
    def fit_on_validation(
        self, text_rep, video_rep, targets: torch.Tensor, metrics: RetrievalMetricsFn
    ) -> dict[str, float]:
        """Fit (beta_v, beta_t) on the validation scores (`rerank: fit` only)."""
        if self.rerank != "fit":
            return {}
        scores = self.raw_score(text_rep, video_rep).float()
        text_c, video_c = text_rep["certainty"].float(), video_rep["certainty"].float()

        def hits(betas: np.ndarray) -> float:
            rescaled = self.rescale(
                scores, text_c, video_c, torch.tensor(betas, dtype=scores.dtype, device=scores.device)
            )
            found = metrics(rescaled, targets)
            return (found["t2v/R@1"] + found["v2t/R@1"]) / 2

        grid = np.linspace(-1.0, 1.0, self.rerank_grid)
        best = max(((b1, b2) for b1 in grid for b2 in grid), key=lambda b: hits(np.array(b)))
        from scipy.optimize import minimize

        refined = minimize(lambda b: -hits(b), np.array(best), method="Nelder-Mead", options={"maxiter": 20})
        chosen = refined.x if -refined.fun >= hits(np.array(best)) else np.array(best)
        self.betas.copy_(torch.tensor(chosen, dtype=self.betas.dtype))
        self.betas_fitted.fill_(True)
        before = hits(np.zeros(2))
        return {
            "pau/beta_video": float(chosen[0]),
            "pau/beta_text": float(chosen[1]),
            "pau/R@1_mean_before": before,
            "pau/R@1_mean_after": hits(chosen),
        }
