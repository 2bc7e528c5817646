"""Symmetric InfoNCE on a text x video logit matrix (MELON Eq. 2)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class SymmetricInfoNCE(nn.Module):
    """L_std = L_q2v + L_v2q (MELON Eq. 2) for logits `[B, B]` (text i vs video j, already
    divided by tau) with matching pairs on the diagonal.

    `average_directions=True` gives (L_q2v + L_v2q) / 2, CLIP4Clip's reference choice
    (arXiv:2104.08860, its code's `CrossEn`); MELON sums them, which is the default.
    """

    def __init__(self, average_directions: bool = False) -> None:
        super().__init__()
        self.average_directions = average_directions

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        if logits.ndim != 2 or logits.shape[0] != logits.shape[1]:
            raise ValueError(f"expected a square [B, B] logit matrix, got {tuple(logits.shape)}")
        labels = torch.arange(logits.shape[0], device=logits.device)
        loss = F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)
        return loss / 2 if self.average_directions else loss
