"""DataLoader workers leave stopping to the main process.

A scheduler signals every process of a job step: Slurm's SIGTERM at a time limit, `scancel` or
preemption, its `--signal=SIGUSR1@N` before the time limit, and a terminal's Ctrl+C (SIGINT) all
reach the DataLoader workers too. A worker killed by one makes the main process fail with
`DataLoader worker (pid N) is killed by signal` before it can write its on-signal checkpoint
(`ResumeCheckpoint`) or Lightning's `hpc_ckpt` and requeue (issue 24). So each worker ignores
these signals: the main process handles them and shuts its workers down as usual (workers also
exit by themselves when the main process is gone: PyTorch's worker loop watches its parent).

Lightning adds its own `worker_init_fn` (`pl_worker_init_function`: distinct, reproducible
numpy/random/torch seeds per rank and worker) only to a DataLoader that has none; under
`seed_everything(workers=True)` (LightningCLI's default, `PL_SEED_WORKERS=1`) ours runs it, so
setting ours keeps Lightning's worker seeding.
"""

from __future__ import annotations

import functools
import os
import signal
from collections.abc import Callable, Iterator
from typing import Any

from lightning.fabric.utilities.seed import pl_worker_init_function
from torch.utils.data import DataLoader

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


def ignore_stop_signals(worker_id: int, then: Callable[[int], None] | None = None) -> None:
    """A `worker_init_fn`: ignore SIGTERM, SIGINT and SIGUSR1 in this worker, seed it as Lightning
    would (`PL_SEED_WORKERS`), then run `then`."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    if int(os.environ.get("PL_SEED_WORKERS", 0)):
        pl_worker_init_function(worker_id)
    if then is not None:
        then(worker_id)


def worker_init_fn(then: Callable[[int], None] | None = None) -> Callable[[int], None]:
    """The `worker_init_fn` every DataLoader of the project uses: `ignore_stop_signals`, composed
    with `then` (another worker_init_fn, run after it). Picklable, so spawned workers get it too."""
    return functools.partial(ignore_stop_signals, then=then)


class WorkersAtFirstBatch(DataLoader):
    """A DataLoader whose workers start at the first batch asked of it, not at `iter()`.

    Lightning creates the first epoch's iterator in `FitLoop.setup_data`, which also runs whenever
    `trainer.estimated_stepping_batches` is read (our modules' `configure_optimizers`), before
    `on_fit_start`; with workers the iterator prefetches at once, so the batch sampler has drawn the
    epoch's schedule and the workers hold the dataset as it was, for the whole first epoch (and a
    resumed run's). What a callback sets at the start of an epoch, GVE's curriculum probabilities
    (`ModalityPyramid`) and mined negatives (`HardNegativeMining`), was then lost for that epoch. The
    iterator is made at the first `next` instead, after every epoch-start hook has run.
    """

    def __iter__(self) -> Iterator[Any]:
        return _StartedAtFirstNext(super().__iter__)


class _StartedAtFirstNext:
    def __init__(self, start: Callable[[], Iterator[Any]]) -> None:
        self._start = start
        self._iterator: Iterator[Any] | None = None

    def __iter__(self) -> _StartedAtFirstNext:
        return self

    def __next__(self) -> Any:
        if self._iterator is None:
            self._iterator = self._start()
        return next(self._iterator)

    def __getattr__(self, name: str) -> Any:  # once started, the DataLoader iterator's own (e.g. `_workers`)
        started = self.__dict__.get("_iterator")
        if started is None:
            raise AttributeError(f"{type(self).__name__} has no {name!r} before its first batch")
        return getattr(started, name)


def pins_memory(trainer: Any) -> bool:
    """Whether a loader should pin its batches (page-locked host memory, which the host-to-device
    copy reads directly and `non_blocking` overlaps with compute): when the trainer runs on a CUDA
    GPU, as torch pins only for CUDA and Lightning sets nothing itself. False without a trainer."""
    return trainer is not None and trainer.strategy.root_device.type == "cuda"
