"""Parameter groups (pretrained backbone vs. new layers) and the warm-up + cosine schedule.

MELON supp. B.1: Adam, 1e-7 for the (Long-)CLIP backbone and 1e-4 for other modules, cosine
schedule with a warm-up proportion of 0.1. CLIP4Clip's BertAdam is approximated by AdamW with
betas (0.9, 0.98), eps 1e-6 (CLIP4Clip, arXiv:2104.08860; its reference code's modules/optimization.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import nn
from transformers import get_cosine_schedule_with_warmup


@dataclass
class OptimConfig:
    """Optimiser settings; `lr_overrides` maps a parameter-name prefix to its own learning rate
    (the longest matching prefix wins), e.g. `{"encoder.vision": 1e-3}` for a tower trained from
    scratch."""

    backbone_lr: float = 1e-7
    head_lr: float = 1e-4
    lr_overrides: dict[str, float] = field(default_factory=dict)
    optimizer: Literal["adam", "adamw"] = "adamw"
    weight_decay: float = 0.2
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-6
    warmup_proportion: float = 0.1


def parameter_groups(module: nn.Module, backbone: set[str], cfg: OptimConfig) -> list[dict]:
    """One group per distinct learning rate; no weight decay on biases, norms and scalars."""
    groups: dict[tuple[float, bool], list[nn.Parameter]] = {}
    for name, param in module.named_parameters():
        if not param.requires_grad:
            continue
        prefixes = [p for p in cfg.lr_overrides if name == p or name.startswith(p + ".")]
        if prefixes:
            lr = cfg.lr_overrides[max(prefixes, key=len)]
        else:
            lr = cfg.backbone_lr if name in backbone else cfg.head_lr
        decay = param.ndim >= 2
        groups.setdefault((lr, decay), []).append(param)
    return [
        {"params": params, "lr": lr, "weight_decay": cfg.weight_decay if decay else 0.0}
        for (lr, decay), params in groups.items()
    ]


def build_optimizer(groups: list[dict], cfg: OptimConfig) -> torch.optim.Optimizer:
    cls = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
    return cls(groups, betas=cfg.betas, eps=cfg.eps)


def build_scheduler(optimizer: torch.optim.Optimizer, total_steps: int, cfg: OptimConfig):
    return get_cosine_schedule_with_warmup(optimizer, int(cfg.warmup_proportion * total_steps), max(1, total_steps))
