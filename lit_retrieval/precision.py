"""Evaluation scores in full precision whatever the training precision.

Under `bf16-mixed` the encoders and heads run under autocast, so representations arrive in bf16
(8 mantissa bits) and a score computed from them under autocast is bf16 too: close scores become
equal and the tie rule, not the model, decides ranks. Every evaluation score (the evaluator, each
head's `score_blocks`, GVE's cosine, UVRB's blockwise search) is therefore computed here in
float32 (float64 inputs stay float64): representations cast up, autocast off, and the scoring
module's low-precision weights (bf16-true, DeepSpeed's bf16) held in float32 for the duration.

Under DeepSpeed ZeRO-3 a module's weights are whole only inside the module's own forward, which the
engine runs; scoring calls a head's methods outside it, where each rank holds an empty placeholder.
`whole_weights` gathers them for an evaluation (the evaluator holds it for the whole stage).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from itertools import chain

import torch
from torch import nn


def full_precision(tensor: torch.Tensor) -> torch.Tensor:
    """A floating tensor as float32 (float64 kept); integer and bool tensors unchanged."""
    return tensor.float() if tensor.is_floating_point() and tensor.dtype != torch.float64 else tensor


def autocast_off(device: torch.device | str) -> torch.autocast:
    """Autocast disabled on `device`'s type (an enclosing bf16/fp16 autocast region does not apply)."""
    return torch.autocast(torch.device(device).type, enabled=False)


@contextmanager
def float32_weights(module: nn.Module) -> Iterator[None]:
    """`module`'s bf16/fp16 parameters and buffers held as float32 copies for the block; their
    own tensors are put back afterwards (exact, and views into an optimiser's flat buffers, as
    DeepSpeed keeps them, stay views). Float32 and float64 weights are left alone."""
    low = [
        t
        for t in chain(module.parameters(), module.buffers())
        if t.is_floating_point() and t.dtype not in (torch.float32, torch.float64)
    ]
    originals = [t.data for t in low]
    try:
        for t in low:
            t.data = t.data.float()
        yield
    finally:
        for t, data in zip(low, originals):
            t.data = data


@contextmanager
def whole_weights(module: nn.Module) -> Iterator[None]:
    """`module`'s parameters whole on every rank for the block where DeepSpeed ZeRO-3 has partitioned
    them (`deepspeed.zero.GatheredParameters`, read-only: changes are not kept), else nothing. Every
    rank must enter it (it all-gathers), as often as the others: the evaluator enters it once per stage.
    Where a sub-module's own forward runs inside, ZeRO-3's hooks release that sub-module's weights after
    it and gather them again at its next call, as in training."""
    partitioned = [p for p in module.parameters() if hasattr(p, "ds_id")]
    if not partitioned:
        yield
        return
    import deepspeed

    with deepspeed.zero.GatheredParameters(partitioned, modifier_rank=None):
        yield


@contextmanager
def full_precision_scoring(module: nn.Module | None, device: torch.device | str) -> Iterator[None]:
    """Autocast off on `device` and `module`'s weights in float32 (`float32_weights`) for the block."""
    with ExitStack() as stack:
        stack.enter_context(autocast_off(device))
        if module is not None:
            stack.enter_context(float32_weights(module))
        yield
