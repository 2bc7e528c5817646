"""`ResumeCheckpoint`: an interrupted `fit` loses at most one interval of work and none of its logs.

- **Interval checkpoints.** Every `every_n_steps` optimizer steps and/or `every_n_minutes` minutes
  the run's `ModelCheckpoint` callbacks write their last checkpoint (`last.ckpt`, or whatever
  `save_last` names), the same file they write at epoch end, so `--ckpt_path last` (or the file's
  path) resumes mid-epoch; the data modules restart their sampler at the next batch
  (`data/batching/resume.py`). A run without a `ModelCheckpoint(save_last=...)` gets `save_last=True` on
  its default one (an explicit `save_last: false` is respected, with a warning).
- **The end.** When `fit` ends, the last checkpoint is written (unless already at that step), so
  `last.ckpt` holds the final state even after interval checkpoints (Lightning's
  `ModelCheckpoint(save_top_k=0)` alone would leave the last interval's state there).
- **Signals.** SIGTERM (what a scheduler sends before killing a job) makes Lightning stop at the
  next step boundary with `SIGTERMException`; this callback then writes the last checkpoint, and
  `RetrievalCLI` exits with status 128 + 15 = 143 instead of Lightning's 0, so the scheduler
  records a failure. The first SIGINT (Ctrl+C) is handled the same way (status 130); a second one
  interrupts at once. Slurm's SIGUSR1 requeue path (an `hpc_ckpt_N.ckpt`, then `scontrol requeue`)
  is Lightning's and unchanged.
- **Logs that append.** Lightning's `CSVLogger` deletes `metrics.csv` when a run starts in the
  same folder. The rows it held are read first (`remember_logs`, called by `RetrievalCLI` before
  `fit`), each checkpoint records how many rows had been logged when it was written, and a resumed
  run puts exactly those rows back before its own, so the file equals an uninterrupted run's (rows
  logged after the checkpoint, which the resumed run logs again, are dropped). A TensorBoard log
  gets a session-start event at the resumed step, which makes TensorBoard discard the interrupted
  run's events from that step on (as `SummaryWriter(purge_step=...)` does).
- **The same W&B run.** Lightning's `WandbLogger` starts a new W&B run on resume unless its `id`
  is given. Each checkpoint records the run id of every `WandbLogger`; `RetrievalCLI` reads it from
  the checkpoint a fit resumes (`recorded_wandb_ids`) and gives it back to the logger before
  Lightning creates the run (its setup does, before any checkpoint state is restored), so the
  curves continue in one W&B run (Lightning passes `resume="allow"`); an `id` the user set wins.
  `--ckpt_path last` finds its file as Lightning does (the newest last checkpoint), before the run starts.
  W&B's own step (`_step`) is the trainer's global step (`log_wandb_at_global_step`): Lightning's
  `WandbLogger` lets W&B count its steps, which start again at 0 in a resumed process (offline always;
  `wandb sync --append` needs steps that continue), so the history of a resumed run continues from the
  checkpoint's step. Steps an interrupted run logged after its checkpoint are in both processes' logs
  (at most one checkpoint interval): nothing here rewrites what W&B already holds.
"""

from __future__ import annotations

import csv
import logging
import signal
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from lit_retrieval.errors import ConfigError

log = logging.getLogger(__name__)


class ResumeCheckpoint(L.Callback):
    """Interval and on-signal last checkpoints, and CSV/TensorBoard logs and W&B runs continued on resume.

    Args:
        every_n_steps: write the last checkpoint every this many optimizer steps (None: off).
        every_n_minutes: ... and whenever this many minutes passed since the last one (None: off).
        on_signal: write it on SIGTERM / the first SIGINT before exiting with a non-zero status.
    """

    def __init__(
        self, every_n_steps: int | None = None, every_n_minutes: float | None = 30.0, on_signal: bool = True
    ) -> None:
        if every_n_steps is not None and every_n_steps < 1:
            raise ConfigError(f"resume_checkpoint.every_n_steps must be >= 1 or null, got {every_n_steps}")
        if every_n_minutes is not None and every_n_minutes <= 0:
            raise ConfigError(f"resume_checkpoint.every_n_minutes must be > 0 or null, got {every_n_minutes}")
        self.every_n_steps = every_n_steps
        self.every_n_minutes = every_n_minutes
        self.on_signal = on_signal
        self.stop_signal: int | None = None  # the signal that stopped the run
        self._last_save = time.monotonic()
        self._previous_rows: dict[str, list[dict[str, str]]] = {}  # metrics.csv path -> rows read before fit
        self._rows_at_checkpoint: dict[str, int] | None = None
        self._sigint_before: Any = None
        self._trainer: L.Trainer | None = None

    # -- checkpoints ---------------------------------------------------------------------------

    @staticmethod
    def _last_writers(trainer: L.Trainer) -> list[ModelCheckpoint]:
        return [c for c in trainer.checkpoint_callbacks if isinstance(c, ModelCheckpoint) and c.save_last]

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._trainer = trainer
        if stage != "fit" or self._last_writers(trainer):
            return
        default = trainer.checkpoint_callback
        if isinstance(default, ModelCheckpoint) and default.save_last is None:
            default.save_last = True
        elif default is None:  # enable_checkpointing: false
            log.info("checkpointing is off: no interval or on-signal checkpoints")
        else:
            log.warning("no ModelCheckpoint with save_last: interval and on-signal checkpoints are off")

    def save_last(self, trainer: L.Trainer) -> None:
        """Every last-writing `ModelCheckpoint` writes its last checkpoint now (unless it already
        did at this step)."""
        for callback in self._last_writers(trainer):
            if callback._last_global_step_saved != trainer.global_step:
                callback._save_last_checkpoint(trainer, callback._monitor_candidates(trainer))
        self._last_save = time.monotonic()

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._last_save = time.monotonic()
        self._restore_logs(trainer)
        if self.on_signal and threading.current_thread() is threading.main_thread():
            self._sigint_before = signal.signal(signal.SIGINT, self._on_sigint)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        due = (
            self.every_n_steps is not None and trainer.global_step > 0 and trainer.global_step % self.every_n_steps == 0
        )
        if not due and self.every_n_minutes is not None:  # rank 0's clock decides, so every rank saves together
            due = trainer.strategy.broadcast(time.monotonic() - self._last_save >= 60 * self.every_n_minutes)
        if due:
            self.save_last(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """The final state goes to the last checkpoint. `ModelCheckpoint(save_top_k=0)` writes its
        last checkpoint at the end of training only if it never wrote one before, so without this
        an interval checkpoint would stay the run's `last.ckpt` (issue 24). Runs before
        `ModelCheckpoint.on_train_end` (Lightning puts checkpoint callbacks last), which then
        has nothing left to do."""
        self.save_last(trainer)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, SIGTERMException):
            self.stop_signal = self.stop_signal or signal.SIGTERM
            if self.on_signal and trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking:
                self.save_last(trainer)
                log.warning(
                    "stopped by %s at global step %d; last checkpoint written",
                    signal.Signals(self.stop_signal).name,
                    trainer.global_step,
                )

    def _on_sigint(self, signum: int, frame: Any) -> None:
        """First Ctrl+C: stop at the next step boundary as on SIGTERM; the next one interrupts."""
        signal.signal(signal.SIGINT, self._sigint_before or signal.default_int_handler)
        on_sigterm = signal.getsignal(signal.SIGTERM)
        if not callable(on_sigterm):
            raise KeyboardInterrupt
        self.stop_signal = signal.SIGINT
        log.warning("SIGINT: stopping after this step with a checkpoint (Ctrl+C again to stop at once)")
        on_sigterm(signum, frame)  # Lightning's SIGTERM notifier: sets trainer.received_sigterm

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self._sigint_before is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self._sigint_before)
        self._sigint_before = None

    # -- logs ----------------------------------------------------------------------------------

    @staticmethod
    def _csv_loggers(trainer: L.Trainer) -> list[CSVLogger]:
        return [logger for logger in trainer.loggers if isinstance(logger, CSVLogger)]

    def remember_logs(self, trainer: L.Trainer) -> None:
        """Read the rows of every CSV logger's existing `metrics.csv` before `fit` replaces it."""
        for logger in self._csv_loggers(trainer):
            path = Path(logger.log_dir) / "metrics.csv"
            if trainer.is_global_zero and path.is_file():
                with open(path, newline="") as handle:
                    self._previous_rows[str(path)] = list(csv.DictReader(handle))

    def state_dict(self) -> dict[str, Any]:
        """`{"csv_rows": {metrics.csv path: rows that belong before this checkpoint}}`: the rows
        logged so far (each logger is flushed first), plus the row of the current batch when the
        checkpoint is written in its end hooks (Lightning logs that row after them, and a resumed
        run does not repeat the batch)."""
        counts = {}
        trainer = self._trainer
        for logger in self._csv_loggers(trainer) if trainer is not None and trainer.is_global_zero else []:
            logger.save()
            path = Path(logger.log_dir) / "metrics.csv"
            rows = 0
            if path.is_file():
                with open(path, newline="") as handle:
                    rows = sum(1 for _ in csv.reader(handle)) - 1  # less the header
            counts[str(path)] = rows + _row_pending(trainer)
        wandb_ids = [logger.version for logger in _wandb_loggers(trainer)] if trainer is not None else []
        return {"csv_rows": counts, "wandb_ids": wandb_ids}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._rows_at_checkpoint = dict(state_dict.get("csv_rows") or {})

    def _restore_logs(self, trainer: L.Trainer) -> None:
        resumed = trainer.ckpt_path is not None
        for logger in self._csv_loggers(trainer):
            path = str(Path(logger.log_dir) / "metrics.csv")
            rows = self._previous_rows.pop(path, [])
            if not resumed or not rows or not trainer.is_global_zero:
                continue
            if self._rows_at_checkpoint is not None and path in self._rows_at_checkpoint:
                kept = rows[: self._rows_at_checkpoint[path]]
            else:  # a checkpoint written without this callback: the rows of earlier steps
                kept = [row for row in rows if row.get("step") and float(row["step"]) < trainer.global_step]
            writer = logger.experiment
            writer.metrics = [{k: v for k, v in row.items() if k is not None} for row in kept] + writer.metrics
            logger.save()
            log.info("%s: kept %d of %d rows logged before the checkpoint", path, len(kept), len(rows))
        if resumed and trainer.is_global_zero:
            for logger in trainer.loggers:
                if isinstance(logger, TensorBoardLogger):
                    _purge_tensorboard_from(logger, trainer.global_step)


def _wandb_loggers(trainer: L.Trainer) -> list[WandbLogger]:
    return [logger for logger in trainer.loggers if isinstance(logger, WandbLogger)]


def recorded_wandb_ids(checkpoint: dict[str, Any]) -> list[str | None]:
    """The W&B run ids a checkpoint's `ResumeCheckpoint` state recorded (`[]` before it did)."""
    states = checkpoint.get("callbacks") or {}
    recorded = [state for key, state in states.items() if str(key).startswith(ResumeCheckpoint.__name__)]
    return list(recorded[0].get("wandb_ids") or []) if recorded and isinstance(recorded[0], dict) else []


def has_wandb_logger(trainer: L.Trainer) -> bool:
    return bool(_wandb_loggers(trainer))


def check_wandb_id(run_id: str, where: str) -> None:
    """Refuse at once a run id W&B would refuse only after its start-up (`wandb.init`, some 20 s
    later, as a traceback): W&B's own check (its `Settings.run_id` validator), as one line naming
    `where` the id came from."""
    from wandb.errors import UsageError as WandbUsageError
    from wandb.sdk.wandb_settings import Settings

    try:
        Settings(run_id=run_id)
    except (WandbUsageError, ValueError) as err:
        raise ConfigError(f"{where}: W&B run id {run_id!r} is refused by W&B ({err})") from None


def check_configured_wandb_ids(trainer: L.Trainer) -> None:
    """The ids given to the trainer's `WandbLogger`s (`trainer.logger ... init_args.id`), checked."""
    for logger in _wandb_loggers(trainer):
        if logger._experiment is None and logger.version is not None:
            check_wandb_id(str(logger.version), "trainer.logger: WandbLogger id")


def continue_wandb_runs(trainer: L.Trainer, run_ids: list[str | None], checkpoint: str = "the checkpoint") -> None:
    """Give each `WandbLogger` (in order) the W&B run id its checkpoint recorded, unless it already
    has a run or an id of its own; a recorded id W&B would refuse is refused, naming `checkpoint`.
    Lightning has no public setter: the id goes into the arguments the logger passes to `wandb.init`
    (`_wandb_init`, with its `resume="allow"`) and its `version`."""
    for logger, run_id in zip(_wandb_loggers(trainer), run_ids):
        if run_id is None or logger._experiment is not None:
            continue
        check_wandb_id(str(run_id), f"{checkpoint}: its recorded W&B run")
        if logger.version is not None:
            if logger.version != run_id:
                log.info("W&B: the configured id %s wins over the checkpoint's run %s", logger.version, run_id)
            continue
        logger._wandb_init["id"] = run_id
        logger._id = run_id
        log.info("W&B: resuming run %s", run_id)


def log_wandb_at_global_step(trainer: L.Trainer) -> None:
    """Make each `WandbLogger` log at W&B step = the trainer's global step (module notes): Lightning's
    `log_metrics` with `step=` passed to `wandb.log`. Loggers syncing TensorBoard keep Lightning's."""
    for logger in _wandb_loggers(trainer):
        if not logger._wandb_init.get("sync_tensorboard"):
            logger.log_metrics = partial(_log_at_step, logger)


@rank_zero_only
def _log_at_step(logger: WandbLogger, metrics: dict[str, float], step: int | None = None) -> None:
    if logger._prefix:
        metrics = {f"{logger._prefix}{logger.LOGGER_JOIN_CHAR}{k}": v for k, v in metrics.items()}
    if step is None:
        logger.experiment.log(dict(metrics))
    else:
        logger.experiment.log({**metrics, "trainer/global_step": step}, step=int(step))


def _row_pending(trainer: L.Trainer) -> int:
    """1 inside a training batch's end hooks (ready > completed) when Lightning will log the
    batch's step metrics right after them (a logging step, not accumulating), else 0."""
    progress = trainer.fit_loop.epoch_loop.batch_progress.current
    if not trainer.training or progress.ready <= progress.completed or trainer.fit_loop._should_accumulate():
        return 0
    return int(trainer._logger_connector.should_update_logs)


def _purge_tensorboard_from(logger: TensorBoardLogger, step: int) -> None:
    """Mark a restart at `step` in the event file: TensorBoard drops earlier events at >= `step`."""
    from tensorboard.compat.proto.event_pb2 import Event, SessionLog

    writer = logger.experiment
    file_writer = writer._get_file_writer() if hasattr(writer, "_get_file_writer") else writer.file_writer
    file_writer.add_event(Event(step=step, session_log=SessionLog(status=SessionLog.START)))
    writer.flush()
