"""Training curves of a run: L_std and the MEA terms per step, R@1 per epoch (MELON Fig. 9).

`TrainingCurves` logs theta^t, delta^t, xi^t, L_push, L_pull, L_mea and L_std at every training
step to the run's logger (any Lightning logger: TensorBoard, CSV, ...), keeps the history in its
checkpointed state (a resumed run draws complete curves), and at the end of `fit` writes
`training_curves.json` and a Fig. 9-style PNG into the run directory. `plot_training_curves`
overlays several runs, e.g. the Tab. 3 ablation rows (`lit-retrieval curves`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import lightning as L

STEP_KEYS = ("loss", "loss_std", "mea_loss", "mea_push", "mea_pull", "mea_theta", "mea_delta", "mea_xi")
LOG_NAMES = {
    "loss_std": "train/loss_std",
    "mea_loss": "train/mea/loss",
    "mea_push": "train/mea/push",
    "mea_pull": "train/mea/pull",
    "mea_theta": "train/mea/theta",
    "mea_delta": "train/mea/delta",
    "mea_xi": "train/mea/xi",
}


class TrainingCurves(L.Callback):
    """Per-step loss and MEA threshold curves, per-epoch validation R@1, and their figure.

    Args:
        filename: stem of the JSON and PNG files written in the run directory.
        title: figure title (default: the run directory's name).
    """

    def __init__(self, filename: str = "training_curves", title: str | None = None) -> None:
        self.filename = filename
        self.title = title
        self.steps: list[dict[str, float]] = []
        self.epochs: list[dict[str, float]] = []

    def on_train_batch_end(
        self, trainer: L.Trainer, module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not isinstance(outputs, dict):
            return
        row = {"step": float(trainer.global_step)}
        for key in STEP_KEYS:
            if key in outputs:
                row[key] = float(outputs[key])
        if "loss_value" in outputs:  # the loss itself, not the world-size-scaled one back-propagated
            row["loss"] = float(outputs["loss_value"])
        self.steps.append(row)
        size = len(batch["index"]) if isinstance(batch, dict) and "index" in batch else None
        for key, name in LOG_NAMES.items():
            if key in row:
                module.log(name, row[key], on_step=True, on_epoch=False, batch_size=size)

    def on_validation_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        results = getattr(module, "eval_results", {}).get("val")
        if trainer.sanity_checking or not results:
            return
        row = {"epoch": float(trainer.current_epoch), "step": float(trainer.global_step)}
        row.update({k: results[k] for k in ("t2v/R@1", "v2t/R@1") if k in results})
        self.epochs.append(row)

    def on_fit_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        out_dir = Path(trainer.log_dir or trainer.default_root_dir)  # a broadcast under DDP: every rank asks
        if not trainer.is_global_zero or not self.steps:
            return
        out_dir.mkdir(parents=True, exist_ok=True)
        history = {"steps": self.steps, "epochs": self.epochs}
        (out_dir / f"{self.filename}.json").write_text(json.dumps(history))
        plot_training_curves({self.title or out_dir.name: history}, out_dir / f"{self.filename}.png")

    def state_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "epochs": self.epochs}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.steps = list(state_dict["steps"])
        self.epochs = list(state_dict["epochs"])


def _smooth(values: list[float], window: int) -> list[float]:
    """Trailing moving average, so that noisy per-step losses stay readable."""
    out, total = [], 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot_training_curves(
    runs: dict[str, dict[str, list[dict[str, float]]]], path: str | Path, smooth: int = 10
) -> Path:
    """Four panels as in MELON Fig. 9: (a) training loss, (b) theta^t over steps, (c) T2V R@1 and
    (d) V2T R@1 over epochs; one line per run. Missing series (no MEA, no validation) stay empty."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(18, 3.8))
    panels = [
        ("steps", "loss", "(a) training loss", "step"),
        ("steps", "mea_theta", "(b) adaptive threshold θᵗ", "step"),
        ("epochs", "t2v/R@1", "(c) T2V R@1", "epoch"),
        ("epochs", "v2t/R@1", "(d) V2T R@1", "epoch"),
    ]
    colours = {label: f"C{i % 10}" for i, label in enumerate(runs)}  # one colour per run in every panel
    for ax, (series, key, title, xlabel) in zip(axes, panels):
        for label, history in runs.items():
            rows = [r for r in history.get(series, []) if key in r and math.isfinite(r[key])]
            if not rows:
                continue
            xs = [r["step"] if series == "steps" else r["epoch"] + 1 for r in rows]
            ys = [r[key] for r in rows]
            if series == "steps":
                ax.plot(xs, _smooth(ys, smooth), label=label, color=colours[label], linewidth=1.2)
            else:
                ax.plot(xs, ys, marker="o", label=label, color=colours[label], linewidth=1.2)
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    handles = [plt.Line2D([], [], color=colours[label], label=label) for label in runs]
    labels = list(runs)
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 5), frameon=False)
    fig.tight_layout(rect=(0, 0.1 if handles else 0, 1, 1))
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
