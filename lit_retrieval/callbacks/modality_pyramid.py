"""`ModalityPyramid`: GVE's alignment-aware task curriculum as a Lightning callback (GVE Sec. 3.3).

At the start of epoch t (1-based in the paper, `trainer.current_epoch + 1` here) a prober Psi_t
embeds N_p positive pairs of every training task k and scores its alignment

    R_k(t) = 1/N_p sum_i cos(Psi_t(x_i), Psi_t(y_i)),

then tasks are drawn during the epoch with P_t(k) proportional to exp(R_k(t) / sigma(t)), sigma rising
linearly from sigma_min (0.1) at the first epoch to sigma_max (1.0) at the last: well-aligned tasks first,
harder ones increasingly explored. Psi_t (`callbacks/prober.py`): "For t=1, Psi_1 is a strong
off-the-shelf embedder (e.g., GME-7B); for t>1, Psi_t is the GVE checkpoint from the end of epoch t-1".
Psi_1 is `data.init_args.prober_path` (shared with `HardNegativeMining`); unset, the fit refuses to start;
`model` lets the model itself probe the first epoch (the base Qwen2.5-VL, LoRA starting at zero), our
fallback, not the paper's. N_p is not published: `num_probe_pairs` (256 in configs/gve/train.yaml) is ours.

Task size (the paper is silent; our reading, configurable). Sec. 3.3's P(k) depends on alignment only,
so with near-equal R_k every task gets the same share of an epoch's steps whatever its size: in the GVE-3B
mixture (configs/gve/data_3b.yaml, 38 tasks, 8 GPUs) Fashion200K (4,000 pairs) would be repeated 75 times
per epoch (81 in the 7B mixture) while 5.6 % of WebVid is seen. A.4 instead fixes each dataset's share of
the training instances (12.55 M, Tab. 8) by sampling large datasets down and repeating valuable ones "to
maintain a balanced training diet". We keep that diet and let the curriculum re-weight it: with
m_k = n_k / B_k the batches task k fills (n_k pairs, per-device batch B_k), `size_exponent` a gives

    P_t(k) proportional to m_k^a exp(R_k(t) / sigma(t)),

a = 1 (default): with equal alignment every record is seen once per epoch, and the curriculum
multiplies each task's share by exp(R_k / sigma); a = 0: Sec. 3.3's formula as printed. `max_passes`
additionally caps the expected passes over a task per epoch, steps * P(k) * B_k * W / n_k (B_k: the
task's per-device batch, W: processes): a task above the cap is lowered to it and the freed
probability goes to the others in proportion to their P (`cap_passes`). The per-task expected passes
are stored in the history (`passes`). Without this callback (GVE-s, GVE-i) `data.sampling: equal_passes`
draws with the same base diet, P(k) proportional to m_k, so the two differ by exp(R_k / sigma) only.

Hard negatives are mined by a separate callback, `HardNegativeMining` (`data.negative_mining: prober`),
with the same Psi_t, so that the rows without the curriculum get them the same way.

Pairs are drawn per (seed, epoch, task); under DDP each rank embeds a share and the sums are
all-reduced, so every rank applies the same P. The history (R, sigma, P per epoch) is logged as
`curriculum/sigma`, `curriculum/R/<task>`, `curriculum/P/<task>`, saved in checkpoints (a resumed
run applies the stored P of its epoch instead of probing again) and plotted at the end of fit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch

from lit_retrieval.callbacks.prober import epoch_prober, first_prober_path
from lit_retrieval.data.batching.samplers import size_weights
from lit_retrieval.errors import ConfigError
from lit_retrieval.models.gve.embedder import GVEEmbedder


def curriculum_sigma(epoch: int, epochs: int, sigma_min: float, sigma_max: float) -> float:
    """sigma(t) for the 0-based `epoch` of `epochs`, linear from sigma_min to sigma_max."""
    if epochs <= 1:
        return sigma_min
    return sigma_min + (sigma_max - sigma_min) * min(epoch, epochs - 1) / (epochs - 1)


def task_probabilities(
    alignment: list[float], sigma: float, batches: list[float] | None = None, size_exponent: float = 0.0
) -> list[float]:
    """P(k) = softmax_k(R_k / sigma + a log m_k): GVE Sec. 3.3's softmax times m_k^a, m_k the batches
    task k fills (`n_k / B_k`; module notes)."""
    logits = np.asarray(alignment, dtype=np.float64) / sigma
    if batches is not None and size_exponent:
        logits = logits + size_exponent * np.log(np.asarray(batches, dtype=np.float64))
    weights = np.exp(logits - logits.max())
    return (weights / weights.sum()).tolist()


def expected_passes(
    probabilities: list[float], sizes: list[int], batch_sizes: list[int], steps: int, world_size: int = 1
) -> list[float]:
    """Expected passes over each task in an epoch of `steps` global batches: steps * P(k) * B_k * W / n_k."""
    return [steps * p * b * world_size / n for p, n, b in zip(probabilities, sizes, batch_sizes)]


def cap_passes(
    probabilities: list[float],
    sizes: list[int],
    batch_sizes: list[int],
    steps: int,
    max_passes: float,
    world_size: int = 1,
) -> list[float]:
    """P with no task above `max_passes` expected passes per epoch: tasks over the cap are set to it and
    the rest rescaled to the remaining probability, repeated until none is over. When the caps sum to
    less than 1 (too many steps for the cap), P is proportional to the caps (every task at the same
    multiple of its cap)."""
    p = np.asarray(probabilities, dtype=np.float64)
    caps = np.asarray(
        [max_passes * n / (steps * b * world_size) for n, b in zip(sizes, batch_sizes)]
    )  # P(k) at the cap
    capped = np.zeros(len(p), dtype=bool)
    while True:
        over = ~capped & (p > caps * (1 + 1e-12))
        if not over.any():
            return p.tolist()
        capped |= over
        free = 1.0 - caps[capped].sum()
        rest = p[~capped].sum()
        if free <= 0 or rest <= 0:
            return (caps / caps.sum()).tolist()
        p = np.where(capped, caps, p * free / rest)


class ModalityPyramid(L.Callback):
    """Args:
    num_probe_pairs: N_p positive pairs per task and epoch (not published; ours).
    sigma_min, sigma_max: temperature at the first and at the last epoch (Sec. 3.3: 0.1 and 1.0).
    size_exponent: a in P(k) proportional to (n_k / B_k)^a exp(R_k / sigma) (1: A.4's diet, each pair once
        per epoch at equal alignment, re-weighted by the curriculum; 0: Sec. 3.3 as printed; module notes).
    max_passes: cap on the expected passes over a task per epoch (None: no cap).
    batch_size: items per prober forward pass.
    seed: base of the probe-pair draws.
    filename: stem of the JSON and PNG written in the run directory at the end of fit.
    """

    def __init__(
        self,
        num_probe_pairs: int = 256,
        sigma_min: float = 0.1,
        sigma_max: float = 1.0,
        size_exponent: float = 1.0,
        max_passes: float | None = None,
        batch_size: int = 8,
        seed: int = 0,
        filename: str = "modality_pyramid",
    ) -> None:
        if num_probe_pairs < 1 or not 0 < sigma_min <= sigma_max:
            raise ConfigError("num_probe_pairs >= 1 and 0 < sigma_min <= sigma_max are required")
        if not np.isfinite(size_exponent) or (max_passes is not None and not max_passes > 0):
            raise ConfigError(f"size_exponent must be finite and max_passes > 0, got {size_exponent}, {max_passes}")
        self.num_probe_pairs = num_probe_pairs
        self.sigma_min = sigma_min
        self.sigma_max = sigma_max
        self.size_exponent = size_exponent
        self.max_passes = max_passes
        self.batch_size = batch_size
        self.seed = seed
        self.filename = filename
        self.history: list[dict[str, Any]] = []

    # ---- schedule ----------------------------------------------------------------------------
    def setup(self, trainer: L.Trainer, module: L.LightningModule, stage: str) -> None:
        if stage == "fit":
            first_prober_path(trainer, "ModalityPyramid")  # refused before the model is set up

    def on_fit_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        # Lightning restores its epoch counter only after on_fit_start: a resumed run asks the data
        # module which epoch its loader starts at, so that the loader draws with that epoch's P
        datamodule = trainer.datamodule
        if not datamodule.train_data:
            datamodule.setup("fit")
        self._schedule(trainer, module, datamodule.upcoming_epoch(trainer))

    def on_train_epoch_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._schedule(trainer, module, trainer.current_epoch)

    def entry(self, epoch: int) -> dict[str, Any] | None:
        return next((e for e in self.history if e["epoch"] == epoch), None)

    def _schedule(self, trainer: L.Trainer, module: L.LightningModule, epoch: int) -> None:
        datamodule = trainer.datamodule
        entry = self.entry(epoch)
        if entry is None:
            prober, name = epoch_prober(trainer, module, epoch, "ModalityPyramid")
            entry = self._probe_epoch(trainer, prober, epoch, name)
            del prober
            self.history.append(entry)
            metrics = {"curriculum/sigma": entry["sigma"]}
            metrics.update({f"curriculum/R/{k}": v for k, v in entry["R"].items()})
            metrics.update({f"curriculum/P/{k}": v for k, v in entry["P"].items()})
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=trainer.global_step)
        datamodule.set_task_probabilities(entry["P"])

    def _probe_epoch(self, trainer: L.Trainer, prober: GVEEmbedder, epoch: int, prober_name: str) -> dict[str, Any]:
        datamodule = trainer.datamodule
        alignment = {}
        for k, data in enumerate(datamodule.train_data):
            alignment[data.spec.name] = self._alignment(trainer, prober, data, epoch, k)
        sigma = curriculum_sigma(epoch, trainer.max_epochs or 1, self.sigma_min, self.sigma_max)
        names = list(alignment)
        sizes = [len(d.records) for d in datamodule.train_data]
        batches = [d.spec.batch_size for d in datamodule.train_data]
        world = trainer.world_size
        steps = datamodule.epoch_steps(world)
        filled = size_weights(sizes, batches)  # m_k = n_k / B_k, the no-curriculum rows' diet too
        probabilities = task_probabilities([alignment[n] for n in names], sigma, filled, self.size_exponent)
        if self.max_passes is not None:
            probabilities = cap_passes(probabilities, sizes, batches, steps, self.max_passes, world)
        passes = expected_passes(probabilities, sizes, batches, steps, world)
        return {
            "epoch": epoch,
            "sigma": sigma,
            "R": alignment,
            "P": dict(zip(names, probabilities)),
            "sizes": dict(zip(names, sizes)),
            "passes": dict(zip(names, passes)),
            "prober": prober_name,
        }

    def _alignment(self, trainer: L.Trainer, prober: GVEEmbedder, data, epoch: int, task: int) -> float:
        """R_k: mean cosine of N_p positive pairs; this rank embeds pairs rank, rank + W, ..."""
        count = min(self.num_probe_pairs, len(data.records))
        chosen = np.random.default_rng([self.seed, epoch, task]).choice(len(data.records), count, replace=False)
        mine = [data.records[i] for i in chosen[trainer.global_rank :: trainer.world_size]]
        device = next(prober.parameters()).device
        total = torch.zeros(2, dtype=torch.float64, device=device)
        if mine:
            queries = prober.embed([r.query for r in mine], data.spec.instruction, self.batch_size)
            targets = prober.embed([r.positive for r in mine], data.spec.target_instruction, self.batch_size)
            total[0] = (queries * targets).sum(-1).double().sum()
            total[1] = len(mine)
        total = trainer.strategy.reduce(total, reduce_op="sum")
        return float(total[0] / total[1])

    # ---- state and figure --------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"history": self.history}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.history = [dict(e) for e in state_dict["history"]]

    def on_fit_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        out_dir = Path(trainer.log_dir or trainer.default_root_dir)  # a broadcast under DDP: every rank asks
        if not trainer.is_global_zero or not self.history:
            return
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / f"{self.filename}.json").write_text(json.dumps(self.history, indent=2))
        plot_curriculum(self.history, out_dir / f"{self.filename}.png")


def plot_curriculum(history: list[dict[str, Any]], path: str | Path) -> Path:
    """Two panels: R_k per epoch, and P(k) per epoch as stacked bars with sigma above them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    history = sorted(history, key=lambda e: e["epoch"])
    epochs = [e["epoch"] + 1 for e in history]
    names = list(history[0]["R"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for name in names:
        left.plot(epochs, [e["R"][name] for e in history], marker="o", label=name)
    left.set(xlabel="epoch t", ylabel="R_k(t) (mean positive cosine)", title="task alignment")
    left.set_xticks(epochs)
    left.legend(fontsize=7)
    bottom = np.zeros(len(history))
    for name in names:
        values = np.array([e["P"][name] for e in history])
        right.bar(epochs, values, bottom=bottom, label=name)
        bottom += values
    for x, e in zip(epochs, history):
        right.text(x, 1.01, f"σ={e['sigma']:.2f}", ha="center", fontsize=8)
    right.set(xlabel="epoch t", ylabel="P_t(k)", title="task sampling probabilities", ylim=(0, 1.1))
    right.set_xticks(epochs)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
