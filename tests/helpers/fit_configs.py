"""The LightningCLI config of a small CLIP4Clip-meanP fit on the test corpus, shared by the tests
that drive `lit-retrieval fit` end to end."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def clip_fit_config(
    tiny_clip: Path,
    corpus: Path,
    trainer: dict[str, Any],
    model: dict[str, Any] | None = None,
    data: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`trainer` is merged over CPU defaults; `model` and `data` add to the module's and the data
    module's init_args (2 frames of 32 px, batches of 4)."""
    return {
        "seed_everything": 0,
        "trainer": {"accelerator": "cpu", **trainer},
        "model": {
            "class_path": "lit_retrieval.modules.DualEncoderRetrieval",
            "init_args": {
                "encoder": {
                    "class_path": "lit_retrieval.models.encoders.CLIPEncoder",
                    "init_args": {"pretrained": str(tiny_clip)},
                },
                "head": {"class_path": "lit_retrieval.models.heads.MeanPHead"},
                **(model or {}),
            },
        },
        "data": {
            "class_path": "lit_retrieval.data.MultiEventDataModule",
            "init_args": {
                "annotation": str(corpus / "annotations.json"),
                "num_frames": 2,
                "image_size": 32,
                "batch_size": 4,
                **(data or {}),
            },
        },
    }


def clean_launch_env(extra_path: str) -> dict[str, str]:
    """The environment for launching `lit-retrieval` in a subprocess: without the rank, port and
    Slurm variables an earlier in-process fit may have left in `os.environ` (a child DDP launch
    would read them and wait for peers that never come), with `extra_path` on PYTHONPATH."""
    import os

    leaked = (
        "MASTER_ADDR",
        "MASTER_PORT",
        "NODE_RANK",
        "LOCAL_RANK",
        "GLOBAL_RANK",
        "WORLD_SIZE",
        "RANK",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
    )
    env = {
        k: v for k, v in os.environ.items() if k not in leaked and not k.startswith(("SLURM_", "PL_", "TORCHELASTIC_"))
    }
    env["PYTHONPATH"] = os.pathsep.join([extra_path, env.get("PYTHONPATH", "")])
    return env


def base_trainer(devices: int, max_epochs: int, train_batches: int) -> dict:
    """The trainer of a grid plan's base config: its own run folder (runs/base), which the grid must move per run."""
    return {
        "devices": devices,
        "max_epochs": max_epochs,
        "limit_train_batches": train_batches,
        "limit_val_batches": 0,
        "default_root_dir": "runs/base",
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "logger": {
            "class_path": "lightning.pytorch.loggers.CSVLogger",
            "init_args": {"save_dir": "runs/base", "name": "logs", "version": "fit"},
        },
        "callbacks": [
            {
                "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                "init_args": {"dirpath": "runs/base/checkpoints", "save_last": True, "save_top_k": 0},
            }
        ],
    }


def run_grid_here(work: Path, args: list[str]) -> int:
    """`lit-retrieval grid ARGS` in-process, in the folder `work` and in the clean launch environment
    (its fit/test steps then start as from a user's shell, forked by the fork server: `grid_steps_forked`);
    cwd and environment restored after."""
    import os

    from helpers.cli_server import grid_steps_forked
    from lit_retrieval.commands import run_command

    previous, env = os.getcwd(), os.environ.copy()
    launch = clean_launch_env(str(Path(__file__).resolve().parents[1]))  # keeps PATH and this checkout's PYTHONPATH
    os.chdir(work)
    os.environ.clear()
    os.environ.update(launch)
    try:
        with grid_steps_forked():
            return run_command("grid", args)
    finally:
        os.chdir(previous)
        os.environ.clear()
        os.environ.update(env)
