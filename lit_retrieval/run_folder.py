"""Every path of a run under its run folder.

A config names its run folder in `trainer.default_root_dir` and usually again in the logger's `save_dir` and a
`ModelCheckpoint`'s `dirpath` (`runs/melon_clip4clip`, `runs/melon_clip4clip/checkpoints`). When a launcher moves
the run elsewhere (`fit.sbatch`'s `--trainer.default_root_dir RUN_DIR`, a grid's run folder), every path under
the config's folder moves with it (`moved`), so two jobs started from one folder never share logs or a
`last.ckpt`. Paths outside that folder (a warm start, the data) stay as they are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from jsonargparse import Namespace


def config_run_folders(config_files: list[str]) -> set[str]:
    """The run folders `config_files` name: each one's `trainer.default_root_dir`, and a logger's `save_dir` that
    is not inside one of those (one inside moves with it: `runs/x/tb` -> `RUN_DIR/tb`); `.` and empty values left
    out. A file that is not a YAML mapping names none (the CLI reports it)."""
    roots, saves = set(), set()
    for path in config_files:
        try:
            config = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError):
            continue
        trainer = config.get("trainer") if isinstance(config, dict) else None
        if not isinstance(trainer, dict):
            continue
        loggers = trainer.get("logger") if isinstance(trainer.get("logger"), list) else [trainer.get("logger")]
        save_dirs = [(lg.get("init_args") or {}).get("save_dir") for lg in loggers if isinstance(lg, dict)]
        for folder, found in ((trainer.get("default_root_dir"), roots), *((s, saves) for s in save_dirs)):
            if isinstance(folder, str) and folder.strip() not in ("", "."):
                found.add(folder.rstrip("/"))
    return roots | {s for s in saves if not any(s == r or s.startswith(r + "/") for r in roots)}


def moved(value: Any, old_folders: set[str], new_folder: str, changes: list[str] | None = None) -> Any:
    """`value` (a config: dicts, lists, jsonargparse namespaces, strings) with every path equal to or under one of
    `old_folders` moved under `new_folder` (the longest old folder first); namespaces are changed in place.
    Each path moved is appended to `changes` (when given) as `old -> new`."""
    if isinstance(value, Namespace):
        for key, item in vars(value).items():
            setattr(value, key, moved(item, old_folders, new_folder, changes))
        return value
    if isinstance(value, dict):
        return {k: moved(v, old_folders, new_folder, changes) for k, v in value.items()}
    if isinstance(value, list):
        return [moved(v, old_folders, new_folder, changes) for v in value]
    if isinstance(value, str):
        for prefix in sorted(old_folders, key=len, reverse=True):
            if value == prefix or value.startswith(prefix + "/"):
                if changes is not None:
                    changes.append(f"{value} -> {new_folder + value[len(prefix) :]}")
                return new_folder + value[len(prefix) :]
    return value
