"""`RetrievalCLI`: the LightningCLI behind `lit-retrieval fit/validate/test/predict`, and the one
reader of training configs.

Every LightningModule / LightningDataModule is selectable by `class_path` in YAML (subclass mode).
Whatever else reads a training config reads it here, through this class's own parser, so a config
means the same to every command as to `fit` (composed `--config` files, defaults, class paths):
`training_config` (parsed, nothing built: `cache-frames`, `sali-stats`), `build_datamodule`,
`build_module` (the module and its data settings: search, UVRB, `export-gve`) and
`resolved_training_config` (the `--print_config` dict a grid run folder keeps). None of them goes
through the `lit-retrieval` entry point in `cli.py`.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import os
import warnings
import signal
import sys
from pathlib import Path
from typing import Any

import lightning as L
import torch
import yaml
from jsonargparse import ActionConfigFile
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.rank_zero import rank_zero_info

from lit_retrieval import __version__
from lit_retrieval.callbacks.metrics_report import MetricsReport
from lit_retrieval.callbacks.requeue_signal import RequeueOnlyWhileTraining
from lit_retrieval.callbacks.resume_checkpoint import (
    ResumeCheckpoint,
    check_configured_wandb_ids,
    continue_wandb_runs,
    has_wandb_logger,
    log_wandb_at_global_step,
    recorded_wandb_ids,
)
from lit_retrieval.callbacks.trained_config import TrainedModelConfig, recorded_run, trained_model_config
from lit_retrieval.checkpoint_io import SafeCheckpointIO, checkpoint_metadata, newest_resume_checkpoint
from lit_retrieval.config_errors import ExplainingArgumentParser, unknown_empty_mappings
from lit_retrieval.errors import ConfigError, UsageError, check_at_least
from lit_retrieval.run_folder import config_run_folders, moved
from lit_retrieval.strategies import check_deepspeed_installed


class RetrievalCLI(LightningCLI):
    """LightningCLI with every LightningModule/DataModule selectable by `class_path`, a metrics
    report after evaluation, a saved config that may be overwritten (resumed/requeued runs), and
    `ResumeCheckpoint` in every run (`resume_checkpoint.every_n_steps / every_n_minutes /
    on_signal`): interval and on-signal last checkpoints, logs (and W&B runs) that continue on resume, and exit
    status 128 + signal (143 for SIGTERM, 130 for SIGINT) for a run stopped by a signal. Slurm's
    requeue signal saves and requeues only while a fit trains (`RequeueOnlyWhileTraining`): once
    training ended, and in evaluation runs, it is ignored.

    `--ckpt_path newest` resumes the newest (by stored global step) of Lightning's Slurm
    `hpc_ckpt_*.ckpt` in `default_root_dir` and the `ModelCheckpoint`s' last checkpoints, or
    starts afresh when there is none (validate/test: an error) (`checkpoint_io.newest_resume_checkpoint`); the Slurm
    templates pass it. Lightning's own choice under Slurm (`ckpt_path=None`) is the highest
    hpc checkpoint, even when a later stop wrote a newer last.ckpt.

    With `--ckpt_path FILE` the trained model's config is the base and what the user gives wins:
    the checkpoint's `model:` section (`TrainedModelConfig`, or its hyper-parameters) becomes the
    default of `model`, then the command line is parsed again over it, so every `--config` file and
    `--model...` flag applies in the order given (Lightning's own `_parse_ckpt_path` parses the
    hyper-parameters *over* the user's config, dropping every test-time option). Weights still
    come from the checkpoint; an option that changes their shapes is refused, named, in one line."""

    NEWEST = "newest"

    def __init__(self, args: list[str] | None = None, run: bool = True) -> None:
        self._trained_model: dict[str, Any] | None = None  # the checkpoint's model config, once read
        self._builds_only = not run
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
        if self._builds_only:  # the config `fit` saves (its log folder's, grid's) holds fit's own options: ignored
            parser.add_argument("--ckpt_path", type=str | None, default=None)
            parser.add_argument("--weights_only", type=bool | None, default=None)

    def before_fit(self) -> None:
        # CSVLogger deletes metrics.csv when fit starts; keep its rows for a resumed run
        for callback in self.trainer.callbacks:
            if isinstance(callback, ResumeCheckpoint):
                callback.remember_logs(self.trainer)

    def parse_arguments(self, parser, args) -> None:
        given = sys.argv[1:] if args is None else args
        subcommands = getattr(self, "_subcommand_parsers", {})  # none when run=False
        if self._trained_model is None and isinstance(given, (list, tuple)):  # so a `model:`-less config parses
            self._use_trained_model(*_subcommand_and_checkpoint(given, subcommands))
        self._given_args = args
        self._command_line = list(given) if isinstance(given, (list, tuple)) else []
        if isinstance(given, (list, tuple)):
            merged = merged_dict_flags(parser, list(given))
            args = merged if merged != list(given) else args
        super().parse_arguments(parser, args)
        section = self.config[self.config.subcommand] if self.config.get("subcommand") else self.config
        dropped = unknown_empty_mappings([str(path) for path in section.get("config") or []], section)
        if dropped:
            raise ConfigError(dropped[0])
        self._given_seed = section.get("seed_everything")  # as configured: LightningCLI draws one for `true`

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
            newest = newest_resume_checkpoint(self.trainer.default_root_dir, self._last_checkpoints())
            if newest is not None and subcommand == "fit":
                refuse_another_runs_checkpoint(newest, self._config_files(), self._model_section(), self._given_seed)
            if newest is None and subcommand != "fit":  # evaluating the untrained model would be silently wrong
                where = self.trainer.default_root_dir
                raise UsageError(where, "--ckpt_path newest: no hpc_ckpt_*.ckpt or last checkpoint of this run")
            kwargs["ckpt_path"] = None if newest is None else str(newest)
            rank_zero_info(f"--ckpt_path newest: {newest or 'no checkpoint yet, starting afresh'}")
        resumed = kwargs.get("ckpt_path")
        if resumed == "last":  # Lightning resolves it inside fit, after the W&B run has started: the same rule here
            existing = [path for path in self._last_checkpoints() if Path(path).exists()]
            resumed = max(existing, key=lambda path: Path(path).stat().st_mtime) if existing else None
        if has_wandb_logger(self.trainer):
            check_configured_wandb_ids(self.trainer)
        if subcommand == "fit" and resumed and Path(resumed).exists() and has_wandb_logger(self.trainer):
            continue_wandb_runs(self.trainer, recorded_wandb_ids(checkpoint_metadata(resumed)), str(resumed))
        return kwargs

    def _last_checkpoints(self) -> set[str]:
        """The last checkpoints the run's `ModelCheckpoint` callbacks would write (`--ckpt_path last`)."""
        last: set[str] = set()
        for callback in self.trainer.checkpoint_callbacks:
            if isinstance(callback, ModelCheckpoint):
                last |= callback._find_last_checkpoints(self.trainer)
        return last

    def instantiate_trainer(self, **kwargs) -> L.Trainer:
        """The configured trainer, with `SafeCheckpointIO` wherever the strategy uses Lightning's
        default checkpoint IO (atomic writes, clear errors for corrupt files); an
        `accumulate_grad_batches` below 1 is refused in one line."""
        trainer = super().instantiate_trainer(**kwargs)
        # Lightning accepts 0 and divides by it when a module counts its schedule's steps
        check_at_least("trainer", 1, accumulate_grad_batches=trainer.accumulate_grad_batches)
        trainer.callbacks.append(TrainedModelConfig(self._model_section(), self._config_files(), self._given_seed))
        trainer.callbacks.insert(0, RequeueOnlyWhileTraining())  # first: before any callback's final checkpoint
        log_wandb_at_global_step(trainer)
        strategy = trainer.strategy
        if type(getattr(strategy, "checkpoint_io", None)) is TorchCheckpointIO:
            strategy.checkpoint_io = SafeCheckpointIO()
        return trainer

    def _parse_ckpt_path(self) -> None:
        subcommand = self.config.get("subcommand")
        ckpt_path = self.config[subcommand].get("ckpt_path") if subcommand else None
        if self._trained_model is None and self._use_trained_model(subcommand, ckpt_path):  # from a config file
            self.parse_arguments(self.parser, self._given_args)

    def _use_trained_model(self, subcommand: str | None, ckpt_path: str | None) -> bool:
        """Make the checkpoint's `model:` section the default of `subcommand`'s `model`."""
        if not subcommand or not ckpt_path or not Path(ckpt_path).exists():  # `newest`, `last`: resolved later
            return False
        trained = trained_model_config(checkpoint_metadata(ckpt_path))  # a clear error for a corrupt file
        if trained is None:
            return False
        self._subcommand_parsers[subcommand].set_defaults(model=trained)
        self._trained_model = trained
        return True

    def before_instantiate_classes(self) -> None:
        """A DeepSpeed strategy without the `deepspeed` package is refused here, in one line naming the
        extra: raised while jsonargparse builds the strategy, the error would be one alternative of its
        union-type message (exit 1)."""
        section = self.config[self.config.subcommand] if self.config.get("subcommand") else self.config
        strategy = section.get("trainer.strategy")
        name = strategy if isinstance(strategy, str) else getattr(strategy, "class_path", "") or ""
        if "deepspeed" in name.lower():
            check_deepspeed_installed()
        skip_warm_start_of_a_checkpoint(section, self.config.get("subcommand"))
        self._move_run_folder(section)

    def _move_run_folder(self, section: Any) -> None:
        """With `--trainer.default_root_dir DIR` on the command line (`fit.sbatch`'s RUN_DIR), the trainer's
        paths under the run folder the config files name (logger `save_dir`, checkpoint `dirpath`) move under
        DIR (`run_folder.moved`): otherwise two jobs started from one folder write the same logs and
        `last.ckpt`, and `--ckpt_path newest` may resume the other's. Logged, once."""
        new = (flag_values(self._command_line, "--trainer.default_root_dir") or [None])[-1]
        if not new or not section.get("trainer"):
            return
        old = config_run_folders(self._config_files()) - {new.rstrip("/")}
        changes: list[str] = []
        moved(section["trainer"], old, new.rstrip("/"), changes)
        section["trainer.default_root_dir"] = new
        if changes:
            rank_zero_info(f"--trainer.default_root_dir {new}: the run's paths moved with it ({'; '.join(changes)})")

    def _config_files(self) -> list[str]:
        """The `--config` files of this command line, as absolute paths (what the run's checkpoints record)."""
        return [os.path.abspath(path) for path in flag_values(self._command_line, "--config", "-c")]

    def after_instantiate_classes(self) -> None:
        if self._trained_model is not None:
            ckpt_path = self.config[self.config.subcommand]["ckpt_path"]
            refuse_reshaping_options(self.model, ckpt_path, self._trained_model, self._model_section())

    def _model_section(self) -> dict[str, Any]:
        """The parsed `model:` section as plain data (what `config.yaml` saves)."""
        dumped = yaml.safe_load(self.parser.dump(self.config, skip_link_targets=False, skip_none=False))
        return dumped[self.config.subcommand]["model"] if self.config.get("subcommand") else dumped["model"]

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


def refuse_reshaping_options(
    model: L.LightningModule, ckpt_path: str, trained: dict[str, Any], given: dict[str, Any]
) -> None:
    """A `UsageError` naming the options that differ from the checkpoint's config when the model
    they build has a weight of another shape than the checkpoint's, or adds or removes weights (a
    layer more or less): Lightning's strict load would fail on them with a traceback. A module that
    loads non-strictly (GVE: trainable weights only) checks the names itself; a DeepSpeed directory
    is left to DeepSpeed's own check (ZeRO-3 shards hold no shapes). A module with a
    `refuse_checkpoint(checkpoint, path, other_class_only)` method (the dual encoder: a head of
    another class) refuses first, in its own, more specific words; a head of the same class whose
    settings reshape it is named here by the options that changed."""
    if not Path(ckpt_path).is_file():
        return
    checkpoint = torch.load(ckpt_path, map_location="cpu", mmap=True, weights_only=False)
    if hasattr(model, "refuse_checkpoint"):
        model.refuse_checkpoint(checkpoint, ckpt_path, other_class_only=True)
    stored = checkpoint.get("state_dict", {})
    built = model.state_dict()
    reshaped = [
        f"{key} {list(stored[key].shape)} -> {list(built[key].shape)}"
        for key in stored
        if key in built and stored[key].shape != built[key].shape
    ]
    if reshaped:
        raise UsageError(
            ckpt_path, f"{_changed_options(trained, given)} changes the weights' shapes ({_few(reshaped)})"
        )
    if not getattr(model, "strict_loading", True):
        return
    # the weights Lightning loads next, through the module's own key renames (older checkpoints' names)
    keys = model.load_state_dict(stored, strict=False)
    if keys.missing_keys or keys.unexpected_keys:
        added = f"adds {len(keys.missing_keys)} weights ({_few(keys.missing_keys)})" if keys.missing_keys else ""
        removed = f"removes {len(keys.unexpected_keys)} ({_few(keys.unexpected_keys)})" if keys.unexpected_keys else ""
        raise UsageError(
            ckpt_path, f"{_changed_options(trained, given)} {' and '.join(filter(None, (added, removed)))}"
        )


# model options a resumed run may change: how it is run (memory, devices, evaluation), not what it trains
RESUMABLE_OPTIONS = (
    "warm_start",
    "grad_cache",
    "evaluation",
    "nonfinite",
    "cross_device",
    "recipe_batch",
    "recipe_ranks",
)


def refuse_another_runs_checkpoint(ckpt_path: str | Path, config_files: list[str], model: dict, seed: Any) -> None:
    """A `UsageError` when `fit --ckpt_path newest` found a checkpoint of another run: one whose model config or
    seed differs from this run's (`TrainedModelConfig` records them with the run's `--config` files, named in the
    message; a checkpoint without the record is taken). Resuming it would continue another run, e.g. another table
    row or seed whose config put its `last.ckpt` in the same folder. What a resumed run may change is the rest:
    the trainer (epochs, callbacks, resources, strategy), the data loading, the `RESUMABLE_OPTIONS` of the model,
    and where its files are (a copied run folder)."""
    recorded = recorded_run(checkpoint_metadata(ckpt_path))
    if recorded is None:
        return
    files, trained, trained_seed = recorded
    changes = [
        f"--{key} {new!r} (its: {old!r})"
        for key, old, new in option_changes(trained, model, "model")
        if len(key.split(".")) < 3 or key.split(".")[2] not in RESUMABLE_OPTIONS
    ]
    if trained_seed != seed and type(seed) is int and type(trained_seed) is int:  # not `true` (a new draw each start)
        changes.append(f"--seed_everything {seed!r} (its: {trained_seed!r})")
    if not changes:
        return
    raise UsageError(
        str(ckpt_path),
        f"--ckpt_path newest: written by another run, of --config {' '.join(files) or '(none)'}; this run differs: "
        f"{_few(changes)}. Give this run its own --trainer.default_root_dir, or --ckpt_path FILE to start from "
        "that checkpoint on purpose",
    )


def skip_warm_start_of_a_checkpoint(section: Any, subcommand: str | None) -> None:
    """Clear `model.init_args.warm_start` when the run loads a checkpoint that holds every weight: `validate`,
    `test` and `predict` with any `--ckpt_path` (`newest` must find one there), `fit` with a checkpoint file (not
    `newest`/`last`, which may start afresh and then need the warm start). The warm start is a previous run's
    checkpoint that only initialises a fit; loading it first would need that file beside the trained one
    (a FileNotFoundError where it was not copied) for weights the checkpoint then replaces. Logged, once."""
    ckpt_path = section.get("ckpt_path")
    warm_start = section.get("model.init_args.warm_start") if section.get("model.init_args") else None
    if not ckpt_path or not warm_start or (subcommand == "fit" and not Path(str(ckpt_path)).is_file()):
        return
    section["model.init_args.warm_start"] = None
    rank_zero_info(
        f"--ckpt_path {ckpt_path}: model.init_args.warm_start {warm_start} is not loaded (the checkpoint holds "
        "every weight it would initialise)"
    )


DICT_OPTIONS = ("model.init_args.encoder.init_args.config",)  # options typed `dict` (a CLIPConfig)


def merged_dict_flags(parser, args: list[str]) -> list[str]:
    """`args` with each dotted flag into a dict option (`--model.init_args.encoder.init_args.config.
    vision_config.patch_size 8`) merged into that dict's value from the rest of the command line:
    jsonargparse would replace the whole dict by `{"vision_config": {"patch_size": "8"}}`, silently
    dropping every other key the config file set. Values are read as YAML scalars (the CLIP config
    types them further: `typed_clip_config`)."""
    deep: dict[str, list[tuple[list[str], str]]] = {}
    rest: list[str] = []
    at: dict[str, int] = {}
    i = 0
    while i < len(args):
        flag, value, step = _flag_and_value(args, i)
        option = next((o for o in DICT_OPTIONS if flag is not None and flag.startswith(f"--{o}.")), None)
        if option is None or value is None:
            rest.append(args[i])
            i += 1
            continue
        deep.setdefault(option, []).append((flag[len(option) + 3 :].split("."), value))
        at.setdefault(option, len(rest))
        i += step
    if not deep:
        return args
    parsed = parser.parse_args(rest)
    prefix = f"{parsed.subcommand}." if parsed.get("subcommand") else ""
    for option in sorted(deep, key=lambda o: at[o], reverse=True):
        merged = copy.deepcopy(parsed.get(f"{prefix}{option}") or {})
        for keys, value in deep[option]:
            leaf = merged
            for key in keys[:-1]:
                leaf = leaf.setdefault(key, {})
            leaf[keys[-1]] = yaml.safe_load(value)
        rest[at[option] : at[option]] = [f"--{option}", json.dumps(merged)]
    return rest


def _flag_and_value(args: list[str], i: int) -> tuple[str | None, str | None, int]:
    """(flag, value, number of args used) of `args[i]`: `--k=v` or `--k v`; (None, None, 1) otherwise."""
    arg = args[i]
    if not arg.startswith("--"):
        return None, None, 1
    if "=" in arg:
        flag, value = arg.split("=", 1)
        return flag, value, 1
    return (arg, args[i + 1], 2) if i + 1 < len(args) else (arg, None, 1)


def _changed_options(trained: dict[str, Any], given: dict[str, Any]) -> str:
    changed = [f"--{key} {new!r} (trained: {old!r})" for key, old, new in option_changes(trained, given, "model")]
    return "; ".join(changed) if changed else "the model config differs from the one trained: it"


def _few(names: list[str], shown: int = 3) -> str:
    return ", ".join(names[:shown]) + (", ..." if len(names) > shown else "")


def option_changes(trained: Any, given: Any, prefix: str) -> list[tuple[str, Any, Any]]:
    """(dotted option, trained value, given value) for every leaf where the two configs differ."""
    if isinstance(trained, dict) and isinstance(given, dict):
        changes = []
        for key in sorted(set(trained) | set(given), key=str):
            changes += option_changes(trained.get(key), given.get(key), f"{prefix}.{key}")
        return changes
    return [] if trained == given else [(prefix, trained, given)]


def _subcommand_and_checkpoint(args: list[str] | tuple[str, ...], subcommands) -> tuple[str | None, str | None]:
    """The subcommand and the `--ckpt_path` value of a raw command line (None where absent)."""
    subcommand = next((arg for arg in args if arg in subcommands), None)
    return subcommand, (flag_values(args, "--ckpt_path") or [None])[-1]


def flag_values(args: list[str] | tuple[str, ...], *names: str) -> list[str]:
    """Every value a raw command line gives the flags `names` (`--name VALUE` or `--name=VALUE`), in order."""
    values = []
    for i, arg in enumerate(args):
        if arg in names and i + 1 < len(args):
            values.append(args[i + 1])
        elif arg.startswith(tuple(f"{name}=" for name in names)):
            values.append(arg.split("=", 1)[1])
    return values


# ---- reading a training config -------------------------------------------------------------------
CONFIG_HEADER = "# lit-retrieval "  # the first line of every config the CLI prints (`init_parser`'s dump_header)


class _ParseOnly(RetrievalCLI):
    def instantiate_classes(self) -> None:
        """Nothing is built: the caller builds what it needs from the parsed config."""


def training_config(paths: list[str]) -> Any:
    """The composed training config (later files override earlier ones) as `lit-retrieval fit` parses
    it, with nothing built: a jsonargparse namespace (`config.data`, `config.model`, ...)."""
    args = [item for path in paths for item in ("--config", path)]
    # Lightning warns that sys.argv holds arguments besides `args`: they are the calling command's
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*args parameter is intended to run from within Python")
        return _ParseOnly(args=args, run=False).config


def model_option(config: Any, *keys: str) -> Any:
    """`config.model.init_args.<keys...>` of a parsed config, None where any level is absent."""
    node = getattr(config, "model", None)
    for key in ("init_args", *keys):
        node = node.get(key) if node is not None and hasattr(node, "get") else None
    return node


def build_datamodule(config: Any) -> L.LightningDataModule:
    """The data module of a parsed training config (`training_config`), built alone."""
    from jsonargparse import ArgumentParser, Namespace

    parser = ArgumentParser(exit_on_error=False)
    parser.add_subclass_arguments(L.LightningDataModule, "data")
    return parser.instantiate(Namespace(data=config.data)).data


def build_module(path: str) -> tuple[L.LightningModule, dict[str, Any]]:
    """The LightningModule the training config at `path` describes (no trainer run), and its data
    module's settings as parsed (`data.init_args`, defaults filled in: frames, image size, shots)."""
    cli = RetrievalCLI(args=["--config", path, "--trainer.logger", "false"], run=False)
    data = cli.config.get("data")
    settings = data.get("init_args") if data is not None and hasattr(data, "get") else None
    return cli.model, (settings.as_dict() if settings is not None else {})


class _ParserBuilt(Exception):
    """Carries the CLI's parser out of `LightningCLI.__init__` before it parses anything."""


@functools.cache
def cli_parser() -> Any:
    """The argument parser of `lit-retrieval fit/test/...` (this class's own), built once: building
    it costs as much as parsing a config, and a plan parses dozens."""

    class ParserOnly(RetrievalCLI):
        def parse_arguments(self, parser, args) -> None:  # the hook LightningCLI calls after setup_parser
            raise _ParserBuilt(parser)

    try:
        ParserOnly(args=[])
    except _ParserBuilt as built:
        return built.args[0]
    raise RuntimeError("LightningCLI did not call parse_arguments")


def resolved_training_config(configs: list[str], flags: list[str], where: str) -> dict[str, Any]:
    """The fit config that `lit-retrieval fit --config C1 --config C2 ... FLAGS` would run (`flags`:
    `--KEY VALUE` pairs), as `--print_config` prints it; a missing file or a parse error is a
    `UsageError` naming `where`."""
    missing = [c for c in configs if not Path(c).is_file()]
    if missing:
        raise UsageError(where, f"config file(s) not found: {missing} (paths are relative to {Path.cwd()})")
    args = ["fit", *(a for c in configs for a in ("--config", c)), *flags, "--print_config"]
    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = 0
    parser = cli_parser()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            parser.parse_args(args)
        except SystemExit as exit_:
            code = exit_.code
        except Exception as error:  # noqa: BLE001 - reported with the row that caused it
            raise UsageError(where, f"the configs do not parse: {error}") from None
    if code not in (0, None):
        raise UsageError(where, f"the configs do not parse: {err.getvalue().strip().splitlines()[-1:]}")
    printed = out.getvalue()  # from the config's header on: a library imported while parsing may print first
    return yaml.safe_load(printed[printed.find(CONFIG_HEADER) :] if CONFIG_HEADER in printed else printed)
