"""`TrainedModelConfig`: every checkpoint records the full `model:` section it was trained with.

Lightning stores a module's `hyper_parameters`, which leave out the arguments a module does not
save (the dual encoder's `encoder`, `head`, `event_loss`: sub-modules). `lit-retrieval
validate/test/predict --ckpt_path` takes this record as the base of the model's config and applies
the user's `--config` files and `--model...` flags over it (`RetrievalCLI`), so a checkpoint alone
rebuilds the model it holds, and what the user gives at test time wins.
"""

from __future__ import annotations

import copy
from typing import Any

import lightning as L

CHECKPOINT_KEY = "lit_retrieval_model_config"
CONFIG_FILES_KEY = "lit_retrieval_config_files"  # the run's `--config` files (absolute paths), in order
SEED_KEY = "lit_retrieval_seed"  # the run's `seed_everything`


class TrainedModelConfig(L.Callback):
    """Writes `model_config` (a `{class_path, init_args}` dict) into every checkpoint under
    `CHECKPOINT_KEY`, and the run's `--config` files and seed under `CONFIG_FILES_KEY` and `SEED_KEY` (whose run
    wrote it: `--ckpt_path newest` refuses another run's); DeepSpeed keeps them with Lightning's other keys in its
    model-states file."""

    def __init__(self, model_config: dict[str, Any], config_files: list[str] | None = None, seed: Any = None) -> None:
        self.model_config = copy.deepcopy(model_config)
        self.config_files = list(config_files or [])
        self.seed = seed

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        checkpoint[CHECKPOINT_KEY] = copy.deepcopy(self.model_config)
        checkpoint[CONFIG_FILES_KEY] = list(self.config_files)
        checkpoint[SEED_KEY] = self.seed


def trained_model_config(checkpoint: dict[str, Any]) -> dict[str, Any] | None:
    """The `model:` section a checkpoint was trained with: the full record when the checkpoint has
    one, else the module's class and saved hyper-parameters (checkpoints written before the record,
    or by a LightningCLI without it), else None."""
    if CHECKPOINT_KEY in checkpoint:
        return copy.deepcopy(checkpoint[CHECKPOINT_KEY])
    hparams = dict(checkpoint.get("hyper_parameters") or {})
    hparams.pop("_instantiator", None)
    class_path = hparams.pop("_class_path", None)
    return {"class_path": class_path, "init_args": hparams} if class_path else None


def recorded_run(checkpoint: dict[str, Any]) -> tuple[list[str], dict[str, Any], Any] | None:
    """(`--config` files, `model:` section, seed) of the run that wrote `checkpoint`; None for a checkpoint
    written before these were recorded."""
    files = checkpoint.get(CONFIG_FILES_KEY)
    if not isinstance(files, list) or CHECKPOINT_KEY not in checkpoint:
        return None
    return list(files), checkpoint[CHECKPOINT_KEY], checkpoint.get(SEED_KEY)
