"""`HardNegativeMining`: GVE's hard negatives mined at every epoch start with the epoch's prober Psi_t.

GVE Sec. 3.3: "To strengthen discrimination, we augment in-batch negatives with hard negatives mined
from a large external corpus using the same prober Psi_t. For a query-target pair (q, v+), the loss
contrasts v+ against both other positives in the batch and the top-K retrieved hard negatives." A.4
("As the aforementioned methodology, we train our model based on contrastive learning with pre-mined
explicit hard negatives") defers to it; Tab. 6-7 give K per task ("Neg."; 0: in-batch negatives only).

With `data.negative_mining: prober`, at the start of epoch t every query of a task with K > 0 and its
candidate targets (the task's distinct targets plus its `negative_corpus` files: the paper does not say
what its external corpus holds) are embedded with Psi_t (`callbacks/prober.py`: `data.prober_path` at the
first epoch, then the model being trained; each rank a contiguous share, gathered), and each pair gets its
K top-ranked candidates that are not its positive (exact cosine, `data.negatives.hardest_negatives`).
The callback is independent of the curriculum, so GVE-s and GVE-i (no Modality Pyramid) get their
negatives the same way as GVE. A run resumed in the middle of an epoch mines again with the restored
weights (at an epoch boundary these are the epoch's prober). Cost: one embedding pass over every query
and candidate per epoch, plus loading Psi_1 once (the Modality Pyramid loads it for its probe too).
With `data.negative_mining: offline` the task files' negatives are used and this callback mines nothing.
"""

from __future__ import annotations

import logging

import lightning as L
import numpy as np

from lit_retrieval.callbacks.prober import epoch_prober, first_prober_path
from lit_retrieval.data.items import MediaItem, parse_format
from lit_retrieval.data.gve.multitask import TaskData
from lit_retrieval.data.gve.negatives import candidate_targets, hardest_negatives, read_corpus
from lit_retrieval.distributed import gather_variable
from lit_retrieval.errors import ConfigError
from lit_retrieval.models.gve.embedder import GVEEmbedder

log = logging.getLogger(__name__)


class HardNegativeMining(L.Callback):
    """Args:
    batch_size: items per prober forward pass.
    """

    mines_negatives = True  # MultiTaskDataModule checks that something mines under `negative_mining: prober`

    def __init__(self, batch_size: int = 8) -> None:
        if batch_size < 1:
            raise ConfigError(f"batch_size must be at least 1, got {batch_size}")
        self.batch_size = batch_size

    def setup(self, trainer: L.Trainer, module: L.LightningModule, stage: str) -> None:
        if stage == "fit" and trainer.datamodule.negative_mining == "prober":
            first_prober_path(trainer, "HardNegativeMining")  # refused before the model is set up

    def on_fit_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        datamodule = trainer.datamodule
        if datamodule.negative_mining != "prober":
            log.info("data.negative_mining: %s: the task files' hard negatives are used", datamodule.negative_mining)
            return
        if not datamodule.train_data:
            datamodule.setup("fit")
        self._mine_epoch(trainer, module, datamodule.upcoming_epoch(trainer))

    def on_train_epoch_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if trainer.datamodule.negative_mining == "prober":
            self._mine_epoch(trainer, module, trainer.current_epoch)

    def _mine_epoch(self, trainer: L.Trainer, module: L.LightningModule, epoch: int) -> None:
        datamodule = trainer.datamodule
        if datamodule.mined_epoch == epoch:
            return
        tasks = [d for d in datamodule.train_data if d.spec.num_negatives]
        if not tasks:
            return
        prober, _ = epoch_prober(trainer, module, epoch, "HardNegativeMining")
        for data in tasks:
            datamodule.set_task_negatives(data.spec.name, self._mine(trainer, prober, data), epoch)
        del prober

    def _mine(self, trainer: L.Trainer, prober: GVEEmbedder, data: TaskData) -> list[tuple[MediaItem, ...]]:
        """Each pair's `num_negatives` hardest non-positive candidates under `prober`."""
        corpus = read_corpus(data.spec.negative_corpus, parse_format(data.spec.format)[1])
        targets, positions = candidate_targets([r.positive for r in data.records], corpus)
        k = data.spec.num_negatives
        if len(targets) <= k:
            raise ValueError(
                f"task {data.spec.name!r}: {len(targets)} distinct candidate targets cannot give "
                f"{k} hard negatives per pair"
            )
        queries = self._embed_all(trainer, prober, [r.query for r in data.records], data.spec.instruction)
        candidates = self._embed_all(trainer, prober, targets, data.spec.target_instruction)
        found = hardest_negatives(queries, candidates, [{p} for p in positions], k)
        return [tuple(targets[j] for j in row) for row in found]

    def _embed_all(self, trainer: L.Trainer, prober: GVEEmbedder, items: list, instruction: str | None) -> np.ndarray:
        """Embeddings of all `items` on every rank: each rank embeds a contiguous share, then gathered."""
        world, rank = trainer.world_size, trainer.global_rank
        if world == 1 or len(items) < world:
            share = items
        else:
            bounds = np.linspace(0, len(items), world + 1).round().astype(int)
            share = items[bounds[rank] : bounds[rank + 1]]
        embedded = prober.embed(share, instruction, self.batch_size).float()
        if share is not items:
            embedded = gather_variable(trainer.lightning_module, embedded)
        return embedded.cpu().numpy()
