"""Callbacks that let a test interrupt `lit-retrieval fit` at a known step and record the
uninterrupted run's state there."""

from __future__ import annotations

import os
import signal
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


class SignalSelfAtRunEnd(L.Callback):
    """Sends SIGUSR1 to this process once training has ended: while the final checkpoints are written
    (`on_train_end`, where Lightning's Slurm handler is still installed) and after Lightning's teardown
    (the fit's `teardown` hook, where the disposition from before the run is back), and in a test run
    (`on_test_start`). Each hook's name is appended to `record` after its signal was dealt with."""

    def __init__(self, record: str) -> None:
        self.record = record

    def _signal(self, hook: str) -> None:
        import os
        import signal

        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.2)  # a Python handler runs at the next bytecode; the default action kills at once
        with open(self.record, "a") as handle:
            handle.write(f"{hook}\n")

    def on_train_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._signal("train_end")

    def on_test_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._signal("test_start")

    def teardown(self, trainer: L.Trainer, module: L.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._signal("fit_teardown")


WITNESS = """import pathlib, signal, sys, time
signal.signal(signal.SIGUSR1, lambda *_: (pathlib.Path(sys.argv[1]).touch(), sys.exit(0)))
pathlib.Path(sys.argv[2]).touch()
time.sleep(300)
"""


class HoldForSignalAtRunEnd(L.Callback):
    """Under a real Slurm: at each of the moments `SignalSelfAtRunEnd` signals itself, writes
    `<folder>/<hook>.held` and waits (up to 2 minutes) until Slurm's signal has reached the step. A
    witness child process (part of the step, so Slurm signals it too) writes `<hook>.signalled` when its
    SIGUSR1 arrives; this rank itself may ignore the signal, so only the witness can tell."""

    def __init__(self, folder: str) -> None:
        self.folder = Path(folder)

    def _hold(self, hook: str) -> None:
        import subprocess
        import sys

        signalled, ready = self.folder / f"{hook}.signalled", self.folder / f"{hook}.ready"
        witness = subprocess.Popen([sys.executable, "-c", WITNESS, str(signalled), str(ready)])
        deadline = time.monotonic() + 120
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        (self.folder / f"{hook}.held").touch()
        while not signalled.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.5)  # slurmstepd signals the step's processes one after another
        witness.kill()
        witness.wait()

    def on_train_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._hold("train_end")

    def on_test_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._hold("test_start")

    def teardown(self, trainer: L.Trainer, module: L.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._hold("fit_teardown")


class RecordStart(L.Callback):
    def __init__(self, path: str) -> None:
        self.path = path

    def on_train_start(self, trainer, module):
        Path(self.path).write_text(str(trainer.global_step))


class SendRequeueSignal(L.Callback):
    """What Slurm does `--signal` seconds before the time limit."""

    def __init__(self, step: int = 2) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == self.step and not getattr(self, "sent", False):
            self.sent = True
            os.kill(os.getpid(), signal.SIGUSR1)
