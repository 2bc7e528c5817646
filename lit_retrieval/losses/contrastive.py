"""GVE's symmetric InfoNCE with in-batch, explicit hard and cross-device negatives (GVE Eq. 1).

For query i with positive y_i+ and hard negatives H_i, at temperature tau (0.03, GVE Tab. 9):

    L_i(q->y) = -log exp(s(q_i, y_i+)/tau) / [exp(s(q_i, y_i+)/tau) + sum_{j!=i} exp(s(q_i, y_j+)/tau)
                                              + sum_{k in H_i} exp(s(q_i, y_k-)/tau)]
    L_i = (L_i(q->y) + L_i(y->q)) / 2

with s the cosine of L2-normalised embeddings. In the y->q direction a positive is contrasted with
the other queries (hard negatives are targets, not queries). `hard_negatives: own` is Eq. 1 as
written (each query sees its own H_i); `shared` lets every query see every hard negative in the
global batch, as the released training code does. Pairs whose targets are the same item
(`target_keys`) are not negatives of one another.

Cross-device negatives (GVE A.8): embeddings of every rank are all-gathered (`gather_global`) and
each rank computes the loss of the *whole* global batch. The gather's backward sums, for each
rank's slice, the gradients every rank computed there, so after DDP's (or DeepSpeed's) gradient
averaging each parameter holds exactly the gradient of the global-batch loss (tested against one
process holding the whole batch).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from lit_retrieval.distributed import distributed_world, gather_global
from lit_retrieval.errors import ConfigError

HardNegatives = Literal["own", "shared"]


class MultimodalInfoNCE(nn.Module):
    """Returns `loss` (the global-batch loss, to back-propagate) and the GVE A.10 training metrics:
    `loss_value` (the same, detached), `positive` (mean positive cosine), `mean_score` (mean
    cosine over all query-candidate pairs) and `margin` (mean over queries of the positive cosine
    minus the hardest negative's)."""

    def __init__(
        self, temperature: float = 0.03, hard_negatives: HardNegatives = "own", cross_device: bool = True
    ) -> None:
        super().__init__()
        if temperature <= 0:
            raise ConfigError(f"temperature must be positive, got {temperature}")
        if hard_negatives not in ("own", "shared"):
            raise ConfigError(f"hard_negatives must be 'own' or 'shared', got {hard_negatives!r}")
        self.temperature = temperature
        self.hard_negatives = hard_negatives
        self.cross_device = cross_device

    def forward(
        self,
        query: torch.Tensor,
        target: torch.Tensor,
        negatives: torch.Tensor | None = None,
        target_keys: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """`query`, `target`: `[B, d]`; `negatives`: `[B, K, d]`; `target_keys`: `[B]` int ids of
        the targets' content (equal keys are the same item). Embeddings are normalised here."""
        if query.shape != target.shape or query.ndim != 2:
            raise ValueError(
                f"query and target must both be [B, d], got {tuple(query.shape)} and {tuple(target.shape)}"
            )
        world = distributed_world() if self.cross_device else 1
        gather = gather_global if world > 1 else (lambda t: t)
        q = gather(F.normalize(query.float(), dim=-1))
        t = gather(F.normalize(target.float(), dim=-1))
        n = gather(F.normalize(negatives.float(), dim=-1)) if negatives is not None and negatives.shape[1] else None
        keys = gather(target_keys) if target_keys is not None else None
        batch = q.shape[0]
        labels = torch.arange(batch, device=q.device)
        pairs = q @ t.t()  # [B, B]
        same_target = torch.zeros_like(pairs, dtype=torch.bool)
        if keys is not None:
            same_target = (keys[:, None] == keys[None, :]) & ~torch.eye(batch, dtype=torch.bool, device=q.device)
        in_batch = pairs.masked_fill(same_target, float("-inf"))
        if n is None:
            candidates = in_batch
        elif self.hard_negatives == "own":
            candidates = torch.cat([in_batch, torch.einsum("bd,bkd->bk", q, n)], dim=1)
        else:
            candidates = torch.cat([in_batch, q @ n.reshape(-1, n.shape[-1]).t()], dim=1)
        q_to_y = F.cross_entropy(candidates / self.temperature, labels)
        y_to_q = F.cross_entropy(in_batch.t() / self.temperature, labels)
        loss = (q_to_y + y_to_q) / 2
        with torch.no_grad():
            finite = torch.isfinite(candidates)
            negative = candidates.clone()
            negative[labels, labels] = float("-inf")
            hardest = negative.amax(dim=1)
            positive = pairs.diagonal()
            margin = (positive - hardest)[torch.isfinite(hardest)]
            stats = {
                "positive": positive.mean(),
                "mean_score": candidates[finite].mean(),
                "margin": margin.mean() if margin.numel() else positive.new_tensor(float("nan")),
            }
        return {"loss": loss, "loss_value": loss.detach(), **stats}
