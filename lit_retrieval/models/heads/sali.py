"""SALI: shot-aware late interaction (SALI Sec. 3).

Video side: frame features are L2-normalised and averaged per shot (the frames' shot indices come
from the data, `frame_shot_index`), giving V in R^{S x d}; S varies per video (padded, masked).
Text side: the full query and its subject and object spans (`SpanSplitter`), encoded by the same
text tower. Shared projections p_q (the three text rows) and p_v (shots), identity-initialised,
give the cosine matrix M in R^{3 x S} of each text-video pair; a matching operator turns it into
the shot-level score s: greedy max or capacity-constrained OT (`lit_retrieval.models.matching`).
The clip-level score s_clip is CLIP4Clip-meanP through its own identity-initialised projections,
so the head equals meanP at the start of fine-tuning when the gate is 0, and the final score is

    s_hat = g s + (1 - g) s_clip,   g = sigmoid(gate[query type]) (initialised at 0.5),

query type = with or without an interpersonal verb (SALI Sec. 3; `gate_by: relational` uses the
relational flag instead). Relational queries may also pay the film-grammar penalty
softplus(w1) P1 + softplus(w2) P2 on s (our reading, `film_grammar_penalty`). Operator and
penalty are chosen separately for training and inference (SALI Tab. 3): `train_operator`,
`eval_operator`, `train_penalty`, `eval_penalty`; the module's training flag picks the pair.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from lit_retrieval.errors import ConfigError
from lit_retrieval.models.encoders.base import VideoTextEncoder
from lit_retrieval.models.features import VideoFeatures
from lit_retrieval.models.heads.base import SimilarityHead
from lit_retrieval.models.heads.meanp import masked_mean, shot_means
from lit_retrieval.models.matching import film_grammar_penalty, greedy_max, ot_match, soft_assignment

Operator = Literal["max", "ot"]


@dataclass
class SpanTextFeatures:
    """Pooled text features `[N, D]` of the full query and its subject and object spans, and per
    query whether it has an interpersonal verb and whether it is relational (`[N]` bool)."""

    full: torch.Tensor
    subject: torch.Tensor
    object: torch.Tensor
    has_verb: torch.Tensor
    relational: torch.Tensor


def identity_linear(dim: int) -> nn.Linear:
    """A bias-free `dim x dim` linear layer initialised as the identity (SALI's p_q, p_v)."""
    layer = nn.Linear(dim, dim, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.eye(dim))
    return layer


class SALIHead(SimilarityHead):
    """Shot-aware late interaction (SALI Sec. 3). Not indexable: the score needs every shot.

    Args:
        train_operator / eval_operator: `max` (greedy max) or `ot` (capacity-constrained OT).
        train_penalty / eval_penalty: apply the film-grammar penalty to relational queries.
        capacity_init: per-shot capacity c, learnable in (0.1, 1) (0.89 in the paper).
        eps_init: OT temperature eps, learnable and positive (0.07).
        sinkhorn_iters: Sinkhorn sweeps (5).
        ot_finish: constraint left exact after the sweeps, `columns` (cap) or `rows` (mass);
            see `lit_retrieval.models.matching`.
        penalty_init: w1 = w2 at the start; weights are softplus(w) (-3 -> 0.05).
        penalty_window: shots apart beyond which the distance term is full (see the penalty).
        gate_init: g at the start for both query types (0.5).
        gate_by: `verb` (paper: with or without an interpersonal verb) or `relational`.
        learn_capacity / learn_eps: make c and eps trainable (both are, in the paper).
    """

    def __init__(
        self,
        train_operator: Operator = "max",
        eval_operator: Operator = "max",
        train_penalty: bool = False,
        eval_penalty: bool = False,
        capacity_init: float = 0.89,
        eps_init: float = 0.07,
        sinkhorn_iters: int = 5,
        ot_finish: Literal["columns", "rows"] = "columns",
        penalty_init: float = -3.0,
        penalty_window: int = 2,
        gate_init: float = 0.5,
        gate_by: Literal["verb", "relational"] = "verb",
        learn_capacity: bool = True,
        learn_eps: bool = True,
        logit_scale_init: float = math.log(100.0),
        learn_logit_scale: bool = True,
    ) -> None:
        super().__init__(logit_scale_init, learn_logit_scale)
        for name, value in (("train_operator", train_operator), ("eval_operator", eval_operator)):
            if value not in ("max", "ot"):
                raise ConfigError(f"{name} must be 'max' or 'ot', got {value!r}")
        if not 0.1 < capacity_init < 1.0:
            raise ConfigError(f"capacity_init must lie in (0.1, 1), got {capacity_init}")
        if eps_init <= 0 or not 0 < gate_init < 1:
            raise ConfigError(f"eps_init must be > 0 and gate_init in (0, 1), got {eps_init}, {gate_init}")
        if gate_by not in ("verb", "relational"):
            raise ConfigError(f"gate_by must be 'verb' or 'relational', got {gate_by!r}")
        self.train_operator, self.eval_operator = train_operator, eval_operator
        self.train_penalty, self.eval_penalty = train_penalty, eval_penalty
        self.sinkhorn_iters = sinkhorn_iters
        self.ot_finish = ot_finish
        self.penalty_window = penalty_window
        self.gate_by = gate_by
        ratio = (capacity_init - 0.1) / 0.9
        self.capacity_logit = nn.Parameter(torch.tensor(math.log(ratio / (1 - ratio))), requires_grad=learn_capacity)
        self.log_eps = nn.Parameter(torch.tensor(math.log(eps_init)), requires_grad=learn_eps)
        self.penalty_weights = nn.Parameter(torch.full((2,), float(penalty_init)))
        self.gate_logits = nn.Parameter(torch.full((2,), math.log(gate_init / (1 - gate_init))))

    def bind(self, encoder: VideoTextEncoder) -> None:
        dim = encoder.embed_dim
        self.text_proj, self.shot_proj = identity_linear(dim), identity_linear(dim)
        self.clip_text_proj, self.clip_video_proj = identity_linear(dim), identity_linear(dim)

    @property
    def capacity(self) -> torch.Tensor:
        """c = 0.1 + 0.9 sigmoid(theta), in (0.1, 1)."""
        return 0.1 + 0.9 * torch.sigmoid(self.capacity_logit)

    @property
    def eps(self) -> torch.Tensor:
        return self.log_eps.exp()

    def gate(self, text_rep: dict[str, torch.Tensor]) -> torch.Tensor:
        """g per text `[N]`: sigmoid of the gate of its query type."""
        kind = text_rep["relational" if self.gate_by == "relational" else "has_verb"]
        return torch.sigmoid(self.gate_logits[kind.long()])

    def encode_text(self, text: SpanTextFeatures) -> dict[str, torch.Tensor]:
        rows = torch.stack([text.full, text.subject, text.object], dim=1)
        return {
            "rows": F.normalize(self.text_proj(rows), dim=-1),
            "clip": F.normalize(self.clip_text_proj(text.full), dim=-1),
            "has_verb": text.has_verb,
            "relational": text.relational,
        }

    def encode_video(self, video: VideoFeatures) -> dict[str, torch.Tensor]:
        if video.shots is None:
            raise ValueError("SALIHead needs each frame's shot index: configure `data.shots` (shot detection)")
        frames = F.normalize(video.frames, dim=-1)
        shots, shot_mask = shot_means(frames, video.shots, video.mask)
        return {
            "shots": F.normalize(self.shot_proj(shots), dim=-1),
            "shot_mask": shot_mask,
            "clip": F.normalize(self.clip_video_proj(masked_mean(frames, video.mask)), dim=-1),
        }

    def pair_bytes(self, text_rep: dict[str, torch.Tensor], video_rep: dict[str, torch.Tensor]) -> int:
        # M plus the Sinkhorn temporaries (about eight 3 x S float32 tensors per pair under OT).
        per_matrix = 3 * video_rep["shots"].shape[1] * 4
        operator = self.train_operator if self.training else self.eval_operator
        return per_matrix * (8 if operator == "ot" else 3)

    def shot_scores(self, text_rep: dict[str, torch.Tensor], video_rep: dict[str, torch.Tensor]) -> torch.Tensor:
        """The shot-level score s `[N_text, N_video]` with the current operator and penalty."""
        M = torch.einsum("nrd,vsd->nvrs", text_rep["rows"], video_rep["shots"])
        mask = video_rep["shot_mask"].unsqueeze(0).expand(M.shape[0], -1, -1)
        operator, penalty = (
            (self.train_operator, self.train_penalty) if self.training else (self.eval_operator, self.eval_penalty)
        )
        if operator == "max":
            score = greedy_max(M, mask)
            assignment = soft_assignment(M, mask, self.eps) if penalty else None
        else:
            score, assignment = ot_match(M, mask, self.capacity, self.eps, self.sinkhorn_iters, self.ot_finish)
        if penalty:
            assert assignment is not None
            same, far = film_grammar_penalty(assignment[..., 1, :], assignment[..., 2, :], mask, self.penalty_window)
            w_same, w_far = F.softplus(self.penalty_weights)
            score = score - text_rep["relational"].to(score.dtype)[:, None] * (w_same * same + w_far * far)
        return score

    def score(self, text_rep: dict[str, torch.Tensor], video_rep: dict[str, torch.Tensor]) -> torch.Tensor:
        clip = text_rep["clip"] @ video_rep["clip"].t()
        g = self.gate(text_rep)[:, None]
        return g * self.shot_scores(text_rep, video_rep) + (1 - g) * clip
