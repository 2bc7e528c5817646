"""Collective helpers shared by losses, metrics and modules: the world size, an all-gather that
keeps gradients (cross-device negatives, GVE A.8), and an all-gather of tensors whose sizes
differ per rank (evaluation galleries). Every function is the identity in a single process."""

from __future__ import annotations

import lightning as L
import torch
import torch.distributed as dist


def distributed_world() -> int:
    """Number of processes of the initialised process group (1 without one)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


class _GatherWithGradient(torch.autograd.Function):
    """All-gather along dim 0 whose backward sums every rank's gradient for this rank's slice."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:
        parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, tensor.contiguous())
        ctx.rank, ctx.rows = dist.get_rank(), tensor.shape[0]
        return torch.cat(parts)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)  # all_reduce rather than reduce_scatter: gloo has only the former
        return grad[ctx.rank * ctx.rows : (ctx.rank + 1) * ctx.rows]


def gather_global(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate `tensor` from every rank along dim 0. For floating tensors the gradient of each
    rank's slice is the sum over ranks of the gradients it receives there, so when every rank
    computes the same global loss, DDP's averaging yields exactly that loss's gradient for every
    parameter (also those applied after the gather, like a logit scale). Every rank must pass the
    same shape (the task sampler gives all ranks the same task and batch size)."""
    world = distributed_world()
    if world == 1:
        return tensor
    shape = torch.tensor(tensor.shape, device=tensor.device)
    shapes = [torch.empty_like(shape) for _ in range(world)]
    dist.all_gather(shapes, shape)
    if any(not torch.equal(s, shape) for s in shapes):
        raise RuntimeError(
            f"cross-device negatives need equal shapes on every rank, got {[s.tolist() for s in shapes]}"
        )
    if tensor.is_floating_point():
        return _GatherWithGradient.apply(tensor)
    parts = [torch.empty_like(tensor) for _ in range(world)]
    dist.all_gather(parts, tensor.contiguous())
    return torch.cat(parts)


def gather_variable(module: L.LightningModule, tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate `tensor` (batch first) from every process of `module`'s trainer. Every dimension
    may differ per rank (e.g. SALI's shot count): smaller tensors are zero-padded to the largest
    size, which is what `cat_padded` does within a process (padded mask entries are False)."""
    if module.trainer is None or module.trainer.world_size == 1:
        return tensor
    shape = torch.tensor(tensor.shape, device=tensor.device)
    shapes = module.all_gather(shape).reshape(-1, tensor.ndim)
    largest = shapes.amax(0).tolist()
    padded = tensor.new_zeros(largest)
    padded[tuple(slice(0, n) for n in tensor.shape)] = tensor
    gathered = module.all_gather(padded)
    return torch.cat([gathered[r, : int(n[0])] for r, n in enumerate(shapes)])


def gather_objects(items: list) -> list:
    """Concatenate picklable `items` (e.g. video ids) from every rank, in rank order."""
    if distributed_world() == 1:
        return list(items)
    parts: list = [None] * distributed_world()
    dist.all_gather_object(parts, list(items))
    return [item for part in parts for item in part]


def gather_lengths(tensor: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Concatenate the 1-D `tensor`s (lengths may differ) of every rank in rank order, and the offset
    of this rank's part in the result."""
    world = distributed_world()
    if world == 1:
        return tensor, 0
    length = torch.tensor([len(tensor)], device=tensor.device)
    lengths = [torch.empty_like(length) for _ in range(world)]
    dist.all_gather(lengths, length)
    sizes = [int(n) for n in lengths]
    padded = tensor.new_zeros(max(sizes))
    padded[: len(tensor)] = tensor
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded)
    return torch.cat([part[:n] for part, n in zip(parts, sizes)]), sum(sizes[: dist.get_rank()])


def sum_over_ranks(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` summed over every rank (in place)."""
    if distributed_world() > 1:
        dist.all_reduce(tensor)
    return tensor
