"""A callback that ends `fit` after a given epoch, to simulate an interrupted run in tests."""

from __future__ import annotations

import lightning as L


class StopAfterEpoch(L.Callback):
    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_train_epoch_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if trainer.current_epoch == self.epoch:
            trainer.should_stop = True


class CrashAtStep(L.Callback):
    """Raises when training reaches `step` (a simulated crash after the last saved checkpoint)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer: L.Trainer, module: L.LightningModule, batch, batch_idx: int) -> None:
        if trainer.global_step == self.step:
            raise RuntimeError(f"simulated crash at step {self.step}")
