"""Callbacks that let a test interrupt `lit-retrieval fit` at a known step and record the
uninterrupted run's state there."""

from __future__ import annotations

import time
from pathlib import Path

import lightning as L
import torch


class PauseAtStep(L.Callback):
    """After optimizer step `step`, writes `marker` and waits (up to a minute) for a SIGTERM, or
    for the file `release` to appear: the test kills the process meanwhile (or sends SIGTERM, after
    which training goes on, or a signal whose handler writes `release`, e.g. Lightning's hpc
    checkpoint on SIGUSR1)."""

    def __init__(self, step: int, marker: str, release: str | None = None) -> None:
        self.step, self.marker, self.release = step, marker, release

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, outputs, batch, batch_idx: int) -> None:
        if trainer.global_step == self.step:
            Path(self.marker).write_text(str(self.step))
            deadline = time.monotonic() + 60
            while not trainer.received_sigterm and time.monotonic() < deadline:
                if self.release is not None and Path(self.release).exists():
                    break
                time.sleep(0.02)


class RecordStateAtSteps(L.Callback):
    """Writes the module's state and the optimizer's state after each of `steps` to `out/step<N>.pt`."""

    def __init__(self, steps: list[int], out: str) -> None:
        self.steps, self.out = steps, out

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, outputs, batch, batch_idx: int) -> None:
        if trainer.global_step in self.steps:
            Path(self.out).mkdir(parents=True, exist_ok=True)
            torch.save(
                {"state_dict": module.state_dict(), "optimizer": trainer.optimizers[0].state_dict()},
                Path(self.out) / f"step{trainer.global_step}.pt",
            )


class SignalAtStep(L.Callback):
    """Sends `signum` to this very process after optimizer step `step` (an in-process stand-in for
    a scheduler's SIGTERM)."""

    def __init__(self, step: int, signum: int = 15) -> None:
        self.step, self.signum = step, signum

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, outputs, batch, batch_idx: int) -> None:
        if trainer.global_step == self.step:
            import os

            os.kill(os.getpid(), self.signum)


class RecordStartStep(L.Callback):
    """Appends the global step at which training starts (the resumed step) to `path`, a line per start."""

    def __init__(self, path: str) -> None:
        self.path = path

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        with open(self.path, "a") as handle:
            handle.write(f"{trainer.global_step}\n")
