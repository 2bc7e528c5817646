"""GVE-s / GVE-i (no curriculum) keep the curriculum's base diet (GVE Sec. 4.2: "applying the Modality
Pyramid (GVE vs. GVE-s)" must change the task weights by exp(R_k / sigma) only): a brute-force count of
the records `TaskBatchSampler` yields per task, on the GVE-3B mixture of configs/gve/data_3b.yaml
(sizes / 1,000 and per-device batches / 16, so that the ratios n_k / B_k stay the paper's)."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from lit_retrieval.callbacks.modality_pyramid import task_probabilities
from lit_retrieval.data.batching.samplers import TaskBatchSampler, size_weights

EPOCHS = 25


def scaled_mixture(path: str = "configs/gve/data_3b.yaml") -> tuple[list[int], list[int]]:
    tasks = yaml.safe_load(open(path))["data"]["init_args"]["tasks"]
    return [t["max_records"] // 1000 for t in tasks], [t["batch_size"] // 16 for t in tasks]


def passes_per_task(sizes: list[int], batch_sizes: list[int], probabilities: list[float]) -> np.ndarray:
    """Records yielded per task over `EPOCHS` epochs (default steps: every task's pairs once), per record and epoch."""
    sampler = TaskBatchSampler(sizes, batch_sizes, probabilities=probabilities, seed=3)
    counts = np.zeros(len(sizes))
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for batch in sampler:
            counts[batch[0][0]] += len(batch)
    return counts / (EPOCHS * np.asarray(sizes))


def test_no_curriculum_config_gives_every_task_the_curriculums_passes():
    sizes, batch_sizes = scaled_mixture()
    assert sorted(set(batch_sizes)) == [2, 4]  # Tab. 6-7's batch sizes 32 and 64
    sampling = yaml.safe_load(open("configs/gve/ablation_no_curriculum.yaml"))["data"]["init_args"]["sampling"]
    gve_s = passes_per_task(sizes, batch_sizes, size_weights(sizes, batch_sizes, sampling))
    # GVE at equal alignment: the curriculum's P with the default size_exponent 1
    equal = [0.5] * len(sizes)
    gve = passes_per_task(sizes, batch_sizes, task_probabilities(equal, 0.1, size_weights(sizes, batch_sizes), 1.0))
    wide = np.asarray(batch_sizes) == 4
    for passes in (gve, gve_s):
        # the old naive mixing (P ~ n_k per step) gave batch-64 tasks 1.80 passes, batch-32 tasks 0.90
        assert passes[wide].mean() == pytest.approx(1.0, abs=0.05)
        assert passes[~wide].mean() == pytest.approx(1.0, abs=0.05)
        assert np.abs(passes - 1.0).max() < 0.35  # every task, within sampling noise of small tasks
    assert (gve_s * sizes).sum() == pytest.approx((gve * sizes).sum(), rel=0.02)  # the same records per epoch


def test_size_weights_worked_by_hand():
    """Tasks of 1,000 pairs in batches of 10 and 100 pairs in batches of 4: n_k / B_k = 100 and 25."""
    assert size_weights([1000, 100], [10, 4]) == [100.0, 25.0]
    assert size_weights([1000, 100], [10, 4], "proportional") == [1000.0, 100.0]
    assert size_weights([1000, 100], [10, 4], "uniform") == [1.0, 1.0]
    with pytest.raises(ValueError, match="sampling must be one of"):
        size_weights([1], [1], "sized")
