"""Every DataLoader the data modules build has workers that survive the stop signals a scheduler
sends to every process of a job step (SIGTERM, SIGINT, SIGUSR1) and go on serving batches: the
main process alone decides how to stop (`data/batching/workers.py`). Forked workers (the video data
modules) and spawned ones (GVE's multi-task module) are both checked on live worker processes."""

from __future__ import annotations

import os
import random
import signal
import time

import numpy as np
import pytest
import torch

from lit_retrieval.data import MultiEventDataModule
from lit_retrieval.data.gve.multitask import MultiTaskDataModule
from helpers.gve_embedder import processing  # noqa: F401 (fixture)


def signal_workers_and_continue(loader) -> None:
    """Take a batch, send each stop signal to every worker, then check the workers are alive and
    the rest of the epoch still comes."""
    batches = iter(loader)
    next(batches)
    workers = list(batches._workers)
    assert workers and all(w.is_alive() for w in workers)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        for worker in workers:
            os.kill(worker.pid, signum)
    time.sleep(1.0)  # a worker killed by a signal is dead well within this
    assert all(w.is_alive() for w in workers), [w.exitcode for w in workers]
    assert sum(1 for _ in batches) == len(loader) - 1


def test_forked_video_loader_workers_ignore_stop_signals(corpus):
    data = MultiEventDataModule(
        annotation=str(corpus / "annotations.json"), num_frames=2, image_size=32, batch_size=4, num_workers=2
    )
    data.setup("fit")
    signal_workers_and_continue(data.train_dataloader())


@pytest.mark.slow
def test_spawned_gve_loader_workers_ignore_stop_signals(gve_tasks, processing):  # noqa: F811
    data = MultiTaskDataModule(gve_tasks["train"], gve_tasks["val"], steps_per_epoch=3, num_workers=1, seed=0)
    data.processing = processing
    data.setup("fit")
    signal_workers_and_continue(data.train_dataloader())


class RandomDraws(torch.utils.data.Dataset):
    """Each item: what numpy's and Python's global generators draw in the worker serving it."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> tuple[int, int]:
        return int(np.random.randint(2**31)), random.randrange(2**31)


def test_workers_keep_lightnings_per_rank_worker_seeds_under_seed_everything(monkeypatch):
    """Lightning gives a DataLoader without a worker_init_fn its own under `seed_everything(workers=True)`:
    seeds per rank and worker. Ours must keep it: otherwise every DDP rank (all seeded alike) starts its
    workers from the same torch state, and rank 1's workers draw exactly rank 0's numbers."""
    from lightning.fabric.utilities.rank_zero import rank_zero_only
    from lightning.fabric.utilities.seed import seed_everything

    from lit_retrieval.data.batching.workers import worker_init_fn

    monkeypatch.setenv("PL_SEED_WORKERS", "0")

    def draws(rank: int) -> list[tuple[int, int]]:
        monkeypatch.setattr(
            rank_zero_only, "rank", rank
        )  # what Lightning sets in rank `rank`; forked workers inherit it
        seed_everything(7, workers=True)
        loader = torch.utils.data.DataLoader(
            RandomDraws(), batch_size=None, num_workers=2, worker_init_fn=worker_init_fn()
        )
        return [tuple(int(v) for v in item) for item in loader]

    rank0 = draws(0)
    assert rank0[0] != rank0[1]  # workers 0 and 1 (items alternate between them) draw different numbers
    assert draws(1) != rank0  # so do the workers of another rank
    assert draws(0) == rank0  # and the same seed gives the same numbers again


def test_loaders_pin_memory_on_a_cuda_trainer_only(corpus):
    """Issue 57, item 10: pinned batches (page-locked host memory) where the trainer runs on a CUDA
    GPU, none on a CPU trainer (torch pins for CUDA only) or without a trainer."""
    from types import SimpleNamespace

    dm = MultiEventDataModule(str(corpus / "annotations.json"), num_frames=2, image_size=32)
    dm.setup("test")
    pinned = []
    for device in ("cuda:0", "cpu"):
        dm.trainer = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device(device)))
        pinned.append(dm.test_dataloader().pin_memory)
    dm.trainer = None
    assert pinned == [True, False] and not dm.test_dataloader().pin_memory
