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


class RecordBatches(L.Callback):
    """Writes each rank's (global step, task, sample ids) to `<out>/rank<r>.json` at the end of fit."""

    def __init__(self, out: str) -> None:
        self.out = out
        self.rows: list = []

    def on_train_batch_start(self, trainer: L.Trainer, module: L.LightningModule, batch, batch_idx: int) -> None:
        self.rows.append([trainer.global_step, batch.get("task"), list(batch.get("ids") or batch.get("video_id"))])

    def on_fit_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        import json
        from pathlib import Path

        Path(self.out).mkdir(parents=True, exist_ok=True)
        history = trainer.callbacks
        curriculum = next((c.history for c in history if type(c).__name__ == "ModalityPyramid"), None)
        (Path(self.out) / f"rank{trainer.global_rank}.json").write_text(
            json.dumps(
                {"batches": self.rows, "curriculum": curriculum, "val": getattr(module, "eval_results", {}).get("val")}
            )
        )


class RecordEvaluation(L.Callback):
    """Writes each rank's test metrics (`module.eval_results["test"]`) to `<out>/rank<r>.json`."""

    def __init__(self, out: str) -> None:
        self.out = out

    def on_test_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        import json
        from pathlib import Path

        Path(self.out).mkdir(parents=True, exist_ok=True)
        results = getattr(module, "eval_results", {}).get("test")
        (Path(self.out) / f"rank{trainer.global_rank}.json").write_text(json.dumps(results))
