"""The encoder contract every head builds on (DESIGN.md "Encoders")."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch import nn

from lit_retrieval.models.features import TextFeatures, VideoFeatures


class VideoTextEncoder(nn.Module, ABC):
    """A text tower and a frame tower with a shared embedding width `embed_dim`.

    Both expose token-level outputs (word tokens, frame CLS features, optional patch tokens)
    because later heads (X-CLIP, TS2-Net, UCoFiA, ...) need them, not only pooled vectors.
    """

    embed_dim: int
    image_size: int
    logit_scale_init: float

    @abstractmethod
    def encode_text(self, texts: list[str]) -> TextFeatures:
        """Tokenise and encode raw strings."""

    @abstractmethod
    def encode_video(self, frames: torch.Tensor, mask: torch.Tensor, with_patches: bool = False) -> VideoFeatures:
        """Encode normalised frames `[B, T, 3, H, W]` whose valid positions are `mask` `[B, T]`."""

    @abstractmethod
    def backbone_parameter_names(self) -> set[str]:
        """Names (relative to this module) of parameters loaded from pretrained weights.

        The LightningModule gives them the backbone learning rate; everything else (newly
        initialised layers, towers built from a config) trains at the head learning rate.
        """

    def text_blocks(self) -> tuple[list[nn.Module], torch.Tensor] | None:
        """The text transformer's blocks and position table, for heads that copy them into their
        temporal modules (CLIP4Clip, baselines spec 0.5); `None` when the encoder has none."""
        return None
