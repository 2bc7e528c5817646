"""open_clip as the dual encoders' backbone (OpenCLIP: Ilharco et al. 2021; Cherti et al., "Reproducible
scaling laws for contrastive language-image learning", CVPR 2023; the `open_clip_torch` package, 3.x).

Loading is local only. `model` is one of open_clip's model-config names (`ViT-B-32`: the JSON files the
package ships), the path of a model-config JSON in that format (registered with `open_clip.add_model_config`,
its file stem becoming the name), or a folder in the hub layout (`open_clip_config.json` + weights, read
through open_clip's `local-dir:` schema). `pretrained` is a checkpoint file, handed to
`open_clip.create_model(name, pretrained=<absolute path>)`, which loads it with `load_checkpoint` (state dicts
in `.pt` / `.bin` / `.safetensors`; OpenAI-format and other known layouts converted by open_clip). What would
download is refused with a `ConfigError` before open_clip is asked: a pretrained *tag* (`openai`,
`laion2b_s34b_b79k`), `hf-hub:` names, Hugging Face text towers (`hf_model_name`) and Hugging Face tokenizers
named by a hub id (give `tokenizer:` a local copy instead).

Frames: each valid frame through the visual tower, as `encode_image` does (CLIP4Clip's image-level encoding);
chunking and padding as `CLIPEncoder` (`encode_valid_frames`). Patch tokens, when a head asks, are the ViT's
last-block tokens with `ln_post` and `proj` applied to every token (open_clip's `forward_intermediates`), as
`CLIPEncoder` gives them; only open_clip's own ViT without attentional pooling has them. Vision hooks are
pre-hooks on the attention of `visual.transformer.resblocks`.

Text: open_clip's tokenizer pads every text to the model's context length (77 for CLIP), as open_clip trains,
and the pooled feature is `encode_text`'s (the EOT token for CLIP's `argmax` pooling). Word tokens are the
last block's states with `ln_final` and the text projection applied to every position (our choice, as
`CLIPEncoder` does for Hugging Face CLIP); the mask keeps the tokens up to the end-of-text token.

Not kept as parameters: the checkpoint's logit scale and a SigLIP-style logit bias, recorded as
`logit_scale_init` and `logit_bias_init`; the head's temperature and the sigmoid loss's bias start from
them (a checkpoint with a bias trains with SigLIP's sigmoid loss by default, `ContrastiveConfig`).
"""

from __future__ import annotations

import json
import pickle
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import nn
from transformers import CLIPTextConfig
from transformers.models.clip.modeling_clip import CLIPEncoderLayer

from lit_retrieval.errors import ConfigError
from lit_retrieval.models.encoders.base import VideoTextEncoder, VisionForward, VisionHook
from lit_retrieval.models.encoders.clip import (
    check_frame_size,
    encode_valid_frames,
    hf_token_counts,
    hook_attention_input,
)
from lit_retrieval.models.encoders.longclip import _split_qkv
from lit_retrieval.models.features import TextFeatures, VideoFeatures
from lit_retrieval.shipped import resolve_model_path

KEY = "model.encoder.init_args"
PATCH_HEADS = "heads that use patch tokens or hook the ViT blocks (TS2NetHead, UCoFiAHead)"


def import_open_clip() -> ModuleType:
    """open_clip, or a `ConfigError` naming the extra that installs it."""
    try:
        import open_clip
    except ImportError:
        raise ConfigError(
            "model.encoder: OpenCLIPEncoder needs open_clip: pip install 'lit-retrieval[openclip]'"
        ) from None
    return open_clip


def resolve_model_config(model: str) -> tuple[str, dict[str, Any]]:
    """The name open_clip knows `model` by and its model config. A JSON file is registered under its
    stem (`open_clip.add_model_config`); a stem that names a different built-in config is refused, since
    registering it would replace that config in this process."""
    open_clip = import_open_clip()
    path = Path(model)
    if model.startswith("hf-hub:"):
        raise ConfigError(f"{KEY}.model: {model!r} downloads from the Hugging Face hub; give a local folder or file")
    if path.is_dir():
        name = f"local-dir:{path.resolve()}"
        if not (path / "open_clip_config.json").is_file():
            raise ConfigError(f"{KEY}.model: {model} has no open_clip_config.json (open_clip's hub layout)")
        return name, open_clip.get_model_config(name)
    if path.suffix == ".json":
        if not path.is_file():
            raise ConfigError(f"{KEY}.model: {model} does not exist")
        try:
            config = json.loads(path.read_bytes().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ConfigError(f"{KEY}.model: {model} is not a JSON model config ({err})") from None
        if not isinstance(config, dict) or not {"embed_dim", "vision_cfg", "text_cfg"} <= set(config):
            raise ConfigError(
                f"{KEY}.model: {model} is not an open_clip model config (embed_dim, vision_cfg, text_cfg; the "
                "format of open_clip's model_configs/*.json)"
            )
        known = open_clip.get_model_config(path.stem)
        if known is None:
            open_clip.add_model_config(path)
        elif known != config:
            raise ConfigError(
                f"{KEY}.model: {path.name} would replace open_clip's model config {path.stem!r}: rename the file"
            )
        return path.stem, config
    config = open_clip.get_model_config(model)
    if config is None:
        raise ConfigError(
            f"{KEY}.model: {model!r} is neither an open_clip model config name (open_clip.list_models()) "
            "nor a model-config .json file nor a folder with open_clip_config.json"
        )
    return model, config


def check_offline(name: str, config: dict[str, Any], pretrained: str | None, tokenizer: str | None) -> None:
    """Refuse what open_clip would download (see the module notes) and what this encoder cannot run."""
    text_cfg = config.get("text_cfg", {})
    if "multimodal_cfg" in config:
        raise ConfigError(f"{KEY}.model: {name} is a CoCa model (multimodal_cfg); OpenCLIPEncoder runs CLIP models")
    if text_cfg.get("hf_model_name"):
        raise ConfigError(
            f"{KEY}.model: {name}'s text tower is the Hugging Face model {text_cfg['hf_model_name']!r}, which "
            "open_clip builds from the hub; OpenCLIPEncoder supports open_clip's own text transformer"
        )
    hub_tokenizer = text_cfg.get("hf_tokenizer_name")
    if hub_tokenizer and tokenizer is None and not name.startswith("local-dir:") and not Path(hub_tokenizer).is_dir():
        raise ConfigError(
            f"{KEY}.tokenizer: {name} tokenizes with the Hugging Face tokenizer {hub_tokenizer!r}, which open_clip "
            "would download: give `tokenizer:` a local copy (a save_pretrained folder)"
        )
    if text_cfg.get("tokenizer_mode"):
        raise ConfigError(f"{KEY}.model: tokenizer_mode {text_cfg['tokenizer_mode']!r} is not supported")
    if pretrained is not None and name.startswith("local-dir:"):
        raise ConfigError(f"{KEY}.pretrained: a model folder brings its own weights; leave pretrained unset")
    if pretrained is not None and not Path(pretrained).is_file():
        raise ConfigError(
            f"{KEY}.pretrained: {pretrained} is not a file; OpenCLIPEncoder loads local checkpoints only "
            "(open_clip's pretrained tags such as 'openai' download)"
        )


def load_open_clip(
    model: str, pretrained: str | None = None, tokenizer: str | None = None
) -> tuple[nn.Module, Any, dict[str, Any]]:
    """An open_clip model, its tokenizer and its model config, from local files only (module notes)."""
    open_clip = import_open_clip()
    name, config = resolve_model_config(model)
    check_offline(name, config, pretrained, tokenizer)
    # an absolute path can never be taken for a pretrained tag (create_model looks tags up first)
    checkpoint = str(Path(pretrained).resolve()) if pretrained is not None else None
    try:
        clip = open_clip.create_model(
            name,
            pretrained=checkpoint,
            pretrained_image=False,
            pretrained_text=False,
            require_pretrained=checkpoint is not None or name.startswith("local-dir:"),
        )
    except (pickle.UnpicklingError, RuntimeError, OSError, EOFError, KeyError) as err:  # open_clip's load_checkpoint
        where = pretrained if pretrained is not None else model
        raise ConfigError(f"{KEY}.pretrained: {where} cannot be loaded as an open_clip checkpoint ({err})") from None
    text_cfg = config["text_cfg"]
    context_length = text_cfg.get("context_length", 77)
    kwargs = text_cfg.get("tokenizer_kwargs") or {}
    hub_tokenizer = text_cfg.get("hf_tokenizer_name")
    if tokenizer is not None:
        source = resolve_model_path(tokenizer)
    elif hub_tokenizer and name.startswith("local-dir:"):
        source = name.removeprefix("local-dir:")  # open_clip's rule: a model folder holds its tokenizer
    else:
        source = hub_tokenizer  # a local folder (check_offline) or none
    if source:
        text_tokenizer = open_clip.tokenizer.HFTokenizer(source, context_length=context_length, **kwargs)
    else:
        text_tokenizer = open_clip.SimpleTokenizer(context_length=context_length, **kwargs)
        if text_tokenizer.reduction_fn is not None:
            raise ConfigError(f"{KEY}.model: tokenizer reduction_mask (a training augmentation) is not supported")
    return clip, text_tokenizer, config


def project(x: torch.Tensor, projection: nn.Module | torch.Tensor | None) -> torch.Tensor:
    """open_clip's projections: a matrix (`x @ proj`), a linear layer, or none."""
    if projection is None:
        return x
    return projection(x) if isinstance(projection, nn.Module) else x @ projection


def as_clip_layers(blocks: nn.ModuleList) -> list[CLIPEncoderLayer] | None:
    """Copies of open_clip's residual attention blocks as transformers' `CLIPEncoderLayer`s (the layout of
    the heads' temporal modules), or None for blocks that have no such equivalent (layer scale, custom
    attention, other activations). The weights map as for OpenAI checkpoints (`longclip._split_qkv`)."""
    from open_clip.transformer import QuickGELU, ResidualAttentionBlock

    first = blocks[0]
    if not isinstance(first, ResidualAttentionBlock):
        return None
    act = first.mlp.gelu
    exact_gelu = type(act) is nn.GELU and act.approximate == "none"
    plain = all(
        isinstance(b, ResidualAttentionBlock)
        and isinstance(b.ls_1, nn.Identity)
        and isinstance(b.ls_2, nn.Identity)
        and not hasattr(b, "ln_1_kv")
        for b in blocks
    )
    if not plain or not (isinstance(act, QuickGELU) or exact_gelu):
        return None
    config = CLIPTextConfig(
        hidden_size=first.ln_1.normalized_shape[0],
        intermediate_size=first.mlp.c_fc.out_features,
        num_attention_heads=first.attn.num_heads,
        hidden_act="quick_gelu" if isinstance(act, QuickGELU) else "gelu",
        layer_norm_eps=first.ln_1.eps,
    )
    config._attn_implementation = "sdpa"  # as the temporal modules run them (models/heads/temporal.py)
    layers = []
    for block in blocks:
        state: dict[str, torch.Tensor] = {}
        _split_qkv("block", {f"block.{k}": v for k, v in block.state_dict().items()}, state, "layer")
        layer = CLIPEncoderLayer(config)
        layer.load_state_dict({k.removeprefix("layer."): v for k, v in state.items()})
        layers.append(layer.to(first.ln_1.weight.device))
    return layers


class OpenCLIPEncoder(VideoTextEncoder):
    """An open_clip CLIP model's frames and text (module notes).

    Args:
        model: an open_clip model-config name (`ViT-B-16`), a model-config JSON file, or a folder with
            `open_clip_config.json` and its weights.
        pretrained: the checkpoint file (local); unset, the model is randomly initialised (and nothing of
            it counts as backbone for the learning rates). OpenAI's weights were trained with QuickGELU:
            pair them with open_clip's `-quickgelu` configs (`ViT-B-32-quickgelu`), as open_clip's tags do.
        tokenizer: a local Hugging Face tokenizer folder, for configs that tokenize with one
            (`hf_tokenizer_name`); default: open_clip's own BPE tokenizer, which ships with the package.
        frame_chunk: frames per forward pass of the visual tower.
        gradient_checkpointing: open_clip's `set_grad_checkpointing` on both towers.
    """

    def __init__(
        self,
        model: str,
        pretrained: str | None = None,
        tokenizer: str | None = None,
        frame_chunk: int = 256,
        gradient_checkpointing: bool = False,
    ) -> None:
        super().__init__()
        open_clip = import_open_clip()
        clip, self.tokenizer, config = load_open_clip(model, pretrained, tokenizer)
        if not isinstance(clip, (open_clip.CLIP, open_clip.CustomTextCLIP)):
            raise ConfigError(f"{KEY}.model: {type(clip).__name__} models are not supported")
        if gradient_checkpointing:
            clip.set_grad_checkpointing(True)
        self.pretrained = pretrained is not None or Path(model).is_dir()
        self.logit_scale_init = float(clip.logit_scale.detach().reshape(-1)[0])
        bias = getattr(clip, "logit_bias", None)
        self.logit_bias_init = None if bias is None else float(bias.detach().reshape(-1)[0])
        clip.logit_scale = None  # the heads' own temperature scores (module notes); unused parameters
        clip.logit_bias = None  # would also stall DDP
        self.model = clip
        self.open_clip_config = config  # with the preprocessing, what `save_towers` writes beside the weights
        preprocess = open_clip.get_model_preprocess_cfg(clip)
        self.preprocess_config = dict(preprocess)
        size = preprocess["size"]
        height, width = (size, size) if isinstance(size, int) else size
        if height != width:
            raise ConfigError(f"{KEY}.model: frames are square; this model takes {height}x{width} images")
        self.image_size = int(height)
        self.image_mean = tuple(preprocess.get("mean", ()))  # what data.init_args.mean/std should be
        self.image_std = tuple(preprocess.get("std", ()))
        self.embed_dim = int(config["embed_dim"])
        self.max_text_len = self.tokenizer.context_length  # open_clip pads every text to it
        self.frame_chunk = frame_chunk
        self.vision_hooks: list[tuple[int, VisionHook]] = []
        self._chunk_lengths: torch.Tensor | None = None

    @property
    def _text_tower(self) -> nn.Module:
        """The module holding the text transformer: the model itself (`CLIP`) or its `text` (`CustomTextCLIP`)."""
        return getattr(self.model, "text", self.model)

    def _vit(self, why: str) -> nn.Module:
        from open_clip.transformer import VisionTransformer

        visual = self.model.visual
        if not isinstance(visual, VisionTransformer) or visual.attn_pool is not None:
            tower = "a ViT with attentional pooling" if isinstance(visual, VisionTransformer) else type(visual).__name__
            raise ConfigError(
                f"model.head: {why} need open_clip's own ViT without attentional pooling; this model's visual "
                f"tower is {tower}"
            )
        return visual

    def encode_text(self, texts: list[str]) -> TextFeatures:
        device = self._text_tower.positional_embedding.device
        ids = self.tokenizer(list(texts)).to(device)
        out = self.model.forward_intermediates(text=ids, text_indices=1, normalize=False, normalize_intermediates=True)
        tokens = project(out["text_intermediates"][-1], self._text_tower.text_projection)
        lengths = torch.tensor(self.text_token_counts(texts), device=device).clamp(max=ids.shape[1])
        mask = torch.arange(ids.shape[1], device=device) < lengths[:, None]
        return TextFeatures(pooled=out["text_features"], tokens=tokens, mask=mask)

    def text_token_counts(self, texts: list[str]) -> list[int]:
        if isinstance(self.tokenizer, import_open_clip().SimpleTokenizer):
            return [len(self.tokenizer.encode(text)) + 2 for text in texts]  # + start and end of text
        return hf_token_counts(self.tokenizer.tokenizer, [self.tokenizer.clean_fn(text) for text in texts])

    def encode_video(self, frames: torch.Tensor, mask: torch.Tensor, with_patches: bool = False) -> VideoFeatures:
        check_frame_size(frames, self.image_size)
        if with_patches:
            self._vit(PATCH_HEADS)
        encode = partial(self._encode_chunk, with_patches=with_patches)
        whole_videos = bool(self.vision_hooks)
        return encode_valid_frames(frames, mask, encode, self.embed_dim, self.frame_chunk, whole_videos, with_patches)

    def _encode_chunk(self, chunk: torch.Tensor, lengths: torch.Tensor | None, with_patches: bool) -> torch.Tensor:
        self._chunk_lengths = lengths
        visual = self.model.visual
        if not with_patches:
            pooled = visual(chunk)
            return (pooled[0] if isinstance(pooled, tuple) else pooled).unsqueeze(1)
        out = visual.forward_intermediates(chunk, indices=1, normalize_intermediates=True, output_fmt="NLC")
        patches = project(out["image_intermediates"][-1], visual.proj)
        return torch.cat([out["image_features"].unsqueeze(1), patches], dim=1)

    def add_vision_hook(self, block: int, hook: VisionHook) -> None:
        visual = self._vit(PATCH_HEADS)
        if not visual.transformer.batch_first:
            raise ConfigError("model.head: vision hooks need a batch-first open_clip transformer")
        hook_attention_input(visual.transformer.resblocks[block].attn, hook, lambda: self._chunk_lengths)
        self.vision_hooks.append((block, hook))

    def set_vision_forward(self, forward: VisionForward) -> None:
        raise ConfigError(
            "model.head: TempMeHead's token merging runs Hugging Face CLIP's ViT blocks itself; "
            "OpenCLIPEncoder cannot host it (use CLIPEncoder)"
        )

    def text_blocks(self) -> tuple[list[nn.Module], torch.Tensor] | None:
        """Copies of the text blocks as `CLIPEncoderLayer`s and the text positions, for the temporal
        modules CLIP4Clip initialises from CLIP's text tower (arXiv:2104.08860, Sec. 3.3); None where
        open_clip's blocks have no such equivalent (the heads then use CLIP4Clip's N(0, 0.02) init)."""
        tower = self._text_tower
        layers = as_clip_layers(tower.transformer.resblocks)
        return None if layers is None else (layers, tower.positional_embedding)

    def save_towers(self, folder: Path, logit_scale: float, logit_bias: float | None) -> str:
        """open_clip's hub layout: `open_clip_config.json` (model and preprocessing config) and
        `open_clip_model.safetensors` (the model's weights with the trained `logit_scale`, and `logit_bias`
        for a model that has one), which `open_clip.create_model("local-dir:FOLDER")` loads."""
        from safetensors.torch import save_file

        if self.vision_hooks:
            raise ConfigError("the head hooks open_clip's ViT blocks: the towers are not open_clip's model")
        state = {k: v.detach().contiguous() for k, v in self.model.state_dict().items()}
        state["logit_scale"] = torch.tensor(float(logit_scale))
        if self.logit_bias_init is not None:
            state["logit_bias"] = torch.tensor(float(self.logit_bias_init if logit_bias is None else logit_bias))
        folder.mkdir(parents=True, exist_ok=True)
        save_file(state, str(folder / "open_clip_model.safetensors"))
        config = {"model_cfg": self.open_clip_config, "preprocess_cfg": self.preprocess_config}
        (folder / "open_clip_config.json").write_text(json.dumps(config, indent=2))
        hf_tokenizer = getattr(self.tokenizer, "tokenizer", None)  # open_clip's HFTokenizer wraps transformers'
        if hasattr(hf_tokenizer, "save_pretrained"):  # open_clip reads a local-dir model's tokenizer from it
            hf_tokenizer.save_pretrained(folder)
        return "open_clip"

    def backbone_parameter_names(self) -> set[str]:
        if not self.pretrained:
            return set()
        return {f"model.{n}" for n, _ in self.model.named_parameters() if ".lora_" not in n}
