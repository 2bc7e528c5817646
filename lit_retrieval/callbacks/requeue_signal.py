"""`RequeueOnlyWhileTraining`: Slurm's requeue signal saves and requeues a fit that is still training,
never a finished run (issue 45).

Slurm sends `--signal=SIGUSR1@N` (and a preempting `scancel --signal=USR1`) to every process of every
running step whenever its time comes. Lightning's Slurm handler (`SLURMEnvironment(auto_requeue=True)`)
writes `hpc_ckpt_<n>.ckpt` and runs `scontrol requeue` from the start of a run until its teardown,
which then puts back the disposition from before: the default, which kills the process. So a signal
that arrived after training had ended

- while the final checkpoints were written (`on_train_end`) requeued a finished job, which ran again;
- after Lightning's teardown (`on_fit_end`, teardown hooks, the CLI's own end, interpreter shutdown)
  killed the rank ("User defined signal 1"): srun reports the task as failed and the job ends FAILED
  with its weights complete.

This callback (the first of every `RetrievalCLI` run's callbacks) makes the requeue signal ignored

- in `fit`, from the first hook after the fit loop ended (`on_train_end`, before any final checkpoint)
  to the end of the process, also through Lightning's teardown (it restores the ignore);
- in `validate`, `test` and `predict` throughout: they have nothing to save (an hpc checkpoint of an
  evaluation holds no optimizer state yet would be the run's newest) and a requeue only runs the
  evaluation again.

Ignored (`SIG_IGN`), not handled by Python: the kernel drops the signal until the process has exited
(Python resets its own handlers to the default while shutting down). A later run in the same process
gets the disposition from before back at its `setup`, before Lightning installs its handler (which it
skips while any handler is set). A signal before the end is Lightning's requeue path, unchanged.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

import lightning as L
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch.utilities.rank_zero import rank_zero_info

_REPLACED: dict[int, Any] = {}  # signal -> its disposition before this module ignored it (process-wide state)


def _requeue_signal(trainer: L.Trainer) -> int | None:
    """The signal Lightning's Slurm handler requeues on in this run, or None when it installs none."""
    environment = trainer._accelerator_connector.cluster_environment
    if not isinstance(environment, SLURMEnvironment) or not environment.auto_requeue:
        return None
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        return None
    return environment.requeue_signal


def _ignore(signum: int, before: Any) -> None:
    """Ignore `signum`, remembering `before` as what to give back to a later run (unless ignored already)."""
    if signal.getsignal(signum) is not signal.SIG_IGN:
        _REPLACED.setdefault(signum, before)
        signal.signal(signum, signal.SIG_IGN)


class RequeueOnlyWhileTraining(L.Callback):
    """Ignore Slurm's requeue signal once `fit` has ended, and in evaluation runs."""

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        signum = _requeue_signal(trainer)
        if signum is None:
            return
        if stage != "fit":
            _ignore(signum, signal.getsignal(signum))
        elif signum in _REPLACED and signal.getsignal(signum) is signal.SIG_IGN:  # ignored by an earlier run here
            signal.signal(signum, _REPLACED.pop(signum))

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        signum = _requeue_signal(trainer)
        if signum is None:
            return
        # Lightning's teardown puts back what it found at the start (the default: a kill); make that the ignore
        original = getattr(trainer._signal_connector, "_original_handlers", {})
        _ignore(signum, original.get(signum, signal.SIG_DFL))
        if signum in original:
            original[signum] = signal.SIG_IGN
        rank_zero_info(f"training ended: {signal.Signals(signum).name} (Slurm's requeue signal) is ignored from now on")
