"""Build a GVE embedder for commands: from a model directory, or from a training YAML (its
`model.init_args.embedder`) optionally with a trained checkpoint's LoRA weights."""

from __future__ import annotations

from pathlib import Path

import torch
import yaml

from lit_retrieval.models.gve.embedder import GVEEmbedder, LoRASettings
from lit_retrieval.models.gve.processing import InputConfig


def embedder_settings(config: str | Path) -> dict:
    """The `model.init_args.embedder` mapping of a GVE training config."""
    raw = yaml.safe_load(Path(config).read_text())
    try:
        settings = dict(raw["model"]["init_args"]["embedder"])
    except (KeyError, TypeError):
        raise ValueError(f"{config}: no model.init_args.embedder (is this a GVE training config?)") from None
    return settings


def load_embedder(model: str | None = None, config: str | None = None, ckpt: str | None = None, device: str = "cpu") -> GVEEmbedder:
    """`model`: a model directory embedded as is; `config` (+ `ckpt`): the trained model."""
    if (model is None) == (config is None):
        raise ValueError("give exactly one of a model directory or a training config")
    if model is not None:
        if ckpt is not None:
            raise ValueError("a checkpoint needs the training config it was trained with (--config)")
        return GVEEmbedder(model, lora=None).to(device).eval()
    settings = embedder_settings(config)
    lora = settings.get("lora", {})
    embedder = GVEEmbedder(
        settings["model_path"],
        lora=None if lora is None else LoRASettings(**lora),
        adapter_path=settings.get("adapter_path"),
        inputs=InputConfig(**settings.get("inputs", {})),
        dtype=settings.get("dtype", "auto"),
        attn_implementation=settings.get("attn_implementation", "auto"),
    )
    if ckpt is not None:
        state = torch.load(ckpt, map_location="cpu", weights_only=False)["state_dict"]
        weights = {k.removeprefix("embedder."): v for k, v in state.items() if k.startswith("embedder.")}
        result = embedder.load_state_dict(weights, strict=False)
        if result.unexpected_keys or len(weights) == 0:
            raise ValueError(f"{ckpt}: not a checkpoint of this config's model (unexpected: {result.unexpected_keys[:3]})")
    return embedder.to(device).eval()
