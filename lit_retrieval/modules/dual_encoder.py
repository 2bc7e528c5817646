"""`DualEncoderRetrieval`: any encoder + any similarity head. A training step encodes the batch,
scores it and sums its `TrainingObjectives` (InfoNCE, MELON Eq. 2; the head's auxiliary terms;
lambda * L_mea, Eq. 9; or MeVTR's event loss alone); an evaluation stage hands its batches to the
`RetrievalEvaluator` (one gallery over all processes, blockwise scoring, metrics, analyses),
whose results are logged as `{stage}/t2v/R@1`, ... and kept in `eval_results` (scores and ranks
in float32 under every training precision, `lit_retrieval/modules/evaluation.py`). Multi-event
queries are the concatenated events (MELON Sec. 4.2) or, with `query_mode="events"`, each event
encoded alone and the features mean-pooled (MELON Tab. 5).
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch

from lit_retrieval.data.text.queries import QueryMode
from lit_retrieval.data.text.spans import SpanSplitter
from lit_retrieval.distributed import distributed_world
from lit_retrieval.errors import ConfigError
from lit_retrieval.losses.mevtr import MeVTRLoss
from lit_retrieval.metrics.analyses import AnalysesConfig
from lit_retrieval.metrics.relational import RelationalConfig
from lit_retrieval.metrics.rerank import RerankConfig
from lit_retrieval.metrics.rescoring import RESCORINGS, RescoreConfig
from lit_retrieval.models.encoders.base import VideoTextEncoder
from lit_retrieval.models.features import TextFeatures
from lit_retrieval.models.heads.base import SimilarityHead
from lit_retrieval.modules.checkpoint_head import check_head, record_head
from lit_retrieval.modules.evaluation import EvaluationConfig, RetrievalEvaluator
from lit_retrieval.modules.grad_cache import GradCacheConfig, RecipeBatchCheck, cached_encode
from lit_retrieval.modules.initialization import freeze_prefixes, load_warm_start
from lit_retrieval.modules.item_embedders import DualEncoderEmbedder, FrameInput, ItemEmbedder
from lit_retrieval.modules.multi_event import MEAConfig
from lit_retrieval.modules.nonfinite import NonFiniteGuard, NonFinitePolicy
from lit_retrieval.modules.objectives import (
    ContrastiveConfig,
    StepTexts,
    TrainingObjectives,
    contrastive_setup,
    rename_legacy_objective_keys,
)
from lit_retrieval.modules.optim import OptimConfig, build_optimizer, build_scheduler, parameter_groups
from lit_retrieval.modules.query_encoding import encode_multi_event, query_token_counts
from lit_retrieval.modules.rng import process_device, rng_states, set_rng_states

# Config dataclasses in the checkpoint's hyper-parameters load under torch.load's weights_only=True.
torch.serialization.add_safe_globals(
    [
        OptimConfig,
        MEAConfig,
        EvaluationConfig,
        AnalysesConfig,
        RelationalConfig,
        RescoreConfig,
        *(method.options for method in RESCORINGS.values()),
        RerankConfig,
        SpanSplitter,
        NonFinitePolicy,
        GradCacheConfig,
        ContrastiveConfig,
    ]
)


class DualEncoderRetrieval(L.LightningModule):
    """Text-video retrieval with a dual encoder and a swappable similarity head.

    Args:
        encoder: a `VideoTextEncoder` (e.g. `CLIPEncoder`).
        head: a `SimilarityHead` (e.g. `MeanPHead`).
        query_mode: `concat` (MELON Sec. 4.2) or `events` (per-event encoding + mean, Tab. 5).
        optim: learning rates (backbone vs. new layers), optimiser and warm-up + cosine schedule.
        mea, event_loss, average_directions, cross_device: the training objectives
            (`TrainingObjectives`: lambda * L_mea of MELON Eq. 9; MeVTR's event-caption loss
            instead of InfoNCE; CLIP4Clip's halved InfoNCE; negatives from every DDP rank).
        contrastive: InfoNCE or SigLIP's sigmoid loss, and the initial temperature and bias
            (`ContrastiveConfig`; default: the sigmoid loss for SigLIP checkpoints, from their own t', b).
        evaluation: how val/test are evaluated (`EvaluationConfig`: MELON analyses; SALI's
            Rel-Multi and diagnosis, needing `data.shots`; tie rule; queries scored at once;
            pairwise memory per block; the test score matrix written to the run directory).
        spans: the interpersonal-verb rules that mark queries relational (and split them for SALI).
        frozen, warm_start: parameter-name prefixes to freeze, and a CLIP4Clip-meanP checkpoint whose
            encoder and logit scale initialise the model (`modules/initialization.py`).
        nonfinite: skip (and count) or stop on a NaN/infinite loss; skipped batches' ids are logged.
        grad_cache: train with gradient caching (GradCache, `modules/grad_cache.py`): the towers
            run `text_chunk` / `video_chunk` rows at a time, the loss and gradients stay the
            full batch's. Every head whose representations are row-wise works (see `check_grad_cache`).
        recipe_batch: the paper's contrastive batch (pairs per step, over all ranks under
            `cross_device`); a run whose batch differs warns once (`RecipeBatchCheck`), and so does
            one whose optimizer step averages another number of pairs (ranks x batch x accumulation).
    """

    def __init__(
        self,
        encoder: VideoTextEncoder,
        head: SimilarityHead,
        query_mode: QueryMode = "concat",
        optim: OptimConfig | None = None,
        mea: MEAConfig | None = None,
        event_loss: MeVTRLoss | None = None,
        evaluation: EvaluationConfig | None = None,
        spans: SpanSplitter | None = None,
        average_directions: bool = False,
        frozen: list[str] | None = None,
        warm_start: str | None = None,
        nonfinite: NonFinitePolicy | None = None,
        cross_device: bool = False,
        grad_cache: GradCacheConfig | None = None,
        recipe_batch: int | None = None,
        contrastive: ContrastiveConfig | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["encoder", "head", "event_loss"])
        if query_mode not in ("concat", "events"):
            raise ConfigError(f"query_mode must be 'concat' or 'events', got {query_mode!r}")
        self.encoder, self.head, self.query_mode = encoder, head, query_mode
        self.head.bind(encoder)
        self.optim = optim or OptimConfig()
        setup = contrastive_setup(contrastive, encoder, event_loss is not None)
        if setup.logit_scale is not None:
            with torch.no_grad():
                self.head.logit_scale.fill_(setup.logit_scale)
        self.objectives = TrainingObjectives(
            head, average_directions, mea, event_loss, cross_device, setup.loss, setup.logit_bias
        )
        self.grad_cache = grad_cache
        self.recipe_batch = RecipeBatchCheck("model.recipe_batch", recipe_batch)
        self.optimizer_batch = RecipeBatchCheck("model.recipe_batch", recipe_batch, "pairs per optimizer step")
        if grad_cache is not None:
            check_grad_cache(head)
        self.evaluator = RetrievalEvaluator(evaluation or EvaluationConfig())
        self.spans = spans or SpanSplitter()
        self.nonfinite = NonFiniteGuard(nonfinite)
        self.skipped_videos = 0
        self.eval_results: dict[str, dict[str, float]] = {}
        self.register_load_state_dict_pre_hook(rename_legacy_objective_keys)
        freeze_prefixes(self, frozen or [])
        if warm_start:
            load_warm_start(self.encoder, self.head.logit_scale, warm_start)

    def encode_queries(self, events: list[list[str]], mode: QueryMode | None = None) -> TextFeatures:
        """Text features of multi-event queries, one row per event list."""
        return encode_multi_event(self.encoder, events, mode or self.query_mode)

    def query_reps(self, events: list[list[str]], mode: QueryMode | None = None) -> Any:
        return self.head.encode_text(self.encode_queries(events, mode))

    def query_token_counts(self, events: list[list[str]]) -> list[int]:
        """Each query's untruncated length in the text tower's tokens (token slices, score files)."""
        return query_token_counts(self.encoder, events)

    def encode_texts(self, texts: StepTexts) -> Any:
        """The head's representations of a training step's texts: in one text-tower call, or
        `grad_cache.text_chunk` rows at a time under gradient caching."""
        if texts.captions is not None:
            rows, encode = texts.captions, self.encode_captions
        else:
            rows, encode = texts.queries + (texts.partial.events if texts.partial else []), self.query_reps
        if self.grad_cache is None:
            return encode(rows)
        return cached_encode(encode, rows, len(rows), self.grad_cache.text_chunk, self.head.logit_scale.device)

    def encode_captions(self, captions: list[str]) -> Any:
        return self.head.encode_text(self.encoder.encode_text(captions))

    def encode_videos(self, batch: dict[str, Any]) -> Any:
        video = self.encoder.encode_video(batch["frames"], batch["frame_mask"], with_patches=self.head.needs_patches)
        video.shots = batch.get("frame_shots")  # present when the data module detects shots
        return self.head.encode_video(video)

    def encode_training_videos(self, batch: dict[str, Any]) -> Any:
        """`encode_videos` of a training batch, `grad_cache.video_chunk` videos at a time under
        gradient caching."""
        if self.grad_cache is None:
            return self.encode_videos(batch)
        inputs = {k: batch[k] for k in ("frames", "frame_mask", "frame_shots") if batch.get(k) is not None}
        count, chunk = len(batch["frames"]), self.grad_cache.video_chunk
        return cached_encode(self.encode_videos, inputs, count, chunk, self.head.logit_scale.device)

    def forward(self, batch: dict[str, Any]) -> tuple[Any, Any]:
        return self.query_reps(batch["events"]), self.encode_videos(batch)

    def item_embedder(self, identity: Any, frames: FrameInput) -> ItemEmbedder:
        """This model as the `ItemEmbedder` of index, search and UVRB (indexable heads only)."""
        return DualEncoderEmbedder(
            self, identity, frames.num_frames, frames.image_size, frames.mean, frames.std, frames.sampling
        )

    def _count_skipped(self, batch: dict[str, Any]) -> None:
        for message in batch["skipped"]:
            self.print(f"skipped video: {message}")
        self.skipped_videos += len(batch["skipped"])

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> dict[str, Any] | None:
        self._count_skipped(batch)
        self.log("data/skipped_videos", float(self.skipped_videos), on_step=True, reduce_fx="max")
        size = len(batch["events"])
        if not self._contrastable(size):
            return None
        world = distributed_world() if self.objectives.cross_device else 1
        self.recipe_batch.check(size * world, self.global_rank, f"{world} rank(s) x {size} pairs contrasted per step")
        self._check_optimizer_batch(size)
        texts = self.objectives.texts(batch["events"], self.current_epoch, batch_idx, self.global_rank)
        step = self.objectives.score(self.head, texts, self.encode_texts(texts), self.encode_training_videos(batch))
        loss, terms = self.objectives(step)
        if not self.nonfinite.allows(self, loss, batch["video_id"]):
            self.log("train/nonfinite_skipped", float(self.nonfinite.skipped), batch_size=size)
            return None
        for name, value in terms.logged.items():
            self.log(f"train/{name}", value, batch_size=size)
        self.log("train/loss", loss, prog_bar=True, batch_size=size)
        self.log("train/logit_scale", self.head.logit_scale.detach(), batch_size=size)
        return {"loss": loss, "loss_value": loss.detach(), **terms.outputs}

    def _contrastable(self, size: int) -> bool:
        """Whether this step trains, decided alike on every rank (as `NonFiniteGuard`'s skip: a rank
        that skipped alone left the others waiting for its gradients). A step needs a second pair to
        contrast with: in the local batch, or under cross-device negatives in the gathered one, so
        one local pair per rank trains (MELON's 16 pairs on 16 GPUs). The gather needs as many pairs
        on every rank: a rank whose batch lost a video (`on_bad_video: skip`) makes every rank skip."""
        world = distributed_world()
        if world == 1:
            return size >= 2
        own = torch.tensor([size], device=self.head.logit_scale.device)
        sizes = [torch.empty_like(own) for _ in range(world)]
        torch.distributed.all_gather(sizes, own)
        if self.objectives.cross_device:
            return size > 0 and all(int(s) == size for s in sizes)
        return all(int(s) >= 2 for s in sizes)

    def _check_optimizer_batch(self, size: int) -> None:
        """Warns once when one optimizer step averages another number of pairs than `recipe_batch`:
        ranks x per-rank batch x gradient accumulation (without cross-device negatives each rank
        contrasts its own batch, yet DDP averages all ranks' gradients into one step: 16 GPUs of 16
        pairs take 16 times fewer steps per epoch than the paper's 16 at the same learning rate)."""
        trainer = self._trainer
        accumulation = trainer.accumulate_grad_batches if trainer is not None else 1
        world = distributed_world()
        if world * accumulation == 1:
            return
        self.optimizer_batch.check(
            size * world * accumulation,
            self.global_rank,
            f"{world} rank(s) x {size} pairs x {accumulation} accumulated batch(es) per optimizer step; "
            "keep the paper's steps per epoch with GPUs x per-GPU batch x accumulation = recipe_batch "
            "(model.cross_device: true for its negatives across GPUs)",
        )

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.head.clamp_logit_scale()

    def _eval_step(self, batch: dict[str, Any], stage: str) -> None:
        self._count_skipped(batch)
        self.evaluator.count_skipped(stage, batch["skipped_index"])
        if len(batch["index"]):
            with self.evaluator.encoding(self):  # the trainer's precision, or fp32 (`evaluation.fp32_encoders`)
                text, video = self(batch)
            retriever = self.evaluator.retriever_vectors(self, batch, stage)  # `evaluation.rerank` only
            self.evaluator.collect(stage, batch, text, video, self.spans, retriever)

    def _eval_end(self, stage: str) -> None:
        results = self.evaluator.evaluate(self, stage)
        if results:
            self.eval_results[stage] = results
            self.log_dict({f"{stage}/{k}": v for k, v in results.items()}, sync_dist=False)

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._eval_step(batch, "val")

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._eval_step(batch, "test")

    def on_validation_epoch_end(self) -> None:
        self._eval_end("val")

    def on_test_epoch_end(self) -> None:
        self._eval_end("test")

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["rng_states"] = rng_states(process_device(self)[2])
        record_head(checkpoint, self.head)

    def refuse_checkpoint(self, checkpoint: dict[str, Any], path: str, other_class_only: bool = False) -> None:
        """Refuses a checkpoint of another head in one line (`checkpoint_head.check_head`): called by
        the CLI (`other_class_only`) before its generic weight check, so the message names both heads."""
        check_head(checkpoint, self.head, path, other_class_only)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Refuses a checkpoint of another head (`refuse_checkpoint`), then restores the random states."""
        self.refuse_checkpoint(checkpoint, str(getattr(self._trainer, "ckpt_path", None) or "the checkpoint"))
        if "rng_states" in checkpoint:  # dropout and sampling continue as in an uninterrupted run
            set_rng_states(checkpoint["rng_states"], *process_device(self))

    def configure_optimizers(self):
        backbone = {f"encoder.{n}" for n in self.encoder.backbone_parameter_names()}
        optimizer = build_optimizer(parameter_groups(self, backbone, self.optim), self.optim)
        scheduler = build_scheduler(optimizer, int(self.trainer.estimated_stepping_batches), self.optim)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def check_grad_cache(head: SimilarityHead) -> None:
    """Refuses, in one line, a head that gradient caching cannot train exactly: chunks must give
    each row the representation the full batch gives it. Every indexable head does, and so do the
    pairwise heads X-CLIP, TS2-Net, UCoFiA, PAU, TightTransf (their token-level representations
    are cached and the pairwise score is computed on the full batch) -- all tested. UATVR cannot:
    it appends its learned extra text tokens after the words padded to the call's longest text
    and gives them the position embeddings of that length, so a row's representation depends on
    the other rows of its call. A head says so in `grad_cache_obstacle`."""
    if head.grad_cache_obstacle is not None:
        raise ConfigError(
            f"model.grad_cache cannot train {type(head).__name__}: {head.grad_cache_obstacle}; drop grad_cache"
        )
