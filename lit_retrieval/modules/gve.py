"""`GVERetrieval`: trains and evaluates the General Video Embedder (GVE Sec. 3.3, A.7-A.8, A.10).

One step embeds a batch's queries and its targets (positives, then hard negatives) with the
LoRA-tuned Qwen2.5-VL and applies the symmetric InfoNCE of GVE Eq. 1 with in-batch, hard and
cross-device negatives. It logs the A.10 training metrics (`train/loss`, `train/positive`,
`train/mean_score`, `train/margin`), overall and per task. Validation ranks each task's distinct
targets for each query by cosine (`val/<task>/q2c/R@1`, ... and `val/R@1`, the mean over tasks).

Checkpoints hold only the trainable (LoRA) weights: the frozen base model is reloaded from
`model_path`, and a checkpoint whose weights do not match the model's trainable parameters is
refused with the names that differ.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import lightning as L
import torch

from lit_retrieval.data.media.identity import tree_identity
from lit_retrieval.distributed import distributed_world, gather_variable
from lit_retrieval.losses.contrastive import HardNegatives, MultimodalInfoNCE
from lit_retrieval.models.gve.embedder import GVEEmbedder, AdapterConfig
from lit_retrieval.models.gve.processing import GVEProcessing, InputConfig
from lit_retrieval.modules.evaluation import EvaluationConfig, RetrievalEvaluator
from lit_retrieval.modules.grad_cache import GradCacheConfig, QwenRowSplitter, RecipeBatchCheck, cached_encode
from lit_retrieval.modules.item_embedders import FrameInput, GVEItemEmbedder, ItemEmbedder
from lit_retrieval.modules.nonfinite import NonFiniteGuard, NonFinitePolicy
from lit_retrieval.modules.optim import OptimConfig, build_optimizer, build_scheduler, parameter_groups
from lit_retrieval.modules.rng import process_device, rng_states, set_rng_states

TRAIN_STATS = ("loss_value", "positive", "mean_score", "margin")


@dataclass
class EmbedderConfig:
    """What `GVEEmbedder` is built from (see its docstring)."""

    model_path: str
    lora: AdapterConfig | None = field(default_factory=AdapterConfig)
    adapter_path: str | None = None
    inputs: InputConfig = field(default_factory=InputConfig)
    gradient_checkpointing: bool = True
    dtype: str = "auto"
    attn_implementation: str = "auto"
    full_training: bool = False
    base_checkpoint: str | None = None

    def build(self) -> GVEEmbedder:
        return GVEEmbedder(
            self.model_path,
            self.lora,
            self.adapter_path,
            self.inputs,
            self.gradient_checkpointing,
            self.dtype,
            self.attn_implementation,
            self.full_training,
            self.base_checkpoint,
        )


def gve_optim() -> OptimConfig:
    """GVE Tab. 9: AdamW 3e-5, weight decay 0.1, cosine schedule (no warm-up is listed)."""
    return OptimConfig(head_lr=3e-5, weight_decay=0.1, betas=(0.9, 0.999), eps=1e-8, warmup_proportion=0.0)


class GVERetrieval(L.LightningModule):
    """GVE training/evaluation module.

    Args:
        embedder: model path, LoRA, input processing, checkpointing, dtype, attention.
        temperature: InfoNCE temperature tau_l (GVE Tab. 9: 0.03).
        hard_negatives: `own` (Eq. 1: each query's own mined negatives) or `shared` (every hard
            negative of the global batch).
        cross_device: gather embeddings of all ranks as extra negatives (GVE A.8).
        optim: AdamW settings (`head_lr` is the LoRA learning rate); default GVE Tab. 9.
        nonfinite: skip (and count) or stop on a NaN/infinite loss; skipped batches' record ids
            are logged.
        grad_cache: train with gradient caching (GradCache, `modules/grad_cache.py`): queries
            `text_chunk` and targets (positives, then hard negatives) `video_chunk` rows per model
            call; the loss (in-batch, hard and cross-device negatives) and gradients stay the
            full batch's.
        recipe_ranks: the paper's ranks whose batches each step contrasts (GVE: 32 GPUs; each task's
            `batch_size` is per GPU as in the paper): a run contrasting another number warns once;
            on N GPUs, task batches x 32/N (fitting in memory with `grad_cache`) give the paper's batch.
    """

    def __init__(
        self,
        embedder: EmbedderConfig,
        temperature: float = 0.03,
        hard_negatives: HardNegatives = "own",
        cross_device: bool = True,
        optim: OptimConfig | None = None,
        nonfinite: NonFinitePolicy | None = None,
        grad_cache: GradCacheConfig | None = None,
        recipe_ranks: int | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.embedder = embedder.build()
        self.loss_fn = MultimodalInfoNCE(temperature, hard_negatives, cross_device)
        self.optim = optim or gve_optim()
        self.nonfinite = NonFiniteGuard(nonfinite)
        self.strict_loading = False  # checkpoints carry the trainable weights only
        self.evaluator = RetrievalEvaluator(EvaluationConfig())
        self.eval_results: dict[str, dict[str, float]] = {}
        self._eval_parts: list[dict[str, torch.Tensor]] = []
        self.grad_cache = grad_cache
        self.recipe_ranks = RecipeBatchCheck("model.recipe_ranks", recipe_ranks)

    @property
    def processing(self) -> GVEProcessing:
        return self.embedder.processing

    def item_embedder(self, identity: Any, frames: FrameInput) -> ItemEmbedder:
        """The tuned embedder as the `ItemEmbedder` of index, search and UVRB (frames sampled by
        its own processing, with `frames.sampling`); the base model's files join the identity."""
        self.processing.config = replace(self.processing.config, sampling=frames.sampling)
        return GVEItemEmbedder(self.embedder, [*identity, tree_identity(self.embedder.model_path)])

    # ---- training ----------------------------------------------------------------------------
    def row_splitter(self, rows: dict[str, tuple[list[int], list[int]]] | None = None) -> QwenRowSplitter:
        """Gradient caching's cut of a processed batch into chunks of rows (`rows`: see there)."""
        config = self.embedder.base_model.config
        merge = config.vision_config.spatial_merge_size
        return QwenRowSplitter(config.image_token_id, config.video_token_id, merge, rows)

    def embed_training(
        self,
        inputs: dict[str, torch.Tensor],
        chunk: int | None,
        rows: dict[str, tuple[list[int], list[int]]] | None = None,
    ) -> torch.Tensor:
        """Embeddings of a processed training batch: in one model call, or `chunk` rows at a time
        under gradient caching (`grad_cache`; `rows`: `QwenRowSplitter.rows`)."""
        if self.grad_cache is None:
            return self.embedder(inputs)
        device = inputs["input_ids"].device
        split = self.row_splitter(rows)
        return cached_encode(self.embedder, inputs, len(inputs["input_ids"]), chunk, device, split)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> dict[str, torch.Tensor] | None:
        cache = self.grad_cache or GradCacheConfig()
        rows = batch.get("media_rows", {})
        query = self.embed_training(batch["query"], cache.text_chunk, rows.get("query"))
        target = self.embed_training(batch["target"], cache.video_chunk, rows.get("target"))
        size, k = query.shape[0], int(batch["num_negatives"])
        world = distributed_world() if self.loss_fn.cross_device else 1
        self.recipe_ranks.check(world, self.global_rank, f"{world} rank(s) contrasted, {size} pairs each")
        negatives = target[size:].reshape(size, k, -1) if k else None
        out = self.loss_fn(query, target[:size], negatives, batch["target_keys"])
        if not self.nonfinite.allows(self, out["loss"], batch["ids"]):
            self.log("train/nonfinite_skipped", float(self.nonfinite.skipped), batch_size=size)
            return None
        stats = {f"train/{name.removesuffix('_value')}": out[name] for name in TRAIN_STATS}
        self.log_dict(stats, on_step=True, on_epoch=False, prog_bar=False, batch_size=size)
        self.log(f"train/task/{batch['task']}/loss", out["loss_value"], on_step=True, on_epoch=False, batch_size=size)
        self.log("train/loss_epoch", out["loss_value"], on_step=False, on_epoch=True, prog_bar=True, batch_size=size)
        return out

    def configure_optimizers(self):
        optimizer = build_optimizer(parameter_groups(self, set(), self.optim), self.optim)
        scheduler = build_scheduler(optimizer, int(self.trainer.estimated_stepping_batches), self.optim)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    # ---- evaluation --------------------------------------------------------------------------
    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        embeddings = self.embedder(batch["inputs"])
        self._eval_parts.append(
            {
                "embeddings": embeddings,
                "task": batch["task_index"],
                "is_query": batch["is_query"],
                "position": batch["position"],
            }
        )

    def on_validation_epoch_start(self) -> None:
        self._eval_parts = []

    def on_validation_epoch_end(self) -> None:
        if not self._eval_parts:
            return
        parts = {k: gather_variable(self, torch.cat([p[k] for p in self._eval_parts])) for k in self._eval_parts[0]}
        self._eval_parts = []
        datamodule = self.trainer.datamodule
        results: dict[str, float] = {}
        for t, data in enumerate(datamodule.val_data):
            query = self._ordered(parts, t, True, len(data.records))
            gallery = self._ordered(parts, t, False, len(datamodule.eval_set.targets[t]))
            targets = torch.tensor(datamodule.eval_set.query_targets[t], device=query.device)
            positions = torch.arange(len(targets), device=query.device)
            # every process holds the whole task already: no merge of rows across processes
            metrics = self.evaluator.rank(cosine_scores, query, gallery, targets, positions, synced=False).metrics
            for key, value in metrics.items():
                results[f"{data.spec.name}/{key.replace('t2v/', 'q2c/').replace('v2t/', 'c2q/')}"] = value
        names = [d.spec.name for d in datamodule.val_data]
        results["R@1"] = sum(results[f"{n}/q2c/R@1"] for n in names) / len(names)
        self.eval_results["val"] = results
        self.log_dict({f"val/{k}": v for k, v in results.items()})

    @staticmethod
    def _ordered(parts: dict[str, torch.Tensor], task: int, query: bool, count: int) -> torch.Tensor:
        """Embeddings of one task's queries or targets in position order (distributed padding
        duplicates removed)."""
        chosen = (parts["task"] == task) & (parts["is_query"] == query)
        emb, pos = parts["embeddings"][chosen], parts["position"][chosen]
        out = emb.new_zeros(count, emb.shape[1])
        out[pos] = emb
        return out

    # ---- checkpoints -------------------------------------------------------------------------
    def trainable_names(self) -> set[str]:
        return {n for n, p in self.named_parameters() if p.requires_grad}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        keep = self.trainable_names()
        checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if k in keep}
        checkpoint["rng_states"] = rng_states(process_device(self)[2])

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        stored, expected = set(checkpoint["state_dict"]), self.trainable_names()
        if stored != expected:
            missing, extra = sorted(expected - stored)[:3], sorted(stored - expected)[:3]
            raise RuntimeError(
                f"checkpoint does not match this model's trainable weights: missing {missing}, unexpected {extra} "
                "(was it written with another LoRA setting or model?)"
            )
        if "rng_states" in checkpoint:  # LoRA dropout continues as in an uninterrupted run
            set_rng_states(checkpoint["rng_states"], *process_device(self))


def cosine_scores(query: torch.Tensor, gallery: torch.Tensor) -> torch.Tensor:
    """Scores of L2-normalised embeddings (GVE Definition 1: s = cos(E(q), E(v)))."""
    return query @ gallery.t()
