"""`lit-retrieval`: LightningCLI for fit/validate/test/predict plus the project's own subcommands.

    lit-retrieval fit --config configs/quickstart.yaml
    lit-retrieval test --config configs/quickstart.yaml --ckpt_path runs/quickstart/checkpoints/last.ckpt
    lit-retrieval synth --out data/synthetic --num-videos 1200 --seed 0
    lit-retrieval metrics SIM.npy [--text-video IDX.npy]

A subcommand's module is imported only when it is dispatched (`commands.COMMANDS`), so `fit` does
not import faiss, PySceneDetect or the HTTP stack.
"""

from __future__ import annotations

import sys

from lit_retrieval.commands import COMMANDS, run_command

TRAINER_COMMANDS = ("fit", "validate", "test", "predict")


def _usage() -> str:
    names = ", ".join((*TRAINER_COMMANDS, *COMMANDS))
    return f"usage: lit-retrieval {{{names}}} ...\n(`lit-retrieval fit --help` for the trainer commands' options)"


def main(argv: list[str] | None = None) -> None:
    given = argv
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in COMMANDS:
        sys.exit(run_command(argv[0], argv[1:]))
    if argv and not argv[0].startswith("-") and argv[0] not in TRAINER_COMMANDS:
        print(f"lit-retrieval: unknown command {argv[0]!r}\n{_usage()}", file=sys.stderr)
        sys.exit(2)
    from lit_retrieval.retrieval_cli import RetrievalCLI

    RetrievalCLI(args=given)
