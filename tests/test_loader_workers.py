"""Every DataLoader the data modules build has workers that survive the stop signals a scheduler
sends to every process of a job step (SIGTERM, SIGINT, SIGUSR1) and go on serving batches: the
main process alone decides how to stop (`data/workers.py`). Forked workers (the video data
modules) and spawned ones (GVE's multi-task module) are both checked on live worker processes."""

from __future__ import annotations

import os
import signal
import time

import pytest

from lit_retrieval.data import MultiEventDataModule
from lit_retrieval.data.multitask import MultiTaskDataModule
from test_multitask import processing  # noqa: F401 (fixture)


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
