"""Random states kept in checkpoints, so a resumed run draws the same dropout masks and samples as
an uninterrupted one (stored as types `torch.load(weights_only=True)` accepts).

Every rank keeps its own states: Python, numpy, torch's CPU generator and, when the rank runs on a
GPU, the generator of that one device (`torch.cuda.get_rng_state(device)`; never every visible
device's, which `fit.sbatch`'s tasks all see). Saving gathers them from every rank into the one
checkpoint file; `{"world_size": N, "ranks": [rank 0's, ...]}`. A resume restores rank r's states
on rank r when it runs as many ranks; any other geometry (an evaluation on 1 GPU of a run trained
on 8, `search` on a CPU) restores none and says so in one line, so no load ever fails on its
random states. Checkpoints of earlier versions (one process's states, every visible device's CUDA
generator) restore their CPU states on one rank, and their CUDA states only where the device count
matches."""

from __future__ import annotations

import logging
import random
from typing import Any

import numpy as np
import torch

from lit_retrieval.distributed import gather_objects

log = logging.getLogger(__name__)


def _own_states(device: torch.device) -> dict[str, Any]:
    """This process's Python, numpy and torch CPU states, and `device`'s generator if it is a GPU."""
    kind, keys, position, has_gauss, gauss = np.random.get_state()
    numpy_state = [kind, torch.from_numpy(keys.astype(np.int64)), int(position), int(has_gauss), float(gauss)]
    states = {"python": random.getstate(), "numpy": numpy_state, "torch": torch.get_rng_state()}
    if device.type == "cuda":
        states["cuda"] = torch.cuda.get_rng_state(device)
    return states


def _restore_own(states: dict[str, Any], device: torch.device) -> None:
    random.setstate(states["python"])
    kind, keys, position, has_gauss, gauss = states["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), position, has_gauss, gauss))
    torch.set_rng_state(states["torch"])
    if "cuda" in states and device.type == "cuda":
        torch.cuda.set_rng_state(states["cuda"], device)


def rng_states(device: torch.device) -> dict[str, Any]:
    """Every rank's states, `device` being this rank's (`process_device`). A collective under a
    process group: every rank calls it, as every rank runs Lightning's `save_checkpoint`."""
    ranks = gather_objects([_own_states(device)])
    return {"world_size": len(ranks), "ranks": ranks}


def set_rng_states(states: dict[str, Any], rank: int, world: int, device: torch.device) -> bool:
    """Restores rank `rank`'s states when the checkpoint was written by `world` ranks; True if it did."""
    if "ranks" not in states:  # written before per-rank states
        return _restore_legacy(states, rank, world, device)
    if states["world_size"] != world:
        if rank == 0:
            log.info(
                "random states not restored: the checkpoint was written by %d rank(s), this process group has %d "
                "(a resume on another geometry draws other dropout masks; evaluation is unaffected)",
                states["world_size"],
                world,
            )
        return False
    _restore_own(states["ranks"][rank], device)
    return True


def _restore_legacy(states: dict[str, Any], rank: int, world: int, device: torch.device) -> bool:
    """A checkpoint of one process's states and every device's CUDA generator (earlier versions)."""
    if world != 1:
        return False
    cuda = states.get("cuda")
    own = {k: v for k, v in states.items() if k != "cuda"}
    if cuda is not None and device.type == "cuda" and len(cuda) == torch.cuda.device_count():
        own["cuda"] = cuda[device.index if device.index is not None else torch.cuda.current_device()]
    _restore_own(own, device)
    return True


def process_device(module: torch.nn.Module) -> tuple[int, int, torch.device]:
    """(rank, world size, device) of `module`'s process: its trainer's (the strategy's root device,
    known before the model is moved there) or, without a trainer, one process on the module's device."""
    trainer = getattr(module, "_trainer", None)
    if trainer is None:
        return 0, 1, next(module.parameters()).device
    return trainer.global_rank, trainer.world_size, trainer.strategy.root_device
