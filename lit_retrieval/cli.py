"""`lit-retrieval`: LightningCLI for fit/validate/test/predict plus the project's own subcommands.

    lit-retrieval fit --config configs/quickstart.yaml
    lit-retrieval test --config configs/quickstart.yaml --ckpt_path runs/quickstart/checkpoints/last.ckpt
    lit-retrieval synth --out data/synthetic --num-videos 1200 --seed 0
    lit-retrieval metrics SIM.npy [--text-video IDX.npy]
    lit-retrieval metrics --ensemble A.npy B.npy [--weights 0.5 0.5]
    lit-retrieval validate-melon ANNOTATION.json [--videos DIR] [--json]

Bad input ends as one line on stderr, `lit-retrieval COMMAND: PATH[: record R]: reason`, exit
status 2 (`errors.InputError`); `--debug` (anywhere on the line) or `LIT_RETRIEVAL_DEBUG=1` shows
the traceback instead.

`lightning fit --config FILE` (and validate / test / predict) is the same CLI under the name the
project's design card uses (`lightning_main`); the `lightning` package itself installs no
`lightning` command (only `fabric`), so this project's console script provides it.

A subcommand's module is imported only when it is dispatched (`commands.COMMANDS`), so `fit` does
not import faiss, PySceneDetect or the HTTP stack, and Lightning only for the trainer commands:
`lit-retrieval --help` is this module's own list of commands (`lit-retrieval fit --help` is LightningCLI's).
"""

from __future__ import annotations

import sys

from lit_retrieval.commands import COMMANDS, run_command
from lit_retrieval.errors import ConfigError, debug_requested, input_cause, input_error_line

TRAINER_COMMANDS = ("fit", "validate", "test", "predict")


def _usage() -> str:
    names = ", ".join((*TRAINER_COMMANDS, *COMMANDS))
    return f"usage: lit-retrieval {{{names}}} ...\n(`lit-retrieval fit --help` for the trainer commands' options)"


def _help() -> str:
    return (
        "usage: lit-retrieval COMMAND ...\n\n"
        f"trainer commands (LightningCLI, --config FILE.yaml): {', '.join(TRAINER_COMMANDS)}\n"
        f"other commands (`lit-retrieval COMMAND --help`): {', '.join(COMMANDS)}\n"
        "shipped configs: `lit-retrieval configs list`, `lit-retrieval configs copy [NAME ...] --to DIR`\n"
        "bad input ends as one line on stderr with exit status 2; --debug shows the traceback"
    )


def _config_files(argv: list[str]) -> list[str]:
    """The config files named on a trainer command line (`--config X`, `-c X`, `--config=X`)."""
    found = [value for flag, value in zip(argv, argv[1:]) if flag in ("--config", "-c")]
    return found + [arg.split("=", 1)[1] for arg in argv if arg.startswith("--config=")]


def _dispatch(argv: list[str]) -> int | None:
    if not argv:
        print(_usage(), file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help"):
        print(_help())
        return 0
    if argv[0] in COMMANDS:
        return run_command(argv[0], argv[1:])
    if not argv[0].startswith("-") and argv[0] not in TRAINER_COMMANDS:
        print(f"lit-retrieval: unknown command {argv[0]!r}\n{_usage()}", file=sys.stderr)
        return 2
    from lit_retrieval.retrieval_cli import RetrievalCLI

    RetrievalCLI(args=None if argv == sys.argv[1:] else argv)  # None: LightningCLI reads sys.argv itself
    return None


def main(argv: list[str] | None = None) -> None:
    """Run a command. Bad input (any `InputError`, a missing file) ends as one line on stderr,
    `lit-retrieval COMMAND: PATH[: record R]: reason`, with exit status 2; `--debug` or
    `LIT_RETRIEVAL_DEBUG=1` re-raises it with its traceback instead."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = debug_requested(argv)
    argv = [arg for arg in argv if arg != "--debug"]
    command = argv[0] if argv and not argv[0].startswith("-") else ""
    try:
        code = _dispatch(argv)
    except Exception as err:  # noqa: BLE001 - only input errors are reported; the rest re-raise
        line = input_error_line(err)
        if line is None or debug:
            raise
        if isinstance(input_cause(err), ConfigError) and command in TRAINER_COMMANDS and _config_files(argv):
            line = f"{', '.join(_config_files(argv))}: {line}"
        print(f"lit-retrieval {command}: {line}" if command else f"lit-retrieval: {line}", file=sys.stderr)
        sys.exit(2)
    if code is not None:
        sys.exit(code)


def lightning_main(argv: list[str] | None = None) -> None:
    """`lightning fit|validate|test|predict ...`: the trainer commands of `main` (the project's other
    commands stay under `lit-retrieval`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((arg for arg in argv if arg != "--debug"), None)
    if command not in TRAINER_COMMANDS:
        usage = (
            f"usage: lightning {{{','.join(TRAINER_COMMANDS)}}} --config FILE ...\n"
            "(other commands: lit-retrieval --help)"
        )
        if command in ("-h", "--help"):
            print(usage)
            sys.exit(0)
        print(
            f"lightning: {'no command' if command is None else f'unknown command {command!r}'}\n{usage}",
            file=sys.stderr,
        )
        sys.exit(2)
    main(argv)
