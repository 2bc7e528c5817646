"""The training samplers, sharding by rank with one rule (`rank_share`).

`EpochShuffle`: the video-text modules' training order, a function of `(seed, epoch)`.

`TaskBatchSampler`: one task per step, drawn with the curriculum's probabilities (GVE Sec. 3.3).

Every batch holds pairs of a single task (tasks are never mixed within a batch, GVE A.4). The
sequence of tasks for an epoch is drawn from `(seed, epoch)` with the current probabilities P(k);
each task's pairs are visited in a random order per `(seed, epoch, task, pass)`, cut into whole
global batches, and start over when used up. All ranks draw the same task at the same step, so
cross-device negatives come from the same task, and each rank takes its own share of that step's
global batch (`rank_share`). Everything is a function of `(seed, epoch, step)`, so `start_step` resumes
an interrupted epoch exactly.

It subclasses `DistributedSampler` only so that Lightning does not wrap it in its own distributed
sampler: it shards by rank itself. It yields whole batches (lists of `(task, record)` indices) and
is used with `DataLoader(batch_size=None)`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Literal, get_args

import numpy as np
import torch
from torch.utils.data import DistributedSampler

from lit_retrieval.errors import ConfigError

Sampling = Literal["equal_passes", "proportional", "uniform"]
SAMPLINGS: tuple[str, ...] = get_args(Sampling)


def rank_share(order: list[int], rank: int, world_size: int) -> list[int]:
    """Rank `rank`'s share of `order`, PyTorch's `DistributedSampler` rule: the order is padded
    with its own first items to a multiple of `world_size`, and rank r takes every W-th item from r."""
    padded = order + order[: -len(order) % world_size]
    return padded[rank::world_size]


class EpochShuffle(DistributedSampler):
    """A random order that depends only on (seed, epoch), sharded by rank like PyTorch's
    `DistributedSampler` (padded to a multiple of the world size, rank r takes every W-th item
    from r), so a resumed run sees the same batches as an uninterrupted one, and `start` resumes
    inside an epoch. It subclasses `DistributedSampler` only so that Lightning does not wrap it:
    it shards itself. Lightning calls `set_epoch` at every epoch start."""

    shuffle = True  # the attributes code expecting a DistributedSampler reads
    drop_last = False

    def __init__(self, size: int, seed: int = 0, rank: int = 0, world_size: int = 1) -> None:
        self.size = size
        self.seed = seed
        self.rank = rank
        self.num_replicas = world_size
        self.epoch = 0
        self.start = 0  # items of this rank's share to skip, once (a mid-epoch resume)
        self.num_samples = math.ceil(size / world_size)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def place(self, batch_size: int, epoch: int, batches: int) -> None:
        """Start at batch `batches` of `epoch`'s order (a mid-epoch resume)."""
        self.epoch, self.start = epoch, batches * batch_size

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        order = torch.randperm(self.size, generator=generator).tolist()
        start, self.start = self.start, 0
        return iter(rank_share(order, self.rank, self.num_replicas)[start:])

    def __len__(self) -> int:
        return self.num_samples


def size_weights(sizes: list[int], batch_sizes: list[int], sampling: Sampling = "equal_passes") -> list[float]:
    """Unnormalised P(k) without a curriculum. `equal_passes`: n_k / B_k, the batches task k fills, so
    that every task gets the same expected passes per epoch (steps * P(k) * B_k * W / n_k); this is the
    Modality Pyramid's base diet (`size_exponent` 1) at equal alignment, so GVE and GVE-s (GVE Sec. 4.2,
    "applying the Modality Pyramid (GVE vs. GVE-s)") differ by exp(R_k / sigma) only. `proportional`:
    n_k per step (naive mixing; tasks with larger batches get proportionally more passes).
    `uniform`: 1 (the curriculum's `size_exponent` 0 at equal alignment)."""
    if sampling == "equal_passes":
        return [n / b for n, b in zip(sizes, batch_sizes)]
    if sampling == "proportional":
        return [float(n) for n in sizes]
    if sampling == "uniform":
        return [1.0] * len(sizes)
    raise ValueError(f"sampling must be one of {list(SAMPLINGS)}, got {sampling!r}")


def default_steps(sizes: list[int], batch_sizes: list[int], world_size: int = 1) -> int:
    """Batches per epoch when none is configured: the sum over tasks of whole global batches."""
    return sum(max(1, n // (b * world_size)) for n, b in zip(sizes, batch_sizes))


class TaskBatchSampler(DistributedSampler):
    """Batches of `(task_index, record_index)` pairs for this rank.

    Args:
        sizes: records per task.
        batch_sizes: per-device batch size of each task.
        steps_per_epoch: batches per epoch (default: the sum over tasks of global batches).
        probabilities: initial P(k) (default: `size_weights(..., "equal_passes")`, n_k / B_k).
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
            raise ConfigError("one size and one batch size per task are required")
        small = [k for k, (n, b) in enumerate(zip(sizes, batch_sizes)) if n < b * world_size]
        if small:
            raise ConfigError(
                f"task(s) {small} have fewer records than one global batch (batch size x {world_size} ranks)"
            )
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside world size {world_size}")
        self.sizes = list(sizes)
        self.batch_sizes = list(batch_sizes)
        self.seed = seed
        self.rank = rank
        self.num_replicas = world_size
        self.epoch = 0
        self.start_step = 0
        self._orders: dict[int, tuple[tuple[int, ...], np.ndarray]] = {}  # task -> (its key, its order)
        self.steps = steps_per_epoch or default_steps(sizes, batch_sizes, world_size)
        if probabilities is None:
            probabilities = size_weights(sizes, batch_sizes)
        self.probabilities = self._checked(probabilities)

    def _checked(self, weights) -> np.ndarray:
        weights = np.asarray(weights, dtype=np.float64)
        if (
            weights.shape != (len(self.sizes),)
            or (weights < 0).any()
            or not np.isfinite(weights).all()
            or weights.sum() <= 0
        ):
            raise ValueError(
                f"task probabilities must be {len(self.sizes)} non-negative finite weights, got {weights.tolist()}"
            )
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
        """The random order of `task`'s records in pass `cycle` of this epoch, kept while it is in use
        (permuting WebVid's 5.4 M pairs for every batch took longer than the batch)."""
        key = (self.seed, self.epoch, task, cycle)
        kept = self._orders.get(task)
        if kept is None or kept[0] != key:
            kept = (key, np.random.default_rng([self.seed, self.epoch, task, cycle]).permutation(self.sizes[task]))
            self._orders[task] = kept
        return kept[1]

    def global_batch(self, task: int, occurrence: int) -> np.ndarray:
        """Record indices of the `occurrence`-th global batch of `task` in this epoch (all ranks).
        Each pass over a task's random order is cut into whole global batches (the remainder
        waits for a later pass), so no record appears twice in one batch."""
        width = self.batch_sizes[task] * self.num_replicas
        per_pass = self.sizes[task] // width
        cycle, offset = divmod(occurrence, per_pass)
        return self._order(task, cycle)[offset * width : (offset + 1) * width]

    def place(self, epoch: int, steps: int) -> None:
        """Start at step `steps` of `epoch`'s schedule (a mid-epoch resume)."""
        self.epoch, self.start_step = epoch, steps

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        schedule = self.task_schedule()
        seen = np.zeros(len(self.sizes), dtype=np.int64)
        start, self.start_step = self.start_step, 0
        for step, task in enumerate(schedule):
            occurrence = int(seen[task])
            seen[task] += 1
            if step < start:
                continue
            local = rank_share(self.global_batch(int(task), occurrence).tolist(), self.rank, self.num_replicas)
            yield [(int(task), int(i)) for i in local]

    def __len__(self) -> int:
        return self.steps
