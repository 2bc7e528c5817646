"""A run resumed inside an epoch trains on the batches the uninterrupted run trained on next, also when
the checkpoint is read after the training loader was built.

Lightning's DeepSpeed strategy restores a checkpoint after its own setup (`restore_checkpoint_after_setup`),
and the setup runs `configure_optimizers`, which sizes the schedule with `trainer.estimated_stepping_batches`
and so builds the training loader before the data module's saved position is known. The ZeRO-3 run
preempted at step 3 of 4 (tests/launch/test_deepspeed_slurm.py) then trained its 4th step on the first batch of
the epoch again. `AfterSetup` is a one-process strategy with DeepSpeed's order of restoring.
"""

from __future__ import annotations

import pytest
import torch

from helpers.resume_probes import AfterSetup, SaveAndStopAt, recorded_fit
from lit_retrieval.data import MultiEventDataModule, MultiTaskDataModule


def fit(corpus, root, strategy, callbacks=(), ckpt_path=None) -> list[list[int]]:
    data = MultiEventDataModule(
        str(corpus / "annotations.json"), num_frames=2, image_size=32, batch_size=4, num_workers=0, val_split=None
    )
    return recorded_fit(data, root, strategy, callbacks, ckpt_path)


@pytest.mark.parametrize("restore", ["before_setup", "after_setup"])
def test_a_run_resumed_mid_epoch_trains_on_the_uninterrupted_runs_next_batches(corpus, tmp_path, restore):
    def strategy():
        return AfterSetup(torch.device("cpu")) if restore == "after_setup" else "auto"

    whole = fit(corpus, tmp_path / "whole", strategy())
    per_epoch = len(whole) // 2
    assert per_epoch >= 3 and whole[:per_epoch] != whole[per_epoch:]  # a new order each epoch
    stop = per_epoch + 1  # one batch into the second epoch
    checkpoint = tmp_path / "mid.ckpt"
    first = fit(corpus, tmp_path / "first", strategy(), [SaveAndStopAt(stop, str(checkpoint))])
    assert first == whole[:stop]
    resumed = fit(corpus, tmp_path / "resumed", strategy(), ckpt_path=str(checkpoint))
    assert resumed == whole[stop:]


def no_items(items, instruction):
    raise AssertionError("the sampler test reads no item")


def test_gve_task_sampler_takes_a_position_read_after_its_loader_was_built(gve_tasks):
    def batches(state: dict[str, int] | None, built_first: bool) -> list:
        data = MultiTaskDataModule(gve_tasks["train"], steps_per_epoch=6, num_workers=0, seed=0)
        data.processing = no_items
        data.setup("fit")
        if state is not None and not built_first:
            data.load_state_dict(state)
        data.train_dataloader()
        if state is not None and built_first:
            data.load_state_dict(state)
        return [list(batch) for batch in data.sampler]

    def epoch_batches(epoch: int) -> list:
        data = MultiTaskDataModule(gve_tasks["train"], steps_per_epoch=6, num_workers=0, seed=0)
        data.processing = no_items
        data.setup("fit")
        data.train_dataloader()
        data.sampler.set_epoch(epoch)
        return [list(batch) for batch in data.sampler]

    uninterrupted = epoch_batches(1)
    assert len(uninterrupted) == 6 and uninterrupted != epoch_batches(0)
    position = {"epoch": 1, "batches": 2}
    assert batches(position, built_first=False) == uninterrupted[2:]
    assert batches(position, built_first=True) == uninterrupted[2:]
