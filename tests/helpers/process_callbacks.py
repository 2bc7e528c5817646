"""A callback recording what a rank's process is: the fork server's tests (tests/repository/test_cli_server.py)
compare a DDP launch's ranks with what a console launch gives them."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import lightning as L

LAUNCH_KEYS = ("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


class RecordProcess(L.Callback):
    """At the start of fit writes `<out>/rank<global rank>.json`: pid, parent pid, process group, working
    directory, `sys.argv[1:]`, the `__main__` module's name and file, and the launch variables Lightning sets."""

    def __init__(self, out: str) -> None:
        self.out = out

    def on_fit_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        record = {
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "pgid": os.getpgid(0),
            "cwd": os.getcwd(),
            "argv": sys.argv[1:],
            "main": getattr(sys.modules["__main__"].__spec__, "name", None),  # None for `python SCRIPT`
            "main_file": getattr(sys.modules["__main__"], "__file__", None),
            "env": {key: os.environ.get(key) for key in LAUNCH_KEYS},
        }
        Path(self.out).mkdir(parents=True, exist_ok=True)
        (Path(self.out) / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))


class FailOnRank(L.Callback):
    """Raises at the start of training on one rank only (the others go on into their first collective)."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if trainer.global_rank == self.rank:
            raise RuntimeError(f"rank {self.rank} fails on purpose")
