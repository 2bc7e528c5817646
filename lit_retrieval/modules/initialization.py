"""How a dual-encoder module starts: frozen parameter prefixes and a warm start from another
checkpoint (SALI Sec. 4 starts from a trained CLIP4Clip-meanP model)."""

from __future__ import annotations

import torch
from torch import nn


def freeze_prefixes(module: nn.Module, prefixes: list[str]) -> None:
    """Stop gradients for parameters whose name starts with one of `prefixes`; a prefix naming a
    whole submodule also puts it in eval mode (no dropout)."""
    names = [n for n, _ in module.named_parameters()]
    for prefix in prefixes:
        if not any(n == prefix or n.startswith(prefix + ".") for n in names):
            raise ValueError(f"frozen prefix {prefix!r} matches no parameter (e.g. {names[:3]})")
    for name, param in module.named_parameters():
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            param.requires_grad_(False)
    modules = dict(module.named_modules())
    for prefix in prefixes:
        if prefix in modules:
            modules[prefix].eval()


def load_warm_start(encoder: nn.Module, logit_scale: nn.Parameter, path: str) -> None:
    """Load the encoder and logit scale of a `DualEncoderRetrieval` checkpoint with a
    parameter-free (CLIP4Clip-meanP) head; the encoder configs must match."""
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise FileNotFoundError(f"warm_start checkpoint not found: {path}") from None
    state = checkpoint.get("state_dict", checkpoint)
    head_keys = sorted(k for k in state if k.startswith("head.") and k != "head.logit_scale")
    if head_keys:
        raise ValueError(
            f"{path}: warm_start expects a CLIP4Clip-meanP checkpoint (parameter-free head), found {head_keys[:3]}"
        )
    encoder_state = {k[len("encoder.") :]: v for k, v in state.items() if k.startswith("encoder.")}
    try:
        encoder.load_state_dict(encoder_state, strict=True)
    except RuntimeError as err:
        raise ValueError(f"{path}: its encoder does not match this model's encoder config: {err}") from None
    if "head.logit_scale" in state:
        with torch.no_grad():
            logit_scale.copy_(state["head.logit_scale"])
