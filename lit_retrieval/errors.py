"""`InputError`: the base of every error that is the user's input, not a bug.

`lit-retrieval` (cli.main) prints any `InputError` as one line,
`lit-retrieval COMMAND: PATH[: record R]: reason`, and exits with status 2 (no traceback unless
`--debug` or `LIT_RETRIEVAL_DEBUG=1`). The project's specific errors derive from it and keep their
names and standard bases: `AnnotationError` (and `ItemError`) are `ValueError`s, `VideoDecodeError`
and `CorruptCheckpointError` are `RuntimeError`s, `DiskFull` an `OSError`, so existing `except`
clauses still catch them. Lightning's `MisconfigurationException` counts as a `ConfigError` where
it is the config's (raised while the Trainer is built, or by a Lightning callback or logger).
"""

from __future__ import annotations

import os
import re
import sys
import traceback

DEBUG_VARIABLE = "LIT_RETRIEVAL_DEBUG"

# An error raised in a DataLoader worker process reaches the main process as a copy made from a
# message holding the worker's traceback ("Caught NAME in DataLoader worker process N. Original
# Traceback ... module.NAME: message"), or as a RuntimeError with that message when NAME cannot be
# built from one string.
_WORKER_ERROR = re.compile(r"Caught (\w+) in DataLoader worker process")
_TRACEBACK_LAST_LINE = re.compile(r"^[\w.]+: (.*)$")


# OSErrors that are about a path the user gave, also when raised with a message only
_PATH_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)


class InputError(Exception):
    """Bad user input; the message names the path (and the record) and says what is wrong."""


class ConfigError(InputError, ValueError):
    """A config (YAML or command-line value) that cannot be used; the message names the key."""


class UsageError(InputError, ValueError):
    """A command-line argument of the wrong kind (e.g. a video where a list file is expected)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class DiskFull(InputError, OSError):
    """A write that failed for want of space (ENOSPC, or EDQUOT: over quota); the user fixes it by
    making room, and what was written before is kept."""


def _input_error_names(cls: type = InputError) -> set[str]:
    names = {cls.__name__}
    for sub in cls.__subclasses__():
        names |= _input_error_names(sub)
    return names


def input_cause(err: BaseException) -> InputError | None:
    """`err` or the first of its direct causes that is an `InputError` (e.g. a data module's
    `ConfigError` that jsonargparse re-raised as a `ValueError`), else the first that is Lightning's
    config error (`lightning_config_error`), as a `ConfigError`, else None."""
    chain: list[BaseException] = []
    cause: BaseException | None = err
    while cause is not None:
        chain.append(cause)
        cause = cause.__cause__
    found = next((c for c in chain if isinstance(c, InputError)), None)
    return found or next(filter(None, map(lightning_config_error, chain)), None)


# Where a MisconfigurationException is the config's: file (under lightning/pytorch/) and function
# (None: any) -> the config section it names. Raised elsewhere (a hook's return value, `self.log`
# misuse), or beneath other code that such a frame called, it is a bug in the code and keeps its
# traceback.
_LIGHTNING_CONFIG_ORIGINS = (
    ("trainer/trainer.py", "__init__", "trainer"),
    ("callbacks/", None, "trainer.callbacks"),
    ("loggers/", None, "trainer.logger"),
)


def lightning_config_error(err: BaseException) -> ConfigError | None:
    """Lightning's `MisconfigurationException` raised while `Trainer.__init__` checks its arguments
    (`max_epochs: -5`, devices, strategy, ...) or by a Lightning callback or logger (e.g.
    `ModelCheckpoint(save_top_k=-5)`) with only Lightning's frames beneath, as a `ConfigError` naming
    the section (and the callback's class) before Lightning's message, which names the argument;
    None for any other error."""
    exceptions = sys.modules.get("lightning.fabric.utilities.exceptions")  # never imported: not Lightning's
    if exceptions is None or not isinstance(err, exceptions.MisconfigurationException):
        return None
    section = None
    for frame, _ in traceback.walk_tb(err.__traceback__):  # the innermost matching frame names it
        path = frame.f_code.co_filename.replace(os.sep, "/")
        if "/lightning/" not in path:  # other code (a module's hook) called beneath it: not the config's
            section = None
        for where, function, name in _LIGHTNING_CONFIG_ORIGINS:
            if f"/lightning/pytorch/{where}" in path and function in (None, frame.f_code.co_name):
                owner = frame.f_locals.get("self")
                section = f"{name} ({type(owner).__name__})" if name != "trainer" and owner is not None else name
    return None if section is None else ConfigError(f"{section}: {err}")


def input_error_line(err: BaseException) -> str | None:
    """The one-line message of `err` when it is the user's input error, else None: an `InputError`
    (also one raised in a DataLoader worker, or the direct cause of another error), or an `OSError`
    naming a file (missing, unreadable)."""
    err = input_cause(err) or err
    text = str(err)
    worker = _WORKER_ERROR.search(text)
    if worker:
        if worker.group(1) not in _input_error_names():
            return None
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        match = _TRACEBACK_LAST_LINE.match(lines[-1])
        text = match.group(1) if match else lines[-1]
    elif isinstance(err, OSError) and not isinstance(err, InputError):
        if err.filename is None and not isinstance(err, _PATH_ERRORS):
            return None
        text = f"{err.filename}: {err.strerror or type(err).__name__}" if err.filename is not None else str(err)
    elif not isinstance(err, InputError):
        return None
    return " ".join(text.split())


def debug_requested(argv: list[str]) -> bool:
    """True when `--debug` is in `argv` or `LIT_RETRIEVAL_DEBUG` is set to a true value."""
    return "--debug" in argv or os.environ.get(DEBUG_VARIABLE, "").lower() in ("1", "true", "yes")


def check_at_least(prefix: str, least: int, **values: object) -> None:
    """Raise `ConfigError` naming `prefix.key` for the first value that is not an integer >= `least`
    (config values checked when a class is built, so LightningCLI refuses them before any work)."""
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ConfigError(f"{prefix}.{key} must be an integer >= {least}, got {value!r}")
