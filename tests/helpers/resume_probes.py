"""A LightningModule that records the dataset indices of its training batches and sizes its schedule as the
project's modules do (the loader is built before a checkpoint is restored), a strategy that restores as
DeepSpeed does, and a callback that checkpoints and stops mid-epoch: the resume-order tests' probes."""

from __future__ import annotations

import lightning as L
import torch
from lightning.pytorch.strategies import SingleDeviceStrategy


class AfterSetup(SingleDeviceStrategy):
    """Restores the checkpoint after the strategy's setup, as Lightning's DeepSpeed strategy does."""

    @property
    def restore_checkpoint_after_setup(self) -> bool:
        return True


class RecordBatches(L.LightningModule):
    """Records the dataset indices of every training batch; sizes a schedule as our modules do."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.seen: list[list[int]] = []

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        self.seen.append(batch["index"].tolist())
        return (self.weight - 1).pow(2).sum()

    def configure_optimizers(self):
        steps = self.trainer.estimated_stepping_batches  # builds the training loader (Lightning's fit loop)
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        schedule = torch.optim.lr_scheduler.LinearLR(optimizer, 1.0, 0.5, total_iters=int(steps))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class SaveAndStopAt(L.Callback):
    """After optimizer step `step`: writes the checkpoint (as Lightning's SIGUSR1 handler does) and stops."""

    def __init__(self, step: int, path: str) -> None:
        self.step, self.path = step, path

    def on_train_batch_end(self, trainer: L.Trainer, module, outputs, batch, batch_idx: int) -> None:
        if trainer.global_step == self.step:
            trainer.save_checkpoint(self.path)
            trainer.should_stop = True


class WriteBatches(L.Callback):
    """Appends each training batch's dataset indices to `FOLDER/rank{R}.jsonl` (one line a batch;
    `rank{R}-start{N}.jsonl` after the N-th requeue of a Slurm job, `SLURM_RESTART_COUNT`, unset in its first start)."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def on_train_batch_start(self, trainer: L.Trainer, module, batch, batch_idx: int) -> None:
        import json
        from pathlib import Path

        import os

        restart = os.environ.get("SLURM_RESTART_COUNT")
        name = f"rank{trainer.global_rank}" + (f"-start{restart}" if restart is not None else "")
        Path(self.folder).mkdir(parents=True, exist_ok=True)
        with open(Path(self.folder) / f"{name}.jsonl", "a") as out:
            out.write(json.dumps(batch["index"].tolist()) + "\n")


def recorded_fit(data: L.LightningDataModule, root, strategy, callbacks=(), ckpt_path=None) -> list[list[int]]:
    """Two epochs of `RecordBatches` on `data` (`ckpt_path`: resumed from it): the dataset indices of each batch."""
    module = RecordBatches()
    trainer = L.Trainer(
        accelerator="cpu",
        strategy=strategy,
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(root),
        callbacks=list(callbacks),
    )
    trainer.fit(module, datamodule=data, ckpt_path=ckpt_path)
    return module.seen
