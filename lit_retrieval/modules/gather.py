"""All-gather of per-rank tensors of different lengths (evaluation galleries)."""

from __future__ import annotations

import torch
import lightning as L


def gather_variable(module: L.LightningModule, tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate `tensor` (batch first) from every process; lengths may differ per rank."""
    if module.trainer is None or module.trainer.world_size == 1:
        return tensor
    size = torch.tensor([tensor.shape[0]], device=tensor.device)
    sizes = module.all_gather(size).flatten()
    longest = int(sizes.max())
    padded = tensor.new_zeros((longest, *tensor.shape[1:]))
    padded[: tensor.shape[0]] = tensor
    gathered = module.all_gather(padded)
    return torch.cat([gathered[r, : int(n)] for r, n in enumerate(sizes)])
