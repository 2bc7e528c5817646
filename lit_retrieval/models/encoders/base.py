"""The encoder contract every head builds on (docs/architecture.md)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from lit_retrieval.errors import ConfigError
from lit_retrieval.models.features import TextFeatures, VideoFeatures


VisionHook = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
# (vision transformer, pixel values [F, 3, H, W] of whole videos, frames per video [V]) -> the last
# hidden state of each frame's class token [F, C], before the final LayerNorm and projection.
VisionForward = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]


class VideoTextEncoder(nn.Module, ABC):
    """A text tower and a frame tower with a shared embedding width `embed_dim`.

    Both expose token-level outputs (word tokens, frame CLS features, optional patch tokens)
    because later heads (X-CLIP, TS2-Net, UCoFiA, ...) need them, not only pooled vectors.
    """

    embed_dim: int
    image_size: int
    logit_scale_init: float  # the checkpoint's t' = log(1/tau) (`ContrastiveConfig` can start from it)
    logit_bias_init: float | None = None  # the checkpoint's sigmoid-loss bias b: trained with SigLIP's loss
    max_text_len: int  # most text tokens a query is encoded with

    @abstractmethod
    def encode_text(self, texts: list[str]) -> TextFeatures:
        """Tokenise and encode raw strings."""

    def text_token_counts(self, texts: list[str]) -> list[int]:
        """Tokens of each text under this encoder's tokenizer before truncation, special tokens
        included: a text longer than `max_text_len` loses its tail (MELON Sec. 1's truncation)."""
        raise NotImplementedError(f"{type(self).__name__} does not count text tokens")

    @abstractmethod
    def encode_video(self, frames: torch.Tensor, mask: torch.Tensor, with_patches: bool = False) -> VideoFeatures:
        """Encode normalised frames `[B, T, 3, H, W]` whose valid positions are `mask` `[B, T]`."""

    @abstractmethod
    def backbone_parameter_names(self) -> set[str]:
        """Names (relative to this module) of parameters loaded from pretrained weights.

        The LightningModule gives them the backbone learning rate; everything else (newly
        initialised layers, towers built from a config) trains at the head learning rate.
        """

    def add_vision_hook(self, block: int, hook: VisionHook) -> None:
        """Run `hook(tokens, lengths)` on the normalised input of vision block `block`'s attention
        (negative counts from the end); heads that change the frame encoder itself (TS2-Net's
        token shift) use this instead of copying the encoder. `tokens` [F, N, C] are the valid
        frames of the current chunk, video after video; `lengths` [V] their count per video."""
        raise NotImplementedError(f"{type(self).__name__} has no vision blocks to hook")

    def set_vision_forward(self, forward: VisionForward) -> None:
        """Replace the frame tower's block loop with `forward` (methods that restructure the token
        sequence inside the ViT, such as TempMe's token merging across frames). It receives
        whole videos and returns one class-token state per frame; patch tokens are then
        unavailable (`with_patches` raises)."""
        raise NotImplementedError(f"{type(self).__name__} has no vision transformer to take over")

    def save_towers(self, folder: Path, logit_scale: float, logit_bias: float | None) -> str:
        """Write both towers in their own library's format into `folder` (the trained `logit_scale`, and
        the sigmoid loss's `logit_bias` where the library's model has one) so that library alone loads
        them; returns the library's name (`export-dual-encoder`, docs/export.md)."""
        raise ConfigError(f"{type(self).__name__} has no library format to export its towers to")

    def text_blocks(self) -> tuple[list[nn.Module], torch.Tensor] | None:
        """The text transformer's blocks and position table, for heads that copy them into their
        temporal modules (CLIP4Clip, arXiv:2104.08860, Sec. 3.3); `None` when the encoder has none."""
        return None
