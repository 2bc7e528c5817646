"""Token-level encoder outputs shared by every head (docs/architecture.md)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class TextFeatures:
    """`pooled` [B, D] sentence features, `tokens` [B, L, D] projected word tokens, `mask` [B, L]."""

    pooled: torch.Tensor
    tokens: torch.Tensor
    mask: torch.Tensor


@dataclass
class VideoFeatures:
    """`frames` [B, T, D] projected frame CLS features (zeros where padded), `mask` [B, T] bool,
    `patches` [B, T, N, D] projected patch tokens when a head asked for them, `shots` [B, T] the
    shot index of each frame (-1 where padded) when the data has shots (SALI)."""

    frames: torch.Tensor
    mask: torch.Tensor
    patches: torch.Tensor | None = None
    shots: torch.Tensor | None = None
