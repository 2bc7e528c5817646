"""Long-CLIP (Zhang et al., ECCV 2024) as a backbone: 248 text positions.

`stretch_position_embedding` is knowledge-preserved stretching (KPS, Long-CLIP arXiv:2403.15378,
Sec. 3.1; the exact rule of its reference `load_from_clip`); `load_longclip_checkpoint` reads an OpenAI-format
Long-CLIP `.pt` file, merging the frozen first rows of `positional_embedding` with the fine-tuned
`positional_embedding_res`, into a Hugging Face `CLIPModel`. transformers ships no converter for
this format (and its CLIP one does not know the split table), hence the hand-written key map.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import CLIPConfig, CLIPModel


def stretch_position_embedding(weight: torch.Tensor, keep: int = 20, ratio: int = 4) -> torch.Tensor:
    """Stretch an `[n, d]` position table to `keep + (n - keep) * ratio` rows (77 -> 248).

    Rows `< keep` are copied; row `n' >= keep` takes position `u = keep + (n' - keep) / ratio`,
    linearly interpolated between old rows `floor(u)` and `floor(u) + 1`; the last `ratio` rows lie
    past the final old row and are linearly extrapolated from the last two old rows.
    """
    n, _ = weight.shape
    if not 0 < keep < n - 1:
        raise ValueError(f"keep must be in (0, {n - 1}), got {keep}")
    new_len = keep + (n - keep) * ratio
    u = keep + (torch.arange(keep, new_len, dtype=torch.float64) - keep) / ratio
    low = u.floor().long().clamp(max=n - 2)
    alpha = (u - low).to(weight.dtype).unsqueeze(1)
    stretched = (1 - alpha) * weight[low] + alpha * weight[low + 1]
    return torch.cat([weight[:keep], stretched], dim=0)


def _split_qkv(prefix: str, sd: dict, out: dict, dst: str) -> None:
    w = sd[f"{prefix}.attn.in_proj_weight"]
    b = sd[f"{prefix}.attn.in_proj_bias"]
    for name, wi, bi in zip(("q_proj", "k_proj", "v_proj"), w.chunk(3), b.chunk(3)):
        out[f"{dst}.self_attn.{name}.weight"] = wi
        out[f"{dst}.self_attn.{name}.bias"] = bi
    out[f"{dst}.self_attn.out_proj.weight"] = sd[f"{prefix}.attn.out_proj.weight"]
    out[f"{dst}.self_attn.out_proj.bias"] = sd[f"{prefix}.attn.out_proj.bias"]
    for src, tgt in (
        ("ln_1", "layer_norm1"),
        ("ln_2", "layer_norm2"),
        ("mlp.c_fc", "mlp.fc1"),
        ("mlp.c_proj", "mlp.fc2"),
    ):
        out[f"{dst}.{tgt}.weight"] = sd[f"{prefix}.{src}.weight"]
        out[f"{dst}.{tgt}.bias"] = sd[f"{prefix}.{src}.bias"]


def _count_layers(sd: dict, prefix: str) -> int:
    return len({k.split(".")[len(prefix.split("."))] for k in sd if k.startswith(prefix + ".")})


def openai_to_hf(sd: dict[str, torch.Tensor], keep: int = 20) -> tuple[CLIPConfig, dict[str, torch.Tensor]]:
    """Map an OpenAI-format (Long-)CLIP state dict to a `CLIPConfig` and `CLIPModel` state dict."""
    positions = sd["positional_embedding"]
    if "positional_embedding_res" in sd:  # Long-CLIP: rows >= keep were fine-tuned separately
        positions = torch.cat([positions[:keep], sd["positional_embedding_res"][keep:]])
    text_width = sd["ln_final.weight"].shape[0]
    vision_width, _, patch, _ = sd["visual.conv1.weight"].shape
    grid = round((sd["visual.positional_embedding"].shape[0] - 1) ** 0.5)
    config = CLIPConfig(
        text_config=dict(
            vocab_size=(vocab := sd["token_embedding.weight"].shape[0]),
            bos_token_id=vocab - 2,  # OpenAI CLIP: <|startoftext|>, <|endoftext|> are the last ids
            eos_token_id=vocab - 1,
            pad_token_id=vocab - 1,
            hidden_size=text_width,
            intermediate_size=sd["transformer.resblocks.0.mlp.c_fc.weight"].shape[0],
            num_hidden_layers=_count_layers(sd, "transformer.resblocks"),
            num_attention_heads=text_width // 64 or 1,
            max_position_embeddings=positions.shape[0],
            hidden_act="quick_gelu",
        ),
        vision_config=dict(
            hidden_size=vision_width,
            intermediate_size=sd["visual.transformer.resblocks.0.mlp.c_fc.weight"].shape[0],
            num_hidden_layers=_count_layers(sd, "visual.transformer.resblocks"),
            num_attention_heads=vision_width // 64 or 1,
            image_size=grid * patch,
            patch_size=patch,
            hidden_act="quick_gelu",
        ),
        projection_dim=sd["text_projection"].shape[1],
    )
    out = {
        "text_model.embeddings.token_embedding.weight": sd["token_embedding.weight"],
        "text_model.embeddings.position_embedding.weight": positions,
        "text_model.final_layer_norm.weight": sd["ln_final.weight"],
        "text_model.final_layer_norm.bias": sd["ln_final.bias"],
        "text_projection.weight": sd["text_projection"].t(),
        "vision_model.embeddings.class_embedding": sd["visual.class_embedding"],
        "vision_model.embeddings.patch_embedding.weight": sd["visual.conv1.weight"],
        "vision_model.embeddings.position_embedding.weight": sd["visual.positional_embedding"],
        "vision_model.pre_layrnorm.weight": sd["visual.ln_pre.weight"],
        "vision_model.pre_layrnorm.bias": sd["visual.ln_pre.bias"],
        "vision_model.post_layernorm.weight": sd["visual.ln_post.weight"],
        "vision_model.post_layernorm.bias": sd["visual.ln_post.bias"],
        "visual_projection.weight": sd["visual.proj"].t(),
        "logit_scale": sd["logit_scale"].reshape(()),
    }
    for i in range(config.text_config.num_hidden_layers):
        _split_qkv(f"transformer.resblocks.{i}", sd, out, f"text_model.encoder.layers.{i}")
    for i in range(config.vision_config.num_hidden_layers):
        _split_qkv(f"visual.transformer.resblocks.{i}", sd, out, f"vision_model.encoder.layers.{i}")
    return config, out


def load_longclip_checkpoint(path: str | Path, keep: int = 20) -> CLIPModel:
    """Load an OpenAI-format Long-CLIP (or plain CLIP) `.pt` checkpoint as a `CLIPModel`."""
    obj = torch.load(str(path), map_location="cpu", weights_only=False)
    if isinstance(obj, torch.jit.ScriptModule):
        obj = obj.state_dict()
    if isinstance(obj, dict) and "state_dict" in obj:
        obj = obj["state_dict"]
    if not isinstance(obj, dict) or "positional_embedding" not in obj:
        raise ValueError(f"{path}: not an OpenAI-format CLIP/Long-CLIP state dict")
    config, state = openai_to_hf(obj, keep=keep)
    model = CLIPModel(config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("position_ids")]
    if missing or unexpected:
        raise ValueError(
            f"{path}: converted checkpoint does not fit CLIPModel (missing {missing}, unexpected {unexpected})"
        )
    return model
