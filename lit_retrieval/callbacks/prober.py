"""Psi_t, the prober of epoch t shared by the Modality Pyramid and the per-epoch hard-negative mining.

GVE Sec. 3.3: "At the beginning of each training epoch t, we estimate the alignment level of every task
k using a prober model Psi_t. For t=1, Psi_1 is a strong off-the-shelf embedder (e.g., GME-7B); for
t>1, Psi_t is the GVE checkpoint from the end of epoch t-1", and the hard negatives are mined "using
the same prober Psi_t". Psi_1 is the data module's `prober_path` (one key for both callbacks and every
row of a plan); at the start of a later epoch the model being trained is the end of the previous one.
"""

from __future__ import annotations

import lightning as L

from lit_retrieval.data.gve.multitask import PROBER_IS_MODEL
from lit_retrieval.errors import ConfigError
from lit_retrieval.models.gve.embedder import GVEEmbedder


PROBING_CALLBACKS = ("ModalityPyramid", "HardNegativeMining")  # the callbacks that probe with Psi_t


def unset_prober_reason(who: str) -> str:
    return (
        f"data.init_args.prober_path is not set, and {who} probes the first epoch with it: GVE Sec. 3.3 "
        "'For t=1, Psi_1 is a strong off-the-shelf embedder (e.g., GME-7B)'; give a local GME/Qwen2-VL "
        f"directory, or '{PROBER_IS_MODEL}' to let the model probe itself (not the paper's)"
    )


def first_prober_path(trainer: L.Trainer, who: str) -> str:
    """`data.init_args.prober_path`, refused with one line when unset (`who` names the callback)."""
    path = getattr(trainer.datamodule, "prober_path", None)
    if path is None:
        raise ConfigError(unset_prober_reason(who))
    return path


def config_lacks_prober(config: dict) -> str | None:
    """For a resolved fit config (`fit --print_config`): why its fit would refuse to start for want of
    Psi_1 (a probing callback with `prober_path` unset), else None; `grid` refuses such a row before
    it submits anything."""
    callbacks = (config.get("trainer") or {}).get("callbacks") or []
    names = [str(c.get("class_path", "")).rsplit(".", 1)[-1] for c in callbacks if isinstance(c, dict)]
    probing = [name for name in names if name in PROBING_CALLBACKS]
    data = (config.get("data") or {}).get("init_args") or {}
    return unset_prober_reason(probing[0]) if probing and data.get("prober_path") is None else None


def epoch_prober(trainer: L.Trainer, module: L.LightningModule, epoch: int, who: str) -> tuple[GVEEmbedder, str]:
    """Psi_t for the 0-based `epoch` and what it is (`prober_path`, or "model"): at the first epoch the
    off-the-shelf embedder of `prober_path` (loaded for this call, with the trained model's input
    settings), otherwise the model being trained."""
    path = first_prober_path(trainer, who)
    if epoch > 0 or path == PROBER_IS_MODEL:
        return module.embedder, PROBER_IS_MODEL
    return GVEEmbedder(path, lora=None, inputs=module.embedder.processing.config, device=module.device).to(
        module.device
    ), path
