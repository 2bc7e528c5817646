"""`DualEncoderRetrieval`: any encoder + any similarity head, trained with symmetric InfoNCE.

Training: L_std of MELON Eq. 2 on the batch's text x video logits. Multi-event queries are the
concatenated event descriptions (MELON Sec. 4.2) or, with `query_mode="events"`, each event
encoded alone and the features mean-pooled (MELON Tab. 5).

Evaluation: every query and video of the split is encoded once; the video representations of all
processes are gathered into one gallery (duplicates from distributed padding removed, ordered by
dataset index), each process scores its own queries against it, and `RetrievalMetrics`
synchronises the rows. Results are logged as `{stage}/t2v/R@1`, ... and kept in `eval_results`.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from torch import nn

from lit_retrieval.data.queries import QueryMode, concat_query
from lit_retrieval.losses.infonce import SymmetricInfoNCE
from lit_retrieval.metrics.ranking import Ties
from lit_retrieval.metrics.retrieval import RetrievalMetrics
from lit_retrieval.models.encoders.base import VideoTextEncoder
from lit_retrieval.models.features import TextFeatures
from lit_retrieval.models.heads.base import SimilarityHead
from lit_retrieval.modules.gather import gather_variable
from lit_retrieval.modules.optim import OptimConfig, build_optimizer, build_scheduler, parameter_groups


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


def _map_rep(rep: Any, fn) -> Any:
    return {k: fn(v) for k, v in rep.items()} if isinstance(rep, dict) else fn(rep)


def _cat_reps(reps: list[Any]) -> Any:
    if isinstance(reps[0], dict):
        return {k: torch.cat([r[k] for r in reps]) for k in reps[0]}
    return torch.cat(reps)


class DualEncoderRetrieval(L.LightningModule):
    """Text-video retrieval with a dual encoder and a swappable similarity head.

    Args:
        encoder: a `VideoTextEncoder` (e.g. `CLIPEncoder`).
        head: a `SimilarityHead` (e.g. `MeanPHead`).
        query_mode: `concat` (MELON Sec. 4.2) or `events` (per-event encoding + mean, Tab. 5).
        optim: learning rates (backbone vs. new layers), optimiser and warm-up + cosine schedule.
        average_directions: halve Eq. 2's sum of directions (CLIP4Clip's convention).
        ties: tie rule of the ranking metrics.
        score_chunk: query rows scored at once during evaluation.
        frozen: parameter-name prefixes to freeze (e.g. `encoder.text.model` keeps a pretrained
            text tower fixed while its new projection trains; CLIP4Clip's `freeze_layer_num`).
            A prefix naming a whole submodule also puts it in eval mode (no dropout).
    """

    def __init__(
        self,
        encoder: VideoTextEncoder,
        head: SimilarityHead,
        query_mode: QueryMode = "concat",
        optim: OptimConfig | None = None,
        average_directions: bool = False,
        ties: Ties = "optimistic",
        score_chunk: int = 1024,
        frozen: list[str] | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["encoder", "head"])
        if query_mode not in ("concat", "events"):
            raise ValueError(f"query_mode must be 'concat' or 'events', got {query_mode!r}")
        self.encoder = encoder
        self.head = head
        self.query_mode = query_mode
        self.optim = optim or OptimConfig()
        self.loss_fn = SymmetricInfoNCE(average_directions)
        self.metrics = nn.ModuleDict({stage: RetrievalMetrics(ties) for stage in ("val", "test")})
        self.score_chunk = score_chunk
        self.skipped_videos = 0
        self.eval_results: dict[str, dict[str, float]] = {}
        self._eval_cache: dict[str, list] = {}
        self.freeze_prefixes(frozen or [])

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

    def encode_queries(self, events: list[list[str]]) -> TextFeatures:
        if self.query_mode == "concat":
            return self.encoder.encode_text([concat_query(e) for e in events])
        features = self.encoder.encode_text([d for e in events for d in e])
        return pool_event_features(features, [len(e) for e in events])

    def forward(self, batch: dict[str, Any]) -> tuple[Any, Any]:
        text = self.head.encode_text(self.encode_queries(batch["events"]))
        video = self.encoder.encode_video(batch["frames"], batch["frame_mask"], with_patches=self.head.needs_patches)
        return text, self.head.encode_video(video)

    def _count_skipped(self, batch: dict[str, Any]) -> None:
        if batch["skipped"]:
            self.skipped_videos += len(batch["skipped"])
            for message in batch["skipped"]:
                self.print(f"skipped video: {message}")

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor | None:
        self._count_skipped(batch)
        self.log("data/skipped_videos", float(self.skipped_videos), on_step=True, reduce_fx="max")
        if len(batch["index"]) < 2:  # nothing to contrast against: skip the step
            return None
        text, video = self(batch)
        similarity = self.head.score(text, video)
        loss = self.loss_fn(self.head.logits(similarity))
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["index"]))
        self.log("train/logit_scale", self.head.logit_scale.detach(), batch_size=len(batch["index"]))
        return loss

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.head.clamp_logit_scale()

    def _eval_step(self, batch: dict[str, Any], stage: str) -> None:
        self._count_skipped(batch)
        if len(batch["index"]) == 0:
            return
        text, video = self(batch)
        cache = self._eval_cache.setdefault(stage, [])
        cache.append((text, video, batch["index"].to(self.device)))

    def _eval_end(self, stage: str) -> None:
        cache = self._eval_cache.pop(stage, [])
        if not cache:
            return
        text = _cat_reps([c[0] for c in cache])
        video = _cat_reps([c[1] for c in cache])
        index = torch.cat([c[2] for c in cache])
        all_index = gather_variable(self, index)
        gallery_ids, inverse = torch.unique(all_index, return_inverse=True)
        first = torch.full((len(gallery_ids),), len(all_index), device=index.device, dtype=torch.long)
        first = first.scatter_reduce(0, inverse, torch.arange(len(all_index), device=index.device), reduce="amin")
        gallery = _map_rep(video, lambda t: gather_variable(self, t)[first])
        targets = torch.searchsorted(gallery_ids, index)
        metric = self.metrics[stage]
        for start in range(0, len(index), self.score_chunk):
            rows = _map_rep(text, lambda t: t[start : start + self.score_chunk])
            metric.update(self.head.score(rows, gallery), targets[start : start + self.score_chunk], index[start : start + self.score_chunk])
        results = metric.compute()
        metric.reset()
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

    def configure_optimizers(self):
        backbone = {f"encoder.{n}" for n in self.encoder.backbone_parameter_names()}
        optimizer = build_optimizer(parameter_groups(self, backbone, self.optim), self.optim)
        scheduler = build_scheduler(optimizer, int(self.trainer.estimated_stepping_batches), self.optim)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
