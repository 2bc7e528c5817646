"""A callback that ends `fit` after a given epoch, to simulate an interrupted run in tests."""

from __future__ import annotations

import lightning as L


class StopAfterEpoch(L.Callback):
    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_train_epoch_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if trainer.current_epoch == self.epoch:
            trainer.should_stop = True
