"""`RetrievalCLI`: the LightningCLI behind `lit-retrieval fit/validate/test/predict`.

Every LightningModule / LightningDataModule is selectable by `class_path` in YAML (subclass mode);
library code that builds a module from a training config (search, UVRB) uses this class, never the
`lit-retrieval` entry point in `cli.py`.
"""

from __future__ import annotations

import signal
from pathlib import Path

import lightning as L
from jsonargparse import ActionConfigFile
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.rank_zero import rank_zero_info

from lit_retrieval import __version__
from lit_retrieval.callbacks.metrics_report import MetricsReport
from lit_retrieval.callbacks.resume_checkpoint import ResumeCheckpoint
from lit_retrieval.checkpoint_io import SafeCheckpointIO, check_checkpoint_file, newest_resume_checkpoint
from lit_retrieval.config_errors import ExplainingArgumentParser
from lit_retrieval.errors import UsageError


class RetrievalCLI(LightningCLI):
    """LightningCLI with every LightningModule/DataModule selectable by `class_path`, a metrics
    report after evaluation, a saved config that may be overwritten (resumed/requeued runs), and
    `ResumeCheckpoint` in every run (`resume_checkpoint.every_n_steps / every_n_minutes /
    on_signal`): interval and on-signal last checkpoints, logs that continue on resume, and exit
    status 128 + signal (143 for SIGTERM, 130 for SIGINT) for a run stopped by a signal.

    `--ckpt_path newest` resumes the newest (by stored global step) of Lightning's Slurm
    `hpc_ckpt_*.ckpt` in `default_root_dir` and the `ModelCheckpoint`s' last checkpoints, or
    starts afresh when there is none (validate/test: an error) (`checkpoint_io.newest_resume_checkpoint`); the Slurm
    templates pass it. Lightning's own choice under Slurm (`ckpt_path=None`) is the highest
    hpc checkpoint, even when a later stop wrote a newer last.ckpt."""

    NEWEST = "newest"

    def __init__(self, args: list[str] | None = None, run: bool = True) -> None:
        super().__init__(
            L.LightningModule,
            L.LightningDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            save_config_kwargs={"overwrite": True},
            trainer_defaults={"callbacks": [MetricsReport()]},
            args=args,
            run=run,
        )

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_lightning_class_args(ResumeCheckpoint, "resume_checkpoint")

    def before_fit(self) -> None:
        # CSVLogger deletes metrics.csv when fit starts; keep its rows for a resumed run
        for callback in self.trainer.callbacks:
            if isinstance(callback, ResumeCheckpoint):
                callback.remember_logs(self.trainer)

    def _run_subcommand(self, subcommand: str) -> None:
        try:
            super()._run_subcommand(subcommand)
        except SIGTERMException:  # a SystemExit with status 0: the scheduler would record success
            stopped = [
                c.stop_signal for c in self.trainer.callbacks if isinstance(c, ResumeCheckpoint) and c.stop_signal
            ]
            raise SystemExit(128 + int(stopped[0] if stopped else signal.SIGTERM)) from None

    def _prepare_subcommand_kwargs(self, subcommand: str) -> dict:
        kwargs = super()._prepare_subcommand_kwargs(subcommand)
        if kwargs.get("ckpt_path") == self.NEWEST:
            last = set()
            for callback in self.trainer.checkpoint_callbacks:
                if isinstance(callback, ModelCheckpoint):
                    last |= callback._find_last_checkpoints(self.trainer)
            newest = newest_resume_checkpoint(self.trainer.default_root_dir, last)
            if newest is None and subcommand != "fit":  # evaluating the untrained model would be silently wrong
                where = self.trainer.default_root_dir
                raise UsageError(where, "--ckpt_path newest: no hpc_ckpt_*.ckpt or last checkpoint of this run")
            kwargs["ckpt_path"] = None if newest is None else str(newest)
            rank_zero_info(f"--ckpt_path newest: {newest or 'no checkpoint yet, starting afresh'}")
        return kwargs

    def instantiate_trainer(self, **kwargs) -> L.Trainer:
        """The configured trainer, with `SafeCheckpointIO` wherever the strategy uses Lightning's
        default checkpoint IO (atomic writes, clear errors for corrupt files)."""
        trainer = super().instantiate_trainer(**kwargs)
        strategy = trainer.strategy
        if type(getattr(strategy, "checkpoint_io", None)) is TorchCheckpointIO:
            strategy.checkpoint_io = SafeCheckpointIO()
        return trainer

    def _parse_ckpt_path(self) -> None:
        # LightningCLI reads the checkpoint's hyper-parameters before any trainer exists: check the
        # file first, so a truncated or corrupt one gets a clear error instead of a zip traceback.
        subcommand = self.config.get("subcommand")
        ckpt_path = self.config[subcommand].get("ckpt_path") if subcommand else None
        if ckpt_path and Path(ckpt_path).is_file():
            check_checkpoint_file(ckpt_path)
        super()._parse_ckpt_path()

    def _prepare_subcommand_parser(self, klass: type, subcommand: str, **kwargs):
        # MetricsReport prints the retrieval table; Lightning's own one-row-per-key table of the
        # same numbers (dozens of rows with the analyses) is off unless `--verbose true`.
        parser = super()._prepare_subcommand_parser(klass, subcommand, **kwargs)
        if subcommand in ("validate", "test"):
            parser.set_defaults(verbose=False)
        return parser

    def init_parser(self, **kwargs) -> ExplainingArgumentParser:
        kwargs.setdefault("dump_header", [f"lit-retrieval {__version__}"])
        parser = ExplainingArgumentParser(**kwargs)
        parser.add_argument(
            "-c", "--config", action=ActionConfigFile, help="YAML config file(s); later ones override earlier ones."
        )
        return parser
