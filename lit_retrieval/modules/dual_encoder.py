"""`DualEncoderRetrieval`: any encoder + any similarity head, trained with symmetric InfoNCE and,
optionally, the MEA loss.

Training: L_std of MELON Eq. 2 on the batch's text x video logits, plus lambda * L_mea (Eq. 9)
when `mea` is set: the batch's partial queries go through the text encoder in the same call as
the full queries, and the videos are encoded once. Multi-event queries are the concatenated event
descriptions (MELON Sec. 4.2) or, with `query_mode="events"`, each event encoded alone and the
features mean-pooled (MELON Tab. 5).

Evaluation: every query and video of the split is encoded once; the video representations of all
processes are gathered into one gallery (duplicates from distributed padding removed, ordered by
dataset index), each process scores its own queries against it, and `RetrievalMetrics`
synchronises the rows. Results are logged as `{stage}/t2v/R@1`, ... and kept in `eval_results`,
followed by the analyses `analyses` asks for (Avg-Event R@1, slices, event orders, query modes).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import lightning as L
import torch
from torch import nn

import numpy as np

from lit_retrieval.data.queries import QueryMode, concat_query, reorder_events
from lit_retrieval.data.spans import SpanSplitter
from lit_retrieval.losses.contrastive import distributed_world, gather_global
from lit_retrieval.losses.infonce import SymmetricInfoNCE
from lit_retrieval.losses.mevtr import MeVTRLoss
from lit_retrieval.metrics.analyses import EvalAnalyses, avg_event_hits, avg_event_metrics, sliced_metrics
from lit_retrieval.metrics.ranking import Ties, text_to_video_ranks
from lit_retrieval.metrics.relational import RelationalEval, relational_metrics
from lit_retrieval.metrics.retrieval import RetrievalMetrics, first_occurrence
from lit_retrieval.models.encoders.base import VideoTextEncoder
from lit_retrieval.models.features import TextFeatures
from lit_retrieval.models.heads.base import SimilarityHead, cat_reps, map_rep
from lit_retrieval.modules.gather import gather_variable
from lit_retrieval.modules.multi_event import MEAConfig, MultiEventObjective
from lit_retrieval.modules.nonfinite import NonFiniteGuard, NonFinitePolicy
from lit_retrieval.modules.optim import OptimConfig, build_optimizer, build_scheduler, parameter_groups
from lit_retrieval.modules.rng import rng_states, set_rng_states

# The config dataclasses sit in the checkpoint's hyper-parameters; allow them under torch.load's
# default weights_only=True, so resuming needs no unsafe unpickling.
torch.serialization.add_safe_globals([OptimConfig, MEAConfig, EvalAnalyses, RelationalEval, SpanSplitter, NonFinitePolicy])


def pool_event_features(features: TextFeatures, counts: list[int]) -> TextFeatures:
    """Per-event features -> one query each: mean of the pooled vectors (MELON Tab. 5 "event
    pooling"); the valid word tokens of a query's events are concatenated in order."""
    pooled = torch.stack([chunk.mean(0) for chunk in features.pooled.split(counts)])
    rows = [tok[m] for tok, m in zip(features.tokens, features.mask)]
    grouped, start = [], 0
    for count in counts:
        grouped.append(torch.cat(rows[start : start + count]))
        start += count
    longest = max(len(g) for g in grouped)
    tokens = features.tokens.new_zeros(len(counts), longest, features.tokens.shape[-1])
    mask = torch.zeros(len(counts), longest, dtype=torch.bool, device=tokens.device)
    for i, group in enumerate(grouped):
        tokens[i, : len(group)] = group
        mask[i, : len(group)] = True
    return TextFeatures(pooled=pooled, tokens=tokens, mask=mask)


class DualEncoderRetrieval(L.LightningModule):
    """Text-video retrieval with a dual encoder and a swappable similarity head.

    Args:
        encoder: a `VideoTextEncoder` (e.g. `CLIPEncoder`).
        head: a `SimilarityHead` (e.g. `MeanPHead`).
        query_mode: `concat` (MELON Sec. 4.2) or `events` (per-event encoding + mean, Tab. 5).
        optim: learning rates (backbone vs. new layers), optimiser and warm-up + cosine schedule.
        mea: add lambda * L_mea to the loss (MELON Eq. 9); `None` trains with L_std alone.
        event_loss: train on event captions instead of whole queries: every event description
            is its own text, scored against the batch's videos with this loss (MeVTR's
            multi-positive loss); evaluation still uses whole queries (`query_mode: events`
            mean-pools the events, as MELON evaluates MeVTR). Excludes `mea`.
        analyses: MELON analyses run after evaluation (Avg-Event R@1, slices, event orders, ...).
        relational_eval: SALI's relational / Rel-Multi metrics and shot-quartile diagnosis (needs
            `data.shots`); any head can report them, as SALI Tab. 2 does for its baselines.
        spans: the interpersonal-verb rules that mark queries relational (and split them for SALI).
        average_directions: halve Eq. 2's sum of directions (CLIP4Clip's convention).
        ties: tie rule of the ranking metrics.
        score_chunk: query rows encoded and scored at once during evaluation.
        eval_memory_mb: pairwise working memory a scoring block may use (pairwise heads such as
            tightTransf score in blocks of text x video pairs within it).
        frozen: parameter-name prefixes to freeze (e.g. `encoder.text.model` keeps a pretrained
            text tower fixed while its new projection trains; CLIP4Clip's `freeze_layer_num`).
            A prefix naming a whole submodule also puts it in eval mode (no dropout).
        warm_start: a checkpoint of this module with a CLIP4Clip-meanP head: its encoder and logit
            scale initialise this model before training (SALI's warm start; also "train meanP
            longer" controls, and any other head). A resumed fit still loads its own checkpoint.
        nonfinite: skip (and count) or stop on a NaN/infinite loss; skipped batches' video ids
            are logged.
        cross_device: under DDP, contrast against every rank's batch (InfoNCE and MEA; MEA's
            delta and xi then come from the global batch); indexable heads only. Every rank must
            present the same batch size.
    """

    def __init__(
        self,
        encoder: VideoTextEncoder,
        head: SimilarityHead,
        query_mode: QueryMode = "concat",
        optim: OptimConfig | None = None,
        mea: MEAConfig | None = None,
        event_loss: MeVTRLoss | None = None,
        analyses: EvalAnalyses | None = None,
        relational_eval: RelationalEval | None = None,
        spans: SpanSplitter | None = None,
        average_directions: bool = False,
        ties: Ties = "optimistic",
        score_chunk: int = 1024,
        eval_memory_mb: int = 2048,
        frozen: list[str] | None = None,
        warm_start: str | None = None,
        nonfinite: NonFinitePolicy | None = None,
        cross_device: bool = False,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["encoder", "head", "event_loss"])
        if query_mode not in ("concat", "events"):
            raise ValueError(f"query_mode must be 'concat' or 'events', got {query_mode!r}")
        self.encoder = encoder
        self.head = head
        self.head.bind(encoder)
        self.query_mode = query_mode
        self.optim = optim or OptimConfig()
        self.loss_fn = SymmetricInfoNCE(average_directions)
        self.mea = MultiEventObjective(mea) if mea is not None else None
        if mea is not None and event_loss is not None:
            raise ValueError("event_loss (MeVTR) and mea are exclusive: MeVTR trains with its own loss only")
        self.event_loss = event_loss
        self.analyses = analyses
        self.relational_eval = relational_eval
        self.spans = spans or SpanSplitter()
        self.ties = ties
        self.metrics = nn.ModuleDict({stage: RetrievalMetrics(ties) for stage in ("val", "test")})
        self.score_chunk = score_chunk
        self.eval_budget = eval_memory_mb * 2**20
        self.skipped_videos = 0
        self.eval_results: dict[str, dict[str, float]] = {}
        self._eval_cache: dict[str, list] = {}
        self.nonfinite = NonFiniteGuard(nonfinite)
        if cross_device and not head.indexable:
            raise ValueError(f"cross_device needs an indexable head (one vector per text and video); {type(head).__name__} is not")
        self.cross_device = cross_device
        self.freeze_prefixes(frozen or [])
        if warm_start:
            self.warm_start_from(warm_start)

    def freeze_prefixes(self, prefixes: list[str]) -> None:
        """Stop gradients for parameters whose name starts with one of `prefixes`."""
        names = [n for n, _ in self.named_parameters()]
        for prefix in prefixes:
            if not any(n == prefix or n.startswith(prefix + ".") for n in names):
                raise ValueError(f"frozen prefix {prefix!r} matches no parameter (e.g. {names[:3]})")
        for name, param in self.named_parameters():
            if any(name == p or name.startswith(p + ".") for p in prefixes):
                param.requires_grad_(False)
        modules = dict(self.named_modules())
        for prefix in prefixes:  # a wholly frozen submodule also stops dropout
            if prefix in modules:
                modules[prefix].eval()

    def warm_start_from(self, path: str) -> None:
        """Load the encoder and logit scale of a `DualEncoderRetrieval` checkpoint with a
        parameter-free (CLIP4Clip-meanP) head; the encoder configs must match."""
        try:
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
        except FileNotFoundError:
            raise FileNotFoundError(f"warm_start checkpoint not found: {path}") from None
        state = checkpoint.get("state_dict", checkpoint)
        head_keys = sorted(k for k in state if k.startswith("head.") and k != "head.logit_scale")
        if head_keys:
            raise ValueError(f"{path}: warm_start expects a CLIP4Clip-meanP checkpoint (parameter-free head), found {head_keys[:3]}")
        encoder_state = {k[len("encoder.") :]: v for k, v in state.items() if k.startswith("encoder.")}
        try:
            self.encoder.load_state_dict(encoder_state, strict=True)
        except RuntimeError as err:
            raise ValueError(f"{path}: its encoder does not match this model's encoder config: {err}") from None
        if "head.logit_scale" in state:
            with torch.no_grad():
                self.head.logit_scale.copy_(state["head.logit_scale"])

    def encode_queries(self, events: list[list[str]], mode: QueryMode | None = None) -> TextFeatures:
        """Text features of multi-event queries, one row per event list."""
        if (mode or self.query_mode) == "concat":
            return self.encoder.encode_text([concat_query(e) for e in events])
        features = self.encoder.encode_text([d for e in events for d in e])
        return pool_event_features(features, [len(e) for e in events])

    def encode_videos(self, batch: dict[str, Any]) -> Any:
        video = self.encoder.encode_video(batch["frames"], batch["frame_mask"], with_patches=self.head.needs_patches)
        video.shots = batch.get("frame_shots")  # present when the data module detects shots
        return self.head.encode_video(video)

    def forward(self, batch: dict[str, Any]) -> tuple[Any, Any]:
        return self.head.encode_text(self.encode_queries(batch["events"])), self.encode_videos(batch)

    def _count_skipped(self, batch: dict[str, Any]) -> None:
        if batch["skipped"]:
            self.skipped_videos += len(batch["skipped"])
            for message in batch["skipped"]:
                self.print(f"skipped video: {message}")

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> dict[str, Any] | None:
        self._count_skipped(batch)
        self.log("data/skipped_videos", float(self.skipped_videos), on_step=True, reduce_fx="max")
        events = batch["events"]
        size = len(events)
        if size < 2:  # nothing to contrast against: skip the step
            return None
        if self.event_loss is not None:
            return self._event_caption_step(batch, size)
        partial = self.mea.partial_queries(events, self.current_epoch, batch_idx, self.global_rank) if self.mea else None
        text_all = self.head.encode_text(self.encode_queries(events + (partial.events if partial else [])))
        text = map_rep(text_all, lambda t: t[:size])
        video = self.encode_videos(batch)
        world = distributed_world() if self.cross_device else 1
        if world > 1:  # cross-device negatives: every rank scores the global batch, its own block is the local one
            contrast = self.head.score(map_rep(text, gather_global), map_rep(video, gather_global))
            own = slice(self.global_rank * size, (self.global_rank + 1) * size)
            similarity = contrast[own, own]
        else:
            contrast = similarity = self.head.score(text, video)
        loss_std = self.loss_fn(self.head.logits(contrast))
        loss = loss_std
        out: dict[str, Any] = {"loss_std": loss_std.detach()}
        for name, term in self.head.auxiliary_losses(text, video, similarity).items():
            loss = loss + term
            out[f"aux_{name}"] = term.detach()
            self.log(f"train/aux/{name}", term.detach(), batch_size=size)
        if partial is not None:
            partial_sim, mask = self.mea.partial_scores(self.head, map_rep(text_all, lambda t: t[size:]), video, partial, similarity)
            if world > 1:  # delta and xi then come from the global batch, identical on every rank
                partial_sim, mask = gather_global(partial_sim), gather_global(mask.to(torch.uint8)).bool()
            mea = self.mea.loss(contrast, partial_sim, mask)
            loss = loss + self.mea.config.weight * mea.loss
            out.update({f"mea_{k}": getattr(mea, k).detach() for k in ("loss", "push", "pull", "theta", "delta", "xi")})
        if not self.nonfinite.allows(self, loss, batch["video_id"]):
            self.log("train/nonfinite_skipped", float(self.nonfinite.skipped), batch_size=size)
            return None
        self.log("train/loss", loss, prog_bar=True, batch_size=size)
        self.log("train/logit_scale", self.head.logit_scale.detach(), batch_size=size)
        return {"loss": loss, "loss_value": loss.detach(), **out}

    def _event_caption_step(self, batch: dict[str, Any], size: int) -> dict[str, Any]:
        """Every event description is a caption of its video (MeVTR's training setting)."""
        assert self.event_loss is not None
        captions = [d for e in batch["events"] for d in e]
        owner = torch.tensor([i for i, e in enumerate(batch["events"]) for _ in e], device=self.device)
        text = self.head.encode_text(self.encoder.encode_text(captions))
        loss = self.event_loss(self.head.logits(self.head.score(text, self.encode_videos(batch))), owner)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite event-caption loss at epoch {self.current_epoch}")
        self.log("train/loss", loss, prog_bar=True, batch_size=size)
        return {"loss": loss, "loss_std": loss.detach()}

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.head.clamp_logit_scale()

    def _eval_step(self, batch: dict[str, Any], stage: str) -> None:
        self._count_skipped(batch)
        if len(batch["index"]) == 0:
            return
        text, video = self(batch)
        cache = self._eval_cache.setdefault(stage, [])
        cache.append((text, video, batch["index"].to(self.device), batch["events"], self.query_attributes(batch)))

    def query_attributes(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """Per-query values kept for the analyses after evaluation (`[B]` tensors): duration, and
        with `relational_eval` the relational flag and the video's shot count."""
        out = {"duration": batch["duration"].to(self.device)}
        if self.relational_eval is not None:
            if "num_shots" not in batch:
                raise ValueError("relational_eval needs each video's shot count: set `data.shots`")
            flags = [self.spans.split(concat_query(e)).relational for e in batch["events"]]
            out["relational"] = torch.tensor(flags, dtype=torch.bool, device=self.device)
            out["num_shots"] = batch["num_shots"].to(self.device)
        return out

    def _eval_end(self, stage: str) -> None:
        cache = self._eval_cache.pop(stage, [])
        if not cache:
            return
        text = cat_reps([c[0] for c in cache])
        video = cat_reps([c[1] for c in cache])
        index = torch.cat([c[2] for c in cache])
        events = [e for c in cache for e in c[3]]
        attributes = {k: torch.cat([c[4][k] for c in cache]) for k in cache[0][4]}
        gallery_ids, first = first_occurrence(gather_variable(self, index))
        gallery = map_rep(video, lambda t: gather_variable(self, t)[first])
        targets = torch.searchsorted(gallery_ids, index)
        if self.head.calibration_bank:
            gallery = self.head.calibrate(self._query_bank(self.head.calibration_bank), gallery, self.eval_budget)
        metric = self.metrics[stage]
        self.head.before_evaluation(stage)
        ranks = []
        for start in range(0, len(index), self.score_chunk):
            rows = slice(start, start + self.score_chunk)
            scores = self.head.score_blocks(map_rep(text, lambda t: t[rows]), gallery, self.eval_budget)
            metric.update(scores, targets[rows], index[rows])
            ranks.append(text_to_video_ranks(scores.float(), targets[rows], self.ties))
        results = metric.compute()
        metric.reset()
        if stage == "val" and type(self.head).fit_on_validation is not SimilarityHead.fit_on_validation:
            # every process's queries, in gallery order: query i belongs to gallery video i
            all_text = map_rep(text, lambda t: gather_variable(self, t)[first])
            results.update(self.head.fit_on_validation(all_text, gallery, torch.arange(len(gallery_ids), device=index.device)))
        ranks = torch.cat(ranks)
        if self.analyses is not None and stage in self.analyses.stages:
            results.update(self._analyses(events, index, targets, attributes["duration"], ranks, gallery))
        if self.relational_eval is not None and stage in self.relational_eval.stages:
            merged = {k: gather_variable(self, v)[first] for k, v in {"rank": ranks.to(index.device), **attributes}.items()}
            results.update(relational_metrics(merged["rank"], merged["relational"], merged["num_shots"], self.relational_eval))
        self.eval_results[stage] = results
        self.log_dict({f"{stage}/{k}": v for k, v in results.items()}, sync_dist=False)

    def _query_bank(self, size: int) -> Any:
        """Text representations of `size` queries of the training split (seeded draw), the bank of
        test-time calibrations such as UCoFiA's SK-norm; never the evaluated split."""
        datasets = getattr(self.trainer.datamodule, "datasets", {}) if self.trainer is not None else {}
        if "train" not in datasets:
            raise ValueError("the head's calibration needs the training split as its query bank (data.train_split)")
        events = [record.descriptions for record in datasets["train"].records]
        chosen = np.random.default_rng(0).permutation(len(events))[:size]
        bank = [events[i] for i in chosen]
        return cat_reps([
            self.head.encode_text(self.encode_queries(bank[start : start + self.score_chunk])) for start in range(0, len(bank), self.score_chunk)
        ])

    def _score_queries(self, events: list[list[str]], gallery: Any, mode: QueryMode | None = None) -> Iterator[tuple[slice, torch.Tensor]]:
        """Yield (row slice, scores) for `events` encoded as queries, `score_chunk` rows at a time."""
        for start in range(0, len(events), self.score_chunk):
            text = self.head.encode_text(self.encode_queries(events[start : start + self.score_chunk], mode))
            yield slice(start, start + self.score_chunk), self.head.score_blocks(text, gallery, self.eval_budget)

    def _analyses(
        self, events: list[list[str]], index: torch.Tensor, targets: torch.Tensor, durations: torch.Tensor, ranks: torch.Tensor, gallery: Any
    ) -> dict[str, float]:
        """The `EvalAnalyses` of this process's queries against the whole gallery, merged over ranks."""
        config = self.analyses
        assert config is not None
        num_events = torch.tensor([len(e) for e in events], device=index.device)
        per_query = {"rank": ranks.to(index.device), "num_events": num_events, "duration": durations.double()}
        out: dict[str, float] = {}
        if config.avg_event:
            singles = [[d] for e in events for d in e]
            owner = torch.repeat_interleave(torch.arange(len(events), device=index.device), num_events)
            single_ranks = torch.cat([
                text_to_video_ranks(scores.float(), targets[owner[rows]], self.ties) for rows, scores in self._score_queries(singles, gallery)
            ])
            per_query["avg_event"] = avg_event_hits(single_ranks.to(index.device), owner, len(events))
        _, first = first_occurrence(gather_variable(self, index))
        merged = {k: gather_variable(self, v)[first] for k, v in per_query.items()}
        if config.slices:
            out.update(sliced_metrics(merged["rank"], merged["num_events"], merged["duration"], config.length_edges))
        if config.avg_event:
            out.update(avg_event_metrics(merged["avg_event"], merged["num_events"]))
        variants: dict[str, tuple[list[list[str]], QueryMode | None]] = {}
        for order in config.event_orders:
            reordered = [reorder_events(e, order, np.random.default_rng([config.seed, int(i)])) for e, i in zip(events, index)]
            variants[f"order/{order}"] = (reordered, None)
        for mode in config.query_modes:
            variants[f"query_mode/{mode}"] = (events, mode)
        for name, (variant_events, mode) in variants.items():
            metric = RetrievalMetrics(self.ties).to(self.device)
            for rows, scores in self._score_queries(variant_events, gallery, mode):
                metric.update(scores, targets[rows], index[rows])
            out.update({f"{name}/{k}": v for k, v in metric.compute().items()})
        return out

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._eval_step(batch, "val")

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._eval_step(batch, "test")

    def on_validation_epoch_end(self) -> None:
        self._eval_end("val")

    def on_test_epoch_end(self) -> None:
        self._eval_end("test")

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["rng_states"] = rng_states()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if "rng_states" in checkpoint:  # dropout and sampling continue as in an uninterrupted run
            set_rng_states(checkpoint["rng_states"])

    def configure_optimizers(self):
        backbone = {f"encoder.{n}" for n in self.encoder.backbone_parameter_names()}
        optimizer = build_optimizer(parameter_groups(self, backbone, self.optim), self.optim)
        scheduler = build_scheduler(optimizer, int(self.trainer.estimated_stepping_batches), self.optim)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
