"""Small local batches on several ranks (issue 57, item 5), on 2 gloo processes: under
cross-device negatives one pair per rank trains (it contrasts with the gathered batch: MELON's 16
pairs on 16 GPUs), with the loss of one process holding both pairs; and the decision to skip a
batch too small to contrast is shared, so a rank whose batch lost a video (`on_bad_video: skip`)
does not skip alone while the other waits for its gradients."""

from __future__ import annotations

import logging
import os

import pytest
import torch
import torch.distributed as dist

from lit_retrieval.models.encoders import CLIPEncoder
from lit_retrieval.models.heads import MeanPHead
from lit_retrieval.modules import DualEncoderRetrieval
from helpers.forked_ranks import run_ranks

EVENTS = [["a red circle moves right", "it stops"], ["a blue square turns"], ["a green star", "falls down"]]


def module(tiny_clip: str, cross_device: bool, recipe_batch: int | None = None) -> DualEncoderRetrieval:
    torch.manual_seed(0)
    return DualEncoderRetrieval(
        CLIPEncoder(pretrained=tiny_clip), MeanPHead(), cross_device=cross_device, recipe_batch=recipe_batch
    )


def batch(rows: list[int]) -> dict:
    frames = torch.stack([torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(r)) for r in rows])
    return {
        "events": [EVENTS[r] for r in rows],
        "video_id": [f"v{r}" for r in rows],
        "frames": frames,
        "frame_mask": torch.ones(len(rows), 2, dtype=torch.bool),
        "skipped": [],
    }


def step_loss(model: DualEncoderRetrieval, rows: list[int]) -> float | None:
    model.eval()  # no dropout: each rank's masks would differ from one process's
    out = model.training_step(batch(rows), 0)
    return None if out is None else float(out["loss"])


def _worker(rank: int, world: int, init: str, tiny_clip: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    results = {
        # one pair per rank, negatives across ranks: trains
        "cross_one_pair": step_loss(module(tiny_clip, cross_device=True), [rank]),
        # rank 1's batch lost a video: 2 pairs against 1, without cross-device negatives
        "local_uneven": step_loss(module(tiny_clip, cross_device=False), [0, 2] if rank == 0 else [1]),
        # the same under cross-device negatives (the gather needs as many pairs on every rank)
        "cross_uneven": step_loss(module(tiny_clip, cross_device=True), [0, 2] if rank == 0 else [1]),
    }
    torch.save(results, os.path.join(out, f"rank{rank}.pt"))
    dist.destroy_process_group()


@pytest.mark.distributed
def test_one_pair_per_rank_trains_under_cross_device_and_every_rank_skips_together(tmp_path, tiny_clip):
    init = f"file://{tmp_path / 'rendezvous'}"
    run_ranks(_worker, (2, init, str(tiny_clip), str(tmp_path)))
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    whole = step_loss(module(str(tiny_clip), cross_device=False), [0, 1])  # one process holding both pairs
    for results in ranks:
        assert results["cross_one_pair"] == pytest.approx(whole, rel=1e-5)
        assert results["local_uneven"] is None and results["cross_uneven"] is None


def test_the_optimizer_batch_is_checked_against_the_recipe(tiny_clip, caplog, monkeypatch):
    import lit_retrieval.modules.dual_encoder as dual_encoder

    monkeypatch.setattr(dual_encoder, "distributed_world", lambda: 16)  # what each of 16 ranks sees
    monkeypatch.setattr(DualEncoderRetrieval, "_contrastable", lambda self, size: size >= 2)
    model = module(str(tiny_clip), cross_device=False, recipe_batch=2)
    with caplog.at_level(logging.WARNING):
        step_loss(model, [0, 1])
    warned = [r.getMessage() for r in caplog.records if "pairs per optimizer step" in r.getMessage()]
    assert len(warned) == 1 and "is 2 but this run has 32 (16 rank(s) x 2 pairs x 1 accumulated" in warned[0]
