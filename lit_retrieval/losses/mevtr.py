"""MeVTR's multi-event loss (Zhang et al., ICCV 2023, arXiv:2308.11551; the reference's `CrossEnMulti`).

Every event caption of a video is its own text: `logits` [N_t, B] scores the batch's N_t captions
against its B videos, `owner[i]` is caption i's video. Video-to-text has several positives per
video (a softmax over the texts of each video column), text-to-video one:

- `balanced` (the reference default): L_v2t = mean_v [-(1/|P_v|) sum_{i in P_v} log softmax_i(S_:,v)],
  the other positives of v staying in the denominator;
- `disjoint` (the paper's disjoint softmax): each positive i of v competes only with the
  negatives of v: -log(e^{S_iv} / (e^{S_iv} + sum_{k not in P_v} e^{S_kv}));
- L_t2v = mean_i -log softmax_v(S_i,:)_{owner(i)};  L = L_v2t + alpha * L_t2v.

With `dynamic_alpha`, alpha is the previous training step's L_v2t / L_t2v (detached, kept in a
buffer so checkpoints restore it; the first step uses `alpha`).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from lit_retrieval.errors import ConfigError


class MeVTRLoss(nn.Module):
    def __init__(
        self, v2t: Literal["balanced", "disjoint"] = "balanced", alpha: float = 1.0, dynamic_alpha: bool = False
    ) -> None:
        super().__init__()
        if v2t not in ("balanced", "disjoint"):
            raise ConfigError(f"v2t must be 'balanced' or 'disjoint', got {v2t!r}")
        self.v2t = v2t
        self.alpha = alpha
        self.dynamic_alpha = dynamic_alpha
        self.register_buffer("prev_ratio", torch.tensor(float(alpha)))

    def forward(self, logits: torch.Tensor, owner: torch.Tensor) -> torch.Tensor:
        positives = F.one_hot(owner, logits.shape[1]).bool()  # [N_t, B]
        if not positives.any(0).all():
            raise ValueError("every video of the batch needs at least one caption")
        t2v = F.cross_entropy(logits, owner)
        if self.v2t == "balanced":
            log_probs = logits.log_softmax(0)
            per_video = -(log_probs * positives).sum(0) / positives.sum(0)
        else:
            negatives = logits.masked_fill(positives, float("-inf")).logsumexp(0, keepdim=True)  # [1, B]
            log_probs = logits - torch.logaddexp(logits, negatives.expand_as(logits))
            per_video = -(log_probs * positives).sum(0) / positives.sum(0)
        v2t = per_video.mean()
        alpha = self.prev_ratio.item() if self.dynamic_alpha else self.alpha
        if self.dynamic_alpha and self.training:
            self.prev_ratio.fill_(float(v2t.detach() / t2v.detach().clamp_min(1e-12)))
        return v2t + alpha * t2v
