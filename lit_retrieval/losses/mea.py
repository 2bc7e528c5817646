"""Multi-Event Aware loss (MELON Sec. 4.3, Eqs. 3-8).

`sim` is the batch's [B, B] similarity matrix with `sim[i, j] = s(v_j, q_i)` (text i vs video j,
positives on the diagonal); `partial_sim` is [B, L] with `partial_sim[i, l] = s(v_i, q~_{i,l})`,
video i against its l-th partial query; the optional boolean `partial_mask` [B, L] marks the slots
that hold a partial query. Similarities are the head's raw scores s (cosine for CLIP4Clip), not the
temperature-scaled logits.

Normalisation. Eqs. 3, 4 and 7 are means over the batch's (video, partial query) pairs,
"1/(BL) sum_{i=1}^{B} sum_{l=1}^{L}", written for batches where every video has L partial queries.
A partial query is "a proper subset of the original query q_i's constituent event sentences", so a
one-event video has none, and a video with fewer than L candidates (K = 2, m = 2: two) has fewer.
Choice (the paper is silent on such videos): L_push, L_pull and delta are the means over the pairs
that exist (the marked slots), each pair weighted as in Eqs. 3-4 and 7; a video without a partial
query adds no term and still counts in xi (Eq. 5, "1/(2B) sum_{i=1}^{B}", which needs no partial
query) and in L_std. With every video at L pairs this is exactly 1/(BL). A batch without any
partial query has L_push = L_pull = 0 and leaves the threshold state alone.

The adaptive threshold of step t uses the previous training step's similarities (Eqs. 4-6). The
statistics delta and xi of each training step are kept in buffers, so they are saved in checkpoints
and a resumed run continues with the same threshold. Choice (the paper is silent): the very first
step, which has no previous step, uses its own detached statistics. delta and xi are computed over
the similarities this module sees (the local batch unless the caller gathers across processes).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class MEAOutput:
    loss: torch.Tensor  # L_push + L_pull (Eq. 8), or L_push alone without the pull term
    push: torch.Tensor  # Eq. 3
    pull: torch.Tensor  # Eq. 7 (zero when disabled)
    theta: torch.Tensor  # Eq. 6, the threshold used at this step
    delta: torch.Tensor  # Eq. 4, from the previous step
    xi: torch.Tensor  # Eq. 5, from the previous step


def hardest_negative_text(sim: torch.Tensor) -> torch.Tensor:
    """max_{j != i} s(v_i, q_j) for each video i: column maxima off the diagonal, [B]."""
    off_diagonal = sim.masked_fill(torch.eye(len(sim), dtype=torch.bool, device=sim.device), float("-inf"))
    return off_diagonal.amax(dim=0)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `values` over the set entries of `mask` (zero, still in the graph, when none is)."""
    weights = mask.to(values.dtype)
    return (values * weights).sum() / weights.sum().clamp_min(1.0)


def threshold_statistics(
    sim: torch.Tensor, partial_sim: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(delta, xi) of Eqs. 4 and 5 from one step's similarities."""
    positive = sim.diagonal()
    delta = masked_mean(positive.unsqueeze(1) - partial_sim, mask)
    xi = (positive - hardest_negative_text(sim)).clamp_min(0).sum() / (2 * len(positive))
    return delta, xi


class MEALoss(nn.Module):
    """L_mea with the MELON Tab. 3 ablation switches.

    `use_xi=False` drops the upper bound (theta = delta); `use_pull=False` drops L_pull.
    Push only: `MEALoss(use_xi=False, use_pull=False)`; full: `MEALoss()`.
    """

    def __init__(self, use_xi: bool = True, use_pull: bool = True) -> None:
        super().__init__()
        self.use_xi = use_xi
        self.use_pull = use_pull
        self.register_buffer("prev_delta", torch.zeros(()))
        self.register_buffer("prev_xi", torch.zeros(()))
        self.register_buffer("has_prev", torch.zeros((), dtype=torch.bool))

    def forward(
        self, sim: torch.Tensor, partial_sim: torch.Tensor, partial_mask: torch.Tensor | None = None
    ) -> MEAOutput:
        if (
            sim.ndim != 2
            or sim.shape[0] != sim.shape[1]
            or partial_sim.ndim != 2
            or partial_sim.shape[0] != sim.shape[0]
        ):
            raise ValueError(
                f"expected sim [B, B] and partial_sim [B, L], got {tuple(sim.shape)} and {tuple(partial_sim.shape)}"
            )
        mask = torch.ones_like(partial_sim, dtype=torch.bool) if partial_mask is None else partial_mask.bool()
        if mask.shape != partial_sim.shape:
            raise ValueError(f"partial_mask {tuple(mask.shape)} must match partial_sim {tuple(partial_sim.shape)}")
        current_delta, current_xi = threshold_statistics(sim.detach(), partial_sim.detach(), mask)
        if bool(self.has_prev):
            delta, xi = self.prev_delta.clone(), self.prev_xi.clone()
        else:
            delta, xi = current_delta, current_xi
        theta = torch.minimum(delta, xi) if self.use_xi else delta
        positive = sim.diagonal().unsqueeze(1)
        push = masked_mean((partial_sim - positive + theta).clamp_min(0), mask)
        if self.use_pull:
            pull = masked_mean((hardest_negative_text(sim).unsqueeze(1) - partial_sim).clamp_min(0), mask)
        else:
            pull = torch.zeros((), device=sim.device, dtype=sim.dtype)
        if self.training and bool(mask.any()):  # a step without partial queries leaves the state alone
            self.prev_delta.copy_(current_delta)
            self.prev_xi.copy_(current_xi)
            self.has_prev.fill_(True)
        return MEAOutput(loss=push + pull, push=push, pull=pull, theta=theta, delta=delta, xi=xi)
