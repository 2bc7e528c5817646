"""The ranks of a test's gloo group, forked from the pytest process rather than spawned (tests only).

`torch.multiprocessing.spawn` starts each rank as a fresh interpreter that imports torch, the test module and
what it imports again: about 5 s of CPU per rank, measured over the suite's processes, against a rank's
fraction of a second of work. A forked rank starts with this process's imports. Two things a fork copies would
change what a rank computes, so the fork is refused where they hold and the ranks are spawned as before:
a process group already set up in this process (the rank would inherit it), and torch running more than one
intra-op thread (GNU OpenMP does not rebuild its thread pool in a forked child; `make test` runs one thread).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run_ranks(fn: Callable[..., None], args: tuple, nprocs: int = 2) -> None:
    """`torch.multiprocessing.spawn(fn, args, nprocs, join=True)` with the ranks forked when that is safe:
    `fn(rank, *args)` in each, an error in any rank raised here with that rank's traceback."""
    safe = torch.get_num_threads() == 1 and not (dist.is_available() and dist.is_initialized())
    mp.start_processes(fn, args=args, nprocs=nprocs, join=True, start_method="fork" if safe else "spawn")
