"""`SafeCheckpointIO`: checkpoints that are never left half-written, and a clear error for one that is.

Saving writes `<name>.partial` next to the target, flushes it to disk and renames it over the
target in one step, so a crash or a full disk while writing keeps the previous checkpoint of that
name intact (Lightning's default writes into the target directly); a full disk (or quota) is a
`DiskFull`, one line through the CLI. Loading turns a truncated or corrupt file into a
`CorruptCheckpointError` naming the file and the reason, instead of a pickle or zip traceback.
`lit-retrieval` installs it on every strategy that uses a checkpoint IO (DeepSpeed writes its own
directories). `newest_resume_checkpoint` picks what a run resumes from: the newest, by stored
global step, of Lightning's Slurm `hpc_ckpt_*.ckpt` and the last checkpoints.
"""

from __future__ import annotations

import errno
import io
import logging
import os
import pickle
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.types import _PATH
from lightning.pytorch.plugins.io import TorchCheckpointIO

from lit_retrieval.errors import DiskFull, InputError

log = logging.getLogger(__name__)


class CorruptCheckpointError(InputError, RuntimeError):
    """A checkpoint file that cannot be read; the message names it and says why."""


REQUIRED_KEYS = ("state_dict",)
FULL_DISK = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exceeded"}


def read_checkpoint(path: _PATH, map_location: Any = None, weights_only: bool | None = None) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: checkpoint not found")
    if path.stat().st_size == 0:
        raise CorruptCheckpointError(f"{path}: empty checkpoint file (an interrupted write?)")
    if zipfile.is_zipfile(path):
        check_checkpoint_file(path)  # another zip than a torch archive is named as such
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=bool(weights_only))
    except (EOFError, RuntimeError, zipfile.BadZipFile, pickle.UnpicklingError, ValueError) as err:
        if isinstance(err, pickle.UnpicklingError) and "Weights only load failed" in str(err):
            raise
        raise CorruptCheckpointError(
            f"{path}: corrupt or partial checkpoint ({type(err).__name__}: {str(err)[:200]}); "
            "resume from an earlier one"
        ) from None
    missing = [k for k in REQUIRED_KEYS if not isinstance(checkpoint, dict) or k not in checkpoint]
    if missing:
        raise CorruptCheckpointError(f"{path}: not a Lightning checkpoint (missing {missing})")
    return checkpoint


def check_checkpoint_file(path: _PATH) -> None:
    """Raise `CorruptCheckpointError` unless `path` is a complete torch zip archive (checked
    without unpickling: the central directory is read, which a truncated file lacks, and must list
    the pickle torch writes, which another zip lacks)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: checkpoint not found")
    if path.stat().st_size == 0:
        raise CorruptCheckpointError(f"{path}: empty checkpoint file (an interrupted write?)")
    if not zipfile.is_zipfile(path):
        raise CorruptCheckpointError(
            f"{path}: corrupt or partial checkpoint (not a complete torch archive); resume from an earlier one"
        )
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError, ValueError) as err:
        raise CorruptCheckpointError(f"{path}: corrupt or partial checkpoint ({err})") from None
    if not any(name == "data.pkl" or name.endswith("/data.pkl") for name in names):
        raise CorruptCheckpointError(f"{path}: a zip archive but not a torch checkpoint (no data.pkl)")


class SafeCheckpointIO(TorchCheckpointIO):
    def save_checkpoint(self, checkpoint: dict[str, Any], path: _PATH, storage_options: Any | None = None) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        try:
            with open(partial, "wb") as handle:
                handle.write(buffer.getbuffer())
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as err:
            partial.unlink(missing_ok=True)
            kept = f"; the previous {path.name} is intact" if path.exists() else ""
            if err.errno in FULL_DISK:
                raise DiskFull(
                    f"could not write checkpoint {path}: {FULL_DISK[err.errno]}{kept}; make room and run again"
                ) from err
            raise OSError(err.errno, f"could not write checkpoint {path}: {err}{kept}") from err
        os.replace(partial, path)

    def load_checkpoint(
        self, path: _PATH, map_location: Any = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        return read_checkpoint(
            path, map_location=map_location or (lambda storage, loc: storage), weights_only=weights_only
        )


def checkpoint_metadata(path: _PATH) -> dict[str, Any]:
    """The top-level entries of a Lightning checkpoint (`global_step`, `hyper_parameters`, ...): a
    file, or a DeepSpeed checkpoint directory (whose `<tag>/*model_states.pt` holds Lightning's keys).
    Tensors are memory-mapped, not read, so this is cheap for a checkpoint of billions of weights."""
    path = Path(path)
    if path.is_dir():
        states = sorted(path.glob("*/*model_states.pt"))
        if not states:
            raise CorruptCheckpointError(f"{path}: a directory without DeepSpeed model states (*/*model_states.pt)")
        path = states[0]
    check_checkpoint_file(path)
    try:
        checkpoint = torch.load(path, map_location="cpu", mmap=True, weights_only=False)
    except (EOFError, RuntimeError, zipfile.BadZipFile, pickle.UnpicklingError, ValueError) as err:
        raise CorruptCheckpointError(f"{path}: corrupt or partial checkpoint ({type(err).__name__}: {err})") from None
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("global_step"), int):
        raise CorruptCheckpointError(f"{path}: not a Lightning checkpoint (no global_step)")
    return checkpoint


def checkpoint_step(path: _PATH) -> int:
    """The `global_step` stored in a Lightning checkpoint file or DeepSpeed checkpoint directory."""
    return checkpoint_metadata(path)["global_step"]


def newest_checkpoint(candidates: Iterable[_PATH]) -> Path | None:
    """The candidate holding the largest `global_step` (the later-written one on a tie), or None.
    Step, not modification time, decides: a copied or touched file keeps its step. A candidate
    that cannot be read is skipped with a warning (an older readable one resumes instead)."""
    steps: dict[Path, tuple[int, float]] = {}
    for candidate in map(Path, candidates):
        if not candidate.exists() or candidate in steps:
            continue
        try:
            steps[candidate] = (checkpoint_step(candidate), candidate.stat().st_mtime)
        except (CorruptCheckpointError, OSError) as err:
            log.warning("not resuming from %s: %s", candidate, err)
    return max(steps, key=steps.__getitem__) if steps else None


def newest_resume_checkpoint(run_dir: _PATH, last_checkpoints: Iterable[_PATH] | None = None) -> Path | None:
    """The checkpoint a run in `run_dir` resumes from: the newest (by `global_step`) of
    Lightning's Slurm `hpc_ckpt_*.ckpt` in `run_dir` and the last checkpoints, which are
    `last_checkpoints` if given, else every `last*.ckpt` under `run_dir`. None: start afresh.

    Why: Lightning resumes the highest-numbered hpc checkpoint whenever one exists under Slurm,
    although a later stop (SIGTERM, an interval checkpoint) may have written a newer last.ckpt."""
    run_dir = Path(run_dir)
    last = run_dir.rglob("last*.ckpt") if last_checkpoints is None else last_checkpoints
    return newest_checkpoint([*run_dir.glob("hpc_ckpt_*.ckpt"), *last])
