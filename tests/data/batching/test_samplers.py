"""Both training samplers shard by rank with PyTorch's `DistributedSampler` rule (`rank_share`)."""

from __future__ import annotations

import torch
from torch.utils.data import DistributedSampler

from lit_retrieval.data.batching.samplers import EpochShuffle, TaskBatchSampler, rank_share


def torch_share(order: list[int], rank: int, world: int) -> list[int]:
    """The reference: PyTorch's sampler over positions of `order`, unshuffled."""
    return [order[i] for i in DistributedSampler(range(len(order)), num_replicas=world, rank=rank, shuffle=False)]


def test_rank_share_is_torchs_rule_with_its_padding():
    order = [7, 3, 9, 1, 4]
    assert rank_share(order, 0, 2) == [7, 9, 4] and rank_share(order, 1, 2) == [3, 1, 7]
    for world in (1, 2, 3, 4, 6):
        for rank in range(world):
            assert rank_share(order, rank, world) == torch_share(order, rank, world)


def test_epoch_shuffle_shards_its_order_by_the_rule():
    size, seed, epoch = 11, 5, 2
    order = torch.randperm(size, generator=torch.Generator().manual_seed(seed * 100_003 + epoch)).tolist()
    for rank in range(3):
        sampler = EpochShuffle(size, seed, rank, world_size=3)
        sampler.set_epoch(epoch)
        assert list(sampler) == torch_share(order, rank, 3)


def test_task_batches_shard_each_global_batch_by_the_rule():
    sizes, batch_sizes, world = [40, 25], [3, 2], 3
    ranks = [
        TaskBatchSampler(sizes, batch_sizes, steps_per_epoch=30, seed=4, rank=r, world_size=world) for r in range(3)
    ]
    reference = TaskBatchSampler(sizes, batch_sizes, steps_per_epoch=30, seed=4, world_size=world)
    seen = [0, 0]
    for step, batches in enumerate(zip(*(list(s) for s in ranks))):
        task = int(reference.task_schedule()[step])
        whole = reference.global_batch(task, seen[task]).tolist()
        seen[task] += 1
        assert [[i for _, i in batch] for batch in batches] == [torch_share(whole, r, world) for r in range(world)]
