"""SigLIP as the dual encoders' backbone (Zhai et al., "Sigmoid Loss for Language Image Pre-Training", ICCV 2023,
arXiv:2303.15343), through transformers' `SiglipModel`, loaded from a local `save_pretrained` folder only
(`local_files_only`: nothing is downloaded).

What follows SigLIP and transformers' implementation:

- Frames: the ViT has no class token; a frame's feature is the attention-pooling head's output (MAP,
  `SiglipMultiheadAttentionPoolingHead`), i.e. `get_image_features`' pooler output. There is no visual
  projection: the pooled width is the joint width. Chunking and padding as `CLIPEncoder` (`encode_valid_frames`).
- Text: tokenised with padding to `max_length` (64 for the released models) as SigLIP was trained (transformers'
  model docs: "make sure to set padding='max_length'"), run without an attention mask as `get_text_features`
  is called there, and pooled as SigLIP pools: the *last position*'s state (a padding token for short texts)
  through the text `head` (`get_text_features`' pooler output).

Our choices: word tokens are every position's final-LayerNorm state through the same text `head`, the mask
marks the tokenizer's real tokens (end-of-sequence included); `text_blocks` offers SigLIP's text blocks and
positions to the CLIP4Clip-style temporal modules (their layout is `CLIPEncoderLayer`'s, so they copy as
CLIP's do). The logit scale and the sigmoid loss's bias are recorded as `logit_scale_init` and
`logit_bias_init`: training starts its own t' (the head's `logit_scale`) and b (the sigmoid loss's) from them
and uses SigLIP's sigmoid loss by default (`ContrastiveConfig` in `modules/objectives.py`).

Not supported (a `ConfigError` naming the heads): patch tokens and vision hooks (TS2-Net, UCoFiA: SigLIP's
patch states are not in the joint space, its pooled feature comes from the MAP head, and their token shift
assumes a class token at position 0), and a vision forward (TempMe's token merging keeps class tokens).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from transformers import AutoTokenizer, SiglipModel

from lit_retrieval.errors import ConfigError
from lit_retrieval.models.encoders.base import VideoTextEncoder, VisionForward, VisionHook
from lit_retrieval.models.encoders.clip import check_frame_size, encode_valid_frames, hf_token_counts
from lit_retrieval.models.features import TextFeatures, VideoFeatures
from lit_retrieval.shipped import resolve_model_path

KEY = "model.encoder.init_args"


class SiglipEncoder(VideoTextEncoder):
    """SigLIP frames (MAP-pooled) and text (last-position pooled), module notes.

    Args:
        pretrained: a local `SiglipModel.save_pretrained` folder.
        tokenizer: tokenizer folder; defaults to `pretrained`. (The released SigLIP tokenizer is
            SentencePiece: it needs the `sentencepiece` package.)
        max_text_len: the padded text length; default and maximum: the text tower's positions (64).
        frame_chunk: frames per ViT forward pass.
        gradient_checkpointing: transformers' gradient checkpointing on both towers.
    """

    def __init__(
        self,
        pretrained: str,
        tokenizer: str | None = None,
        max_text_len: int | None = None,
        frame_chunk: int = 256,
        gradient_checkpointing: bool = False,
    ) -> None:
        super().__init__()
        path = resolve_model_path(pretrained)
        if not Path(path).is_dir():
            raise ConfigError(f"{KEY}.pretrained: {pretrained} is not a folder (a SiglipModel save_pretrained folder)")
        try:
            siglip = SiglipModel.from_pretrained(path, local_files_only=True).train()  # from_pretrained: eval mode
        except (OSError, ValueError) as err:  # an empty folder, a config or weights transformers cannot read
            raise ConfigError(f"{KEY}.pretrained: {pretrained} is not a SiglipModel folder ({err})") from None
        if gradient_checkpointing:
            siglip.gradient_checkpointing_enable()
        config = siglip.config
        if not config.vision_config.vision_use_head:
            raise ConfigError(f"{KEY}.pretrained: a SigLIP without its attention-pooling head has no frame feature")
        self.embed_dim = config.vision_config.hidden_size
        if config.text_config.projection_size != self.embed_dim:
            raise ConfigError(
                f"{KEY}.pretrained: text features of width {config.text_config.projection_size} and frame "
                f"features of width {self.embed_dim}: SigLIP's towers must meet in one width"
            )
        positions = config.text_config.max_position_embeddings
        self.max_text_len = positions if max_text_len is None else max_text_len
        if not 0 < self.max_text_len <= positions:
            raise ConfigError(f"{KEY}.max_text_len must be in 1..{positions} (the text positions), got {max_text_len}")
        self.image_size = config.vision_config.image_size
        self.logit_scale_init = float(siglip.logit_scale.detach().reshape(-1)[0])
        self.logit_bias_init = float(siglip.logit_bias.detach().reshape(-1)[0])
        self.siglip_config = config  # what `save_towers` rebuilds a SiglipModel from
        self.frame_chunk = frame_chunk
        self.vision = siglip.vision_model
        self.text_model = siglip.text_model
        self.tokenizer = AutoTokenizer.from_pretrained(
            resolve_model_path(tokenizer or pretrained), local_files_only=True
        )

    def encode_text(self, texts: list[str]) -> TextFeatures:
        device = self.text_model.head.weight.device
        batch = self.tokenizer(
            list(texts),
            padding="max_length",
            truncation=True,
            max_length=self.max_text_len,
            return_attention_mask=True,
            return_tensors="pt",
        ).to(device)
        out = self.text_model(input_ids=batch["input_ids"])  # no attention mask: SigLIP attends to its padding
        tokens = self.text_model.head(out.last_hidden_state)
        return TextFeatures(pooled=out.pooler_output, tokens=tokens, mask=batch["attention_mask"].bool())

    def text_token_counts(self, texts: list[str]) -> list[int]:
        return hf_token_counts(self.tokenizer, texts)

    def encode_video(self, frames: torch.Tensor, mask: torch.Tensor, with_patches: bool = False) -> VideoFeatures:
        check_frame_size(frames, self.image_size)
        if with_patches:
            self._unsupported("patch tokens")
        return encode_valid_frames(frames, mask, self._encode_chunk, self.embed_dim, self.frame_chunk, False, False)

    def _encode_chunk(self, chunk: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
        return self.vision(pixel_values=chunk).pooler_output.unsqueeze(1)

    @staticmethod
    def _unsupported(what: str) -> None:
        raise ConfigError(
            f"model.head: SiglipEncoder has no {what}: SigLIP pools each frame with its attention-pooling head and "
            "its ViT has no class token, so heads that use patch tokens or hook the ViT blocks (TS2NetHead, "
            "UCoFiAHead) cannot run on it"
        )

    def add_vision_hook(self, block: int, hook: VisionHook) -> None:
        self._unsupported("vision hooks")

    def set_vision_forward(self, forward: VisionForward) -> None:
        raise ConfigError(
            "model.head: TempMeHead's token merging keeps one class token per frame; SigLIP's ViT has none "
            "(SiglipEncoder cannot host it; use CLIPEncoder)"
        )

    def text_blocks(self) -> tuple[list[nn.Module], torch.Tensor] | None:
        """SigLIP's text blocks and positions for CLIP4Clip-style temporal modules (arXiv:2104.08860,
        Sec. 3.3); their parameters have `CLIPEncoderLayer`'s names and shapes (our choice, module notes)."""
        return list(self.text_model.encoder.layers), self.text_model.embeddings.position_embedding.weight

    def save_towers(self, folder: Path, logit_scale: float, logit_bias: float | None) -> str:
        """A `SiglipModel.save_pretrained` folder with its tokenizer; the trained t' and b (the checkpoint's
        own b when training used InfoNCE) are the model's `logit_scale` and `logit_bias`."""
        siglip = SiglipModel(self.siglip_config)
        siglip.vision_model, siglip.text_model = self.vision, self.text_model
        with torch.no_grad():
            siglip.logit_scale.fill_(logit_scale)
            siglip.logit_bias.fill_(self.logit_bias_init if logit_bias is None else logit_bias)
        siglip.save_pretrained(folder)
        self.tokenizer.save_pretrained(folder)
        return "transformers"

    def backbone_parameter_names(self) -> set[str]:
        names = {f"vision.{n}" for n, _ in self.vision.named_parameters()}
        names |= {f"text_model.{n}" for n, _ in self.text_model.named_parameters()}
        return {n for n in names if ".lora_" not in n}
