"""Building blocks of the CLIP4Clip-family temporal modules (CLIP4Clip, arXiv:2104.08860, Sec. 3.3).

CLIP4Clip's seqTransf and tightTransf (and X-CLIP's default temporal module) are stacks of
CLIP-style residual attention blocks: pre-LayerNorm, width/64 heads, a 4x QuickGELU MLP, plus a
learned position table. Here the blocks are transformers' own `CLIPEncoderLayer`, not a copy.
CLIP4Clip initialises them from CLIP's *text* blocks 0..n-1 and the position table from CLIP's
text positions (the paper's "image encoder" is a typo, ArrowLuo/CLIP4Clip#60); we do the same when
the encoder offers text blocks of the joint width, and otherwise use CLIP4Clip's N(0, 0.02) init.

LayerNorm eps: these modules re-implement CLIP4Clip's cross/temporal transformer
(`module_cross.py`), whose LayerNorm is its own `until_module.LayerNorm` with eps 1e-12, even
where the weights are copied from CLIP's text blocks; so every LayerNorm built here uses
`CROSS_LAYER_NORM_EPS` (1e-12) by default, not the 1e-5 of the CLIP config the blocks are shaped
from. This matters for inputs of tiny variance (UATVR's extra tokens are bare position vectors).
The layers of the encoder itself (CLIP's ViT and text blocks, which TempMe, TS2-Net's and UCoFiA's
shift reuse) keep CLIP's 1e-5. eps is not part of a state dict: checkpoints written before this
choice load unchanged and score within the eps effect; `layer_norm_eps: 1e-5` reproduces them.
"""

from __future__ import annotations

import copy
import logging

import torch
from torch import nn
from transformers import CLIPTextConfig
from transformers.models.clip.modeling_clip import CLIPEncoderLayer

from lit_retrieval.models.encoders.base import VideoTextEncoder

log = logging.getLogger(__name__)

CROSS_LAYER_NORM_EPS = 1e-12  # CLIP4Clip's until_module.LayerNorm (used by module_cross.py)


def init_new_layers(module: nn.Module) -> None:
    """CLIP4Clip's `init_weights` for new layers: N(0, 0.02) weights, zero biases, unit LayerNorms."""
    for sub in module.modules():
        if isinstance(sub, (nn.Linear, nn.Embedding)):
            nn.init.normal_(sub.weight, std=0.02)
        if isinstance(sub, nn.Linear) and sub.bias is not None:
            nn.init.zeros_(sub.bias)
        if isinstance(sub, nn.LayerNorm):
            nn.init.ones_(sub.weight)
            nn.init.zeros_(sub.bias)


class ClipStyleTransformer(nn.Module):
    """Position table + `layers` CLIP blocks over a sequence with a key mask (no causal mask).
    `config` gives the block geometry (default: width/64 heads, 4x QuickGELU MLP); its LayerNorm
    eps is replaced by `layer_norm_eps` (CLIP4Clip's 1e-12 by default, see the module notes)."""

    def __init__(
        self,
        width: int,
        layers: int,
        max_len: int,
        dropout: float = 0.0,
        config: CLIPTextConfig | None = None,
        layer_norm_eps: float = CROSS_LAYER_NORM_EPS,
    ) -> None:
        super().__init__()
        if config is None:
            config = CLIPTextConfig(
                hidden_size=width,
                intermediate_size=4 * width,
                num_attention_heads=max(1, width // 64),
                hidden_act="quick_gelu",
            )
        config._attn_implementation = "sdpa"
        config.layer_norm_eps = layer_norm_eps
        self.positions = nn.Embedding(max_len, width)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(CLIPEncoderLayer(config) for _ in range(layers))
        init_new_layers(self)

    @classmethod
    def for_encoder(
        cls,
        encoder: VideoTextEncoder,
        layers: int,
        max_len: int,
        dropout: float = 0.0,
        copy_text: bool = True,
        layer_norm_eps: float = CROSS_LAYER_NORM_EPS,
    ) -> ClipStyleTransformer:
        """Blocks shaped like the encoder's text blocks when those have the joint width (and, with
        `copy_text`, initialised from its first `layers` text blocks and its text positions, as in
        CLIP4Clip); otherwise default blocks with the N(0, 0.02) init. LayerNorms use
        `layer_norm_eps` either way."""
        width = encoder.embed_dim
        source = encoder.text_blocks()
        usable = source is not None and source[1].shape[1] == width and len(source[0]) >= layers
        if not usable:
            log.info("temporal module: no text blocks of width %d to copy; using the N(0, 0.02) init", width)
            return cls(width, layers, max_len, dropout, layer_norm_eps=layer_norm_eps)
        blocks, positions = source
        module = cls(width, layers, max_len, dropout, copy.deepcopy(blocks[0].self_attn.config), layer_norm_eps)
        if copy_text:
            for target, block in zip(module.blocks, blocks):
                target.load_state_dict(block.state_dict())
            rows = min(len(positions), max_len)
            with torch.no_grad():
                module.positions.weight[:rows] = positions[:rows]
        return module

    def forward(self, x: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """`x` [B, N, D], `mask` [B, N] (True = attend); a row without any valid key attends to all
        (its outputs are masked by the caller), so no NaN appears. `positions` [N, D] replaces the
        module's own position table (UATVR runs its text tokens through the same blocks with a
        word-position table of their own)."""
        if positions is None:
            if x.shape[1] > self.positions.num_embeddings:
                raise ValueError(
                    f"{x.shape[1]} positions but the temporal module has {self.positions.num_embeddings} "
                    "(raise max_frames)"
                )
            positions = self.positions.weight[: x.shape[1]]
        keys = mask.bool() | ~mask.bool().any(1, keepdim=True)
        attention = keys[:, None, None, :].expand(-1, 1, x.shape[1], -1)
        hidden = self.dropout(x + positions)
        for block in self.blocks:
            hidden = block(hidden, attention)
        return hidden
