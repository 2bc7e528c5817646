"""All-gather of per-rank tensors of different sizes (evaluation galleries)."""

from __future__ import annotations

import torch
import lightning as L


def gather_variable(module: L.LightningModule, tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate `tensor` (batch first) from every process. Every dimension may differ per
    rank (e.g. SALI's shot count): smaller tensors are zero-padded to the largest size, which is
    what `cat_padded` does within a process (padded mask entries are False)."""
    if module.trainer is None or module.trainer.world_size == 1:
        return tensor
    shape = torch.tensor(tensor.shape, device=tensor.device)
    shapes = module.all_gather(shape).reshape(-1, tensor.ndim)
    largest = shapes.amax(0).tolist()
    padded = tensor.new_zeros(largest)
    padded[tuple(slice(0, n) for n in tensor.shape)] = tensor
    gathered = module.all_gather(padded)
    return torch.cat([gathered[r, : int(n[0])] for r, n in enumerate(shapes)])
