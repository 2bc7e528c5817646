"""`TaskBatchSampler`: one task per step, drawn with the curriculum's probabilities (GVE Sec. 3.3).

Every batch holds pairs of a single task (tasks are never mixed within a batch, GVE A.4). The
sequence of tasks for an epoch is drawn from `(seed, epoch)` with the current probabilities P(k);
each task's pairs are visited in a random order per `(seed, epoch, task, pass)`, cut into whole
global batches, and start over when used up. All ranks draw the same task at the same step, so cross-device negatives come from
the same task, and each rank takes its own slice of that step's global batch. Everything is a
function of `(seed, epoch, step)`, so `start_step` resumes an interrupted epoch exactly.

It subclasses `DistributedSampler` only so that Lightning does not wrap it in its own distributed
sampler: it shards by rank itself. It yields whole batches (lists of `(task, record)` indices) and
is used with `DataLoader(batch_size=None)`.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from torch.utils.data import DistributedSampler


def default_steps(sizes: list[int], batch_sizes: list[int], world_size: int = 1) -> int:
    """Batches per epoch when none is configured: the sum over tasks of whole global batches."""
    return sum(max(1, n // (b * world_size)) for n, b in zip(sizes, batch_sizes))


class TaskBatchSampler(DistributedSampler):
    """Batches of `(task_index, record_index)` pairs for this rank.

    Args:
        sizes: records per task.
        batch_sizes: per-device batch size of each task.
        steps_per_epoch: batches per epoch (default: the sum over tasks of global batches).
        probabilities: initial P(k) (default: proportional to task size, naive mixing).
        seed: base of every random draw.
        rank, world_size: this process and the number of processes.
    """

    shuffle = True  # the attributes code expecting a DistributedSampler reads
    drop_last = False

    def __init__(
        self,
        sizes: list[int],
        batch_sizes: list[int],
        steps_per_epoch: int | None = None,
        probabilities: list[float] | None = None,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if len(sizes) != len(batch_sizes) or not sizes:
            raise ValueError("one size and one batch size per task are required")
        small = [k for k, (n, b) in enumerate(zip(sizes, batch_sizes)) if n < b * world_size]
        if small:
            raise ValueError(f"task(s) {small} have fewer records than one global batch (batch size x {world_size} ranks)")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside world size {world_size}")
        self.sizes = list(sizes)
        self.batch_sizes = list(batch_sizes)
        self.seed = seed
        self.rank = rank
        self.num_replicas = world_size
        self.epoch = 0
        self.start_step = 0
        self.steps = steps_per_epoch or default_steps(sizes, batch_sizes, world_size)
        self.probabilities = self._checked(probabilities) if probabilities is not None else self._checked(sizes)

    def _checked(self, weights) -> np.ndarray:
        weights = np.asarray(weights, dtype=np.float64)
        if weights.shape != (len(self.sizes),) or (weights < 0).any() or not np.isfinite(weights).all() or weights.sum() <= 0:
            raise ValueError(f"task probabilities must be {len(self.sizes)} non-negative finite weights, got {weights.tolist()}")
        return weights / weights.sum()

    def set_probabilities(self, probabilities) -> None:
        self.probabilities = self._checked(probabilities)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def task_schedule(self) -> np.ndarray:
        """The task of every step of the current epoch (identical on every rank)."""
        rng = np.random.default_rng([self.seed, self.epoch])
        return rng.choice(len(self.sizes), size=self.steps, p=self.probabilities)

    def _order(self, task: int, cycle: int) -> np.ndarray:
        return np.random.default_rng([self.seed, self.epoch, task, cycle]).permutation(self.sizes[task])

    def global_batch(self, task: int, occurrence: int) -> np.ndarray:
        """Record indices of the `occurrence`-th global batch of `task` in this epoch (all ranks).
        Each pass over a task's random order is cut into whole global batches (the remainder
        waits for a later pass), so no record appears twice in one batch."""
        width = self.batch_sizes[task] * self.num_replicas
        per_pass = self.sizes[task] // width
        cycle, offset = divmod(occurrence, per_pass)
        return self._order(task, cycle)[offset * width : (offset + 1) * width]

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        schedule = self.task_schedule()
        seen = np.zeros(len(self.sizes), dtype=np.int64)
        start, self.start_step = self.start_step, 0
        for step, task in enumerate(schedule):
            occurrence = int(seen[task])
            seen[task] += 1
            if step < start:
                continue
            width = self.batch_sizes[task]
            local = self.global_batch(int(task), occurrence)[self.rank * width : (self.rank + 1) * width]
            yield [(int(task), int(i)) for i in local]

    def __len__(self) -> int:
        return self.steps
