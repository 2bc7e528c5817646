"""`RetrievalEvaluator`: the one evaluation path of the retrieval modules.

An evaluation stage (`val`, `test`) collects one `EvalBatch` per batch: the head's
representations of the batch's queries and videos, their dataset indices and per-query
attributes. At the end of the stage the evaluator

1. gathers the video representations of every process into one gallery, ordered by dataset
   index, the duplicates a distributed sampler adds removed (`EvalSplit`);
2. scores this process's queries against it, `query_rows` queries at a time, each block within a
   pairwise working-memory budget (`SimilarityHead.score_blocks`);
3. computes R@K, MdR, MnR in both directions (`RetrievalMetrics`, rows merged over processes) and
   SALI's relational metrics (`RelationalConfig`: relational / Rel-Multi, shot-quartile diagnosis;
   SALI Sec. 2 and 4);
4. reports how many videos were skipped as undecodable (each video once: the duplicates a
   distributed sampler adds are not counted again), and refuses an evaluation in which nothing
   could be evaluated (`NothingToEvaluateError`);
5. optionally writes the test score matrix (`save_scores`: gathered here, written by
   `lit_retrieval.metrics.score_files`, whose docstring is the format).

The options that run besides the metrics are methods of the evaluator, called from `evaluate`; each
hands plain inputs (score rows, targets, ids, settings) to functions that return results, and merges
what they return over processes (no function below calls back into the evaluator):

- the MELON analyses (`analyses`; `AnalysesConfig`: Avg-Event R@1, slices, event orders, query modes;
  MELON Sec. 5.3, Tab. 5-6, Fig. 5-6): the queries and values of `lit_retrieval.modules.analyses`;
- on `test`, re-scoring the merged matrix (`rescored`; `rescore`: the methods of
  `lit_retrieval.metrics.rescoring.RESCORINGS`, QB-Norm's querybank drawn by `query_bank`), keyed
  by the method beside the raw metrics;
- on `test`, re-ranking (`reranked`; `rerank`): an indexable retriever, CLIP4Clip's meanP on the module's
  own encoder features (`retriever_vectors`), picks each query's top K and the head scores only those
  (`lit_retrieval.modules.reranking`), reported as `rerank/t2v/...` beside the full scoring.

Video-to-text with several captions per video follows `v2t_rule` (ours `strict`, or CLIP4Clip's
`group_max`; `lit_retrieval.metrics.ranking`), text-to-video ranks every caption as one query.

Precision: every score and rank is computed in float32 whatever the trainer's precision. The
representations are cast to float32 when collected, and scoring runs with autocast off and the
head's weights in float32 (`SimilarityHead.score_blocks`, `lit_retrieval.precision`): under
`bf16-mixed` a bf16 score matrix ties positives with negatives, and the tie rule then decides
ranks. The encoders (and the heads' `encode_text`/`encode_video`) run in the trainer's precision
by default, as in `validation_step`, also where the evaluator encodes queries itself (analyses,
calibration banks); `fp32_encoders` runs them with autocast off instead (see `EvaluationConfig`).

Under DeepSpeed ZeRO-3 the head's weights are gathered for the stage (`lit_retrieval.precision.whole_weights`):
scoring, calibration and validation fits call the head outside the engine's forward, where ZeRO-3
leaves them partitioned (tests/training/test_deepspeed_heads.py runs every head with weights).

Under DDP every rank takes part in every merge, also a rank without a single query (all of its
videos skipped): it evaluates zero rows shaped like another rank's (`EvalBatch.empty`), so every
rank reports the metrics one process would.

`GVERetrieval` ranks its per-task galleries with the same block scoring and metrics (`rank`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import lightning as L
import numpy as np
import torch

from lit_retrieval.data.text.queries import QueryMode, concat_query
from lit_retrieval.data.text.spans import SpanSplitter
from lit_retrieval.distributed import distributed_world, gather_objects, gather_variable
from lit_retrieval.errors import ConfigError, InputError
from lit_retrieval.metrics.analyses import AnalysesConfig
from lit_retrieval.metrics.ranking import Ties, V2TRule, retrieval_metrics, text_to_video_ranks
from lit_retrieval.metrics.relational import RelationalConfig, relational_metrics
from lit_retrieval.metrics.rerank import RerankConfig
from lit_retrieval.metrics.analyses import avg_event_hits
from lit_retrieval.metrics.rerank import RerankResult
from lit_retrieval.metrics.rescoring import QueryBank, RescoreConfig, rescored_metrics
from lit_retrieval.metrics.retrieval import RetrievalMetrics, blockwise_metrics, first_occurrence
from lit_retrieval.metrics.score_files import RELATIONAL_KEYS, write_bank, write_scores
from lit_retrieval.models.heads.base import SimilarityHead, cat_reps, map_rep, rep_len
from lit_retrieval.modules.analyses import (
    merged_analyses,
    per_query_values,
    query_variants,
    single_event_queries,
    token_counts,
)
from lit_retrieval.modules.reranking import rerank_split, retriever_reps
from lit_retrieval.precision import autocast_off, full_precision, full_precision_scoring, whole_weights

ScoreFn = Callable[[Any, Any], torch.Tensor]


class NothingToEvaluateError(InputError, RuntimeError):
    """An evaluation stage without a single query (every video skipped, or an empty split); the
    command line reports it as one line."""


@dataclass
class EvaluationConfig:
    """How a stage is evaluated.

    Args:
        analyses: MELON analyses run after the standard metrics (`None`: none).
        relational: SALI's relational / Rel-Multi metrics and diagnosis (`None`: none).
        ties: tie rule of the ranking metrics (`optimistic`, `pessimistic`, `average`).
        query_rows: queries encoded and scored at once.
        memory_mb: pairwise working memory one scoring block may use (pairwise heads such as
            tightTransf score blocks of text x video pairs within it).
        save_scores: write the test split's text x video score matrix to the run directory
            (`scores.npy` + `scores_ids.json`; the format: `lit_retrieval.metrics.score_files`).
        fp32_encoders: run the encoders and the heads' encoding with autocast off, so that
            weights kept in float32 (`32`, `bf16-mixed`, `16-mixed`) compute representations in
            float32 and the metrics equal an fp32 evaluation of the same weights (weights stored
            in bf16, `bf16-true` or DeepSpeed's bf16, stay bf16). Default off: the encoders run
            in the precision the model was trained in, bf16's fast path on GPUs; scores and ranks
            are float32 either way, so only the representations' rounding differs (measured on
            the quick-start in docs/melon.md, "Retrieval metrics").
        v2t_rule: video-to-text with several captions per video: `strict` (ours: the best caption
            among all captions, keys `v2t/...`) or `group_max` (CLIP4Clip's group maximum, keys
            `v2t_group_max/...`).
        rescore: re-scorings of the test matrix reported beside the raw metrics (`RescoreConfig`,
            one field per method of `lit_retrieval.metrics.rescoring.RESCORINGS`: `dsl`,
            `inverted_softmax`, `qbnorm`, each keyed by its name, `dsl/...`, `inverted_softmax/...`,
            `qbnorm/...`; `None`: raw only).
        rerank: retrieve-then-rerank on test (`RerankConfig`: `k`), keys `rerank/t2v/...` and
            `rerank/recall_ceiling`, beside the full scoring, or instead of it with
            `full_scoring: false` (then no test option that needs the full matrix may be set).
            `None`: off.
    """

    analyses: AnalysesConfig | None = None
    relational: RelationalConfig | None = None
    ties: Ties = "optimistic"
    query_rows: int = 1024
    memory_mb: int = 2048
    save_scores: bool = False
    fp32_encoders: bool = False
    v2t_rule: V2TRule = "strict"
    rescore: RescoreConfig | None = None
    rerank: RerankConfig | None = None

    def __post_init__(self) -> None:
        if self.query_rows < 1 or self.memory_mb < 1:
            raise ConfigError(f"query_rows and memory_mb must be >= 1, got {self.query_rows} and {self.memory_mb}")
        if self.rerank is not None and not self.rerank.full_scoring:
            needs_matrix = {
                "analyses": self.analyses is not None and "test" in self.analyses.stages,
                "relational": self.relational is not None and "test" in self.relational.stages,
                "save_scores": self.save_scores,
                "rescore": self.rescore is not None,
            }
            if any(needs_matrix.values()):
                names = ", ".join(f"evaluation.{name}" for name, on in needs_matrix.items() if on)
                raise ConfigError(f"evaluation.rerank.full_scoring: false leaves no test score matrix for {names}")

    @property
    def budget_bytes(self) -> int:
        return self.memory_mb * 2**20


class RetrievalModel(Protocol):
    """What the evaluator needs from a module besides being a LightningModule."""

    head: SimilarityHead

    def query_reps(self, events: list[list[str]], mode: QueryMode | None = None) -> Any:
        """The head's representations of multi-event queries (`mode`: another query encoding)."""


@dataclass
class EvalBatch:
    """One evaluation batch: query i describes video i (the same dataset record)."""

    text: Any  # head representations of the queries
    video: Any  # head representations of the videos
    index: torch.Tensor  # [B] dataset index of each record
    events: list[list[str]]  # each query's event descriptions
    video_ids: list[str]
    attributes: dict[str, torch.Tensor]  # [B] per-query values the analyses read (duration, ...)
    retriever: dict[str, torch.Tensor] | None = None  # `rerank`'s retriever vectors: {"text", "video"}

    def empty(self) -> EvalBatch:
        """This batch with no rows (on the CPU): what a rank without batches evaluates."""
        rows = slice(0, 0)
        none = lambda t: t[rows].cpu()  # noqa: E731
        attributes = {k: none(v) for k, v in self.attributes.items()}
        retriever = None if self.retriever is None else map_rep(self.retriever, none)
        text, video = map_rep(self.text, none), map_rep(self.video, none)
        return EvalBatch(text, video, none(self.index), [], [], attributes, retriever)

    def to(self, device: torch.device) -> EvalBatch:
        move = lambda t: t.to(device)  # noqa: E731
        attributes = {k: move(v) for k, v in self.attributes.items()}
        text, video = map_rep(self.text, move), map_rep(self.video, move)
        retriever = None if self.retriever is None else map_rep(self.retriever, move)
        return EvalBatch(text, video, move(self.index), self.events, self.video_ids, attributes, retriever)


@dataclass
class EvalSplit:
    """This process's queries and the gallery of every process's videos."""

    text: Any
    index: torch.Tensor  # dataset index of each local query
    events: list[list[str]]
    attributes: dict[str, torch.Tensor]
    targets: torch.Tensor  # gallery column of each local query's video
    gallery: Any  # every process's videos, ordered by dataset index
    gallery_ids: torch.Tensor  # dataset index of each gallery column
    video_ids: list[str]  # id of each gallery column's video
    retriever: dict[str, torch.Tensor] | None = None  # `rerank`: local "text" rows, every process's "video"


@dataclass
class RankedQueries:
    """Metrics of a set of queries against a gallery, each query's text-to-video rank, and (when
    kept) its score rows."""

    metrics: dict[str, float]
    ranks: torch.Tensor
    scores: torch.Tensor | None = None


class RetrievalEvaluator:
    """Collects evaluation batches per stage and evaluates them (module docstring)."""

    def __init__(self, config: EvaluationConfig | None = None) -> None:
        self.config = config or EvaluationConfig()
        self._batches: dict[str, list[EvalBatch]] = {}
        self._skipped: dict[str, list[torch.Tensor]] = {}

    def collect(
        self,
        stage: str,
        batch: dict[str, Any],
        text: Any,
        video: Any,
        spans: SpanSplitter,
        retriever: dict[str, torch.Tensor] | None = None,
    ) -> None:
        """Keep a data batch's query and video representations, and the per-query values the
        analyses read (`[B]` tensors): duration, and with `relational` the relational flag
        (`spans`) and the video's shot count; with `rerank`, the retriever's vectors
        (`retriever_vectors`)."""
        device = batch["frames"].device
        attributes = {"duration": torch.as_tensor(batch["duration"], dtype=torch.float64, device=device)}
        if self.config.relational is not None:
            if "num_shots" not in batch:
                raise ValueError("evaluation.relational needs each video's shot count: set `data.shots`")
            flags = [spans.split(concat_query(e)).relational for e in batch["events"]]
            attributes["relational"] = torch.tensor(flags, dtype=torch.bool, device=device)
            attributes["num_shots"] = batch["num_shots"].to(device)
        text, video = map_rep(text, full_precision), map_rep(video, full_precision)
        retriever = None if retriever is None else map_rep(retriever, full_precision)
        record = EvalBatch(
            text, video, batch["index"].to(device), batch["events"], batch["video_id"], attributes, retriever
        )
        self._batches.setdefault(stage, []).append(record)

    def count_skipped(self, stage: str, index: torch.Tensor) -> None:
        """Note the dataset indices of a batch's skipped (undecodable) videos."""
        self._skipped.setdefault(stage, []).append(index.long().cpu())

    def retriever_vectors(
        self, model: L.LightningModule, batch: dict[str, Any], stage: str
    ) -> dict[str, torch.Tensor] | None:
        """With `rerank` on `test`, the retriever's vectors of a batch (`reranking.retriever_reps` of the
        module's own text and frame features, encoded in the evaluation's precision); `None` otherwise."""
        if self.config.rerank is None or stage != "test":
            return None
        with self.encoding(model):
            text = model.encode_queries(batch["events"])
            video = model.encoder.encode_video(batch["frames"], batch["frame_mask"])
        return retriever_reps(text, video)

    def wants(self, stage: str, option: AnalysesConfig | RelationalConfig | None) -> bool:
        return option is not None and stage in option.stages

    def encoding(self, model: L.LightningModule) -> AbstractContextManager:
        """The precision representations are computed in at evaluation: the trainer's (autocast
        under `*-mixed`, as in `validation_step`), or with `fp32_encoders` autocast off."""
        if self.config.fp32_encoders:
            return autocast_off(model.device)
        return model.trainer.precision_plugin.forward_context()

    # ---- shared by every module -----------------------------------------------------------------
    def rank(
        self,
        score: ScoreFn,
        text: Any,
        gallery: Any,
        targets: torch.Tensor,
        query_ids: torch.Tensor,
        synced: bool = True,
        keep_scores: bool = False,
    ) -> RankedQueries:
        """Score `text` against `gallery`, `query_rows` queries at a time, and compute the
        retrieval metrics: without `keep_scores` and with the `strict` video-to-text rule in memory
        bounded by `memory_mb` (`blockwise_metrics`: no score matrix is held or gathered), else from
        the rows gathered to every rank (`RetrievalMetrics`; the matrix is what was asked for).
        With `synced` the rows of every process are merged (by `query_ids`)
        before the metrics; without, the rows are taken to be the whole split already. Scores
        are computed from float32 representations with autocast off (module docstring)."""
        text, gallery = map_rep(text, full_precision), map_rep(gallery, full_precision)
        if not keep_scores and self.config.v2t_rule == "strict":  # bounded memory (`blockwise_metrics`)
            with autocast_off(targets.device):
                metrics, ranks = blockwise_metrics(
                    lambda: self.score_rows(score, text, gallery),
                    targets,
                    query_ids,
                    rep_len(gallery),
                    self.config.ties,
                    self.config.budget_bytes,
                    synced,
                )
            return RankedQueries(metrics, ranks.to(targets.device))
        metric = RetrievalMetrics(self.config.ties, self.config.v2t_rule, sync_on_compute=synced).to(targets.device)
        ranks, kept = [], []
        with autocast_off(targets.device):
            for rows, scores in self.score_rows(score, text, gallery):
                metric.update(scores, targets[rows], query_ids[rows])
                ranks.append(text_to_video_ranks(scores, targets[rows], self.config.ties))
                if keep_scores:
                    kept.append(scores)
        return RankedQueries(metric.compute(), torch.cat(ranks).to(targets.device), torch.cat(kept) if kept else None)

    def score_rows(self, score: ScoreFn, text: Any, gallery: Any) -> Iterator[tuple[slice, torch.Tensor]]:
        """(row slice, scores) of `text` against `gallery`, `query_rows` rows at a time (one empty
        block without rows, so that a rank without queries still merges its metrics)."""
        if rep_len(text) == 0:
            yield slice(0, 0), no_rows(gallery)
            return
        for start in range(0, rep_len(text), self.config.query_rows):
            rows = slice(start, start + self.config.query_rows)
            yield rows, score(map_rep(text, lambda t: t[rows]), gallery)

    # ---- the dual-encoder family ----------------------------------------------------------------
    def evaluate(self, model: L.LightningModule, stage: str) -> dict[str, float]:
        """Metrics and analyses of `stage` from the batches collected since the last call, the head's
        weights whole (`whole_weights`: under ZeRO-3 its scoring runs outside the engine's forward)."""
        with whole_weights(model.head):
            return self._evaluate(model, stage)

    def _evaluate(self, model: L.LightningModule, stage: str) -> dict[str, float]:
        batches = self._batches.pop(stage, [])
        skipped_index = torch.cat(self._skipped.pop(stage, []) or [torch.zeros(0, dtype=torch.long)])
        # a video is skipped once, however many ranks the sampler's padding sent it to
        skipped = len(torch.unique(gather_variable(model, skipped_index.to(model.device))))
        local = torch.tensor([sum(len(b.index) for b in batches)], device=model.device)
        queries = int(gather_variable(model, local).sum())
        if queries == 0:
            reason = (
                f"all {skipped} videos were skipped as undecodable (data.on_bad_video: skip)"
                if skipped
                else "the split has no videos"
            )
            raise NothingToEvaluateError(f"{stage} split: nothing could be evaluated: {reason}")
        batches = self.with_shapes(model, batches)
        head: SimilarityHead = model.head
        split = self.gather(model, batches)
        if head.calibration_bank:
            bank = self.query_bank(model, head.calibration_bank)
            with full_precision_scoring(head, model.device):
                split.gallery = head.calibrate(bank, split.gallery, self.config.budget_bytes)
        head.before_evaluation(stage)
        if stage == "test" and self.config.rerank is not None and not self.config.rerank.full_scoring:
            results = self.reranked(model, split)
            if skipped:
                results["skipped_videos"] = float(skipped)
            return results
        save = self.config.save_scores and stage == "test"
        rescore = self.config.rescore is not None and stage == "test"
        ranked = self.rank(
            self.head_score(head), split.text, split.gallery, split.targets, split.index, keep_scores=save or rescore
        )
        results = ranked.metrics
        if rescore:
            results.update(self.rescored(model, split, ranked.scores))
        if self.config.rerank is not None and stage == "test":
            results.update(self.reranked(model, split))
        if stage == "val" and type(head).fit_on_validation is not SimilarityHead.fit_on_validation:
            # every process's queries in dataset order, each with its gallery column
            all_text = self.merge_queries(model, split, split.text)
            targets = self.merge_queries(model, split, split.targets)
            with full_precision_scoring(head, model.device):
                results.update(head.fit_on_validation(all_text, split.gallery, targets, retrieval_metrics))
        if self.wants(stage, self.config.analyses):
            results.update(self.analyses(model, split, ranked.ranks))
        if self.wants(stage, self.config.relational):
            merged = {
                k: self.merge_queries(model, split, v) for k, v in {"rank": ranked.ranks, **split.attributes}.items()
            }
            results.update(
                relational_metrics(merged["rank"], merged["relational"], merged["num_shots"], self.config.relational)
            )
        if save:
            self.save_scores(model, split, ranked.scores)
        if skipped:
            results["skipped_videos"] = float(skipped)
        return results

    def rescored(self, model: L.LightningModule, split: EvalSplit, scores: torch.Tensor) -> dict[str, float]:
        """The `rescore` metrics (`metrics.rescoring.rescored_metrics`) of every process's test rows (this
        process's `scores`) merged in dataset order; with `qbnorm`, its querybank (`bank_size` training
        queries scored against the gallery by the head, written with `save_scores` as `scores_bank.npy`)."""
        config = self.config.rescore
        assert config is not None
        matrix, targets = self.merge_queries(model, split, scores), self.merge_queries(model, split, split.targets)
        bank = None
        if config.qbnorm is not None:
            reps = self.query_bank(model, config.qbnorm.bank_size)
            scored = self.score_rows(self.head_score(model.head), reps, split.gallery)
            blocks = [rows for _, rows in scored] if self.config.save_scores else (rows for _, rows in scored)
            bank = QueryBank.from_blocks(blocks, rep_len(split.gallery), config.qbnorm)
            if self.config.save_scores:
                self.save_bank(model, torch.cat(blocks))
        return rescored_metrics(matrix, targets, config, bank, self.config.ties, self.config.v2t_rule)

    def reranked(self, model: L.LightningModule, split: EvalSplit) -> dict[str, float]:
        """`rerank/t2v/...` and `rerank/recall_ceiling` of every process's queries (`reranking.rerank_split`
        of this process's, merged)."""
        config = self.config.rerank
        assert config is not None
        if split.retriever is None:
            raise ValueError(f"evaluation.rerank: {type(model).__name__} collects no retriever vectors")
        local = rerank_split(
            model.head,
            split.text,
            split.gallery,
            split.retriever,
            split.targets,
            config.k,
            self.config.ties,
            self.config.memory_mb,
        )
        merged = self.merge_queries(model, split, {"ranks": local.ranks, "inside": local.inside.double()})
        return RerankResult(merged["ranks"].cpu(), merged["inside"].cpu() > 0, local.k).metrics()

    def analyses(self, model: L.LightningModule, split: EvalSplit, ranks: torch.Tensor) -> dict[str, float]:
        """The `AnalysesConfig` of every process's queries against the whole gallery: the per-query values
        and Avg-Event hits of this process's queries merged, then the query variants scored
        (`lit_retrieval.modules.analyses`)."""
        config = self.config.analyses
        assert config is not None
        device, ties, events = split.index.device, self.config.ties, split.events
        count = getattr(model, "query_token_counts", None)
        per_query = per_query_values(events, ranks, split.attributes["duration"], config, count, type(model).__name__)
        if config.avg_event:
            singles, owner = single_event_queries(events, device)
            single_ranks = [
                text_to_video_ranks(scores, split.targets[owner[rows]], ties)
                for rows, scores in self.encoded_rows(model, singles, split.gallery)
            ]
            per_query["avg_event"] = avg_event_hits(torch.cat(single_ranks).to(device), owner, len(events))
        out = merged_analyses(self.merge_queries(model, split, per_query), config)
        for name, (variant_events, mode) in query_variants(events, split.index, config).items():
            metric = RetrievalMetrics(ties, self.config.v2t_rule).to(device)
            for rows, scores in self.encoded_rows(model, variant_events, split.gallery, mode):
                metric.update(scores, split.targets[rows], split.index[rows])
            out.update({f"{name}/{k}": v for k, v in metric.compute().items()})
        return out

    @staticmethod
    def with_shapes(model: L.LightningModule, batches: list[EvalBatch]) -> list[EvalBatch]:
        """`batches`, or for a rank without any, one empty batch shaped like another rank's, so that
        it takes part in every merge of the evaluation."""
        if distributed_world() == 1:
            return batches
        shapes = gather_objects([batches[0].empty()] if batches else [])
        return batches or [shapes[0].to(model.device)]

    def head_score(self, head: SimilarityHead) -> ScoreFn:
        return lambda text, gallery: head.score_blocks(text, gallery, self.config.budget_bytes)

    def gather(self, model: L.LightningModule, batches: list[EvalBatch]) -> EvalSplit:
        """This process's queries and every process's videos as one gallery (`EvalSplit`): records
        sharing a video id are one gallery video (a multi-caption set, one query per caption), the
        column of its first record (smallest dataset index)."""
        index = torch.cat([b.index for b in batches]).to(model.device)
        video = cat_reps([b.video for b in batches])
        video_ids = [v for b in batches for v in b.video_ids]
        all_video_ids = gather_objects(video_ids)
        all_index = gather_variable(model, index)
        column: dict[str, int] = {}  # video id -> dataset index of its first record
        for video_id, position in zip(all_video_ids, all_index.tolist()):
            column[video_id] = min(column.get(video_id, position), position)
        as_column = lambda ids: torch.tensor([column[v] for v in ids], dtype=torch.long, device=index.device)  # noqa: E731
        gallery_ids, first = first_occurrence(as_column(all_video_ids))
        retriever = None
        if batches[0].retriever is not None:
            local = cat_reps([b.retriever for b in batches])
            retriever = {"text": local["text"], "video": gather_variable(model, local["video"])[first]}
        return EvalSplit(
            text=cat_reps([b.text for b in batches]),
            index=index,
            events=[e for b in batches for e in b.events],
            attributes={k: torch.cat([b.attributes[k] for b in batches]) for k in batches[0].attributes},
            targets=torch.searchsorted(gallery_ids, as_column(video_ids)),
            gallery=map_rep(video, lambda t: gather_variable(model, t)[first]),
            gallery_ids=gallery_ids,
            video_ids=[all_video_ids[i] for i in first.tolist()],
            retriever=retriever,
        )

    @staticmethod
    def merge_queries(model: L.LightningModule, split: EvalSplit, values: Any) -> Any:
        """Per-query `values` of every process in dataset-index order (the distributed sampler's
        repeated rows removed)."""
        _, first = first_occurrence(gather_variable(model, split.index))
        return map_rep(values, lambda t: gather_variable(model, t.to(split.index.device))[first])

    def query_bank(self, model: L.LightningModule, size: int) -> Any:
        """Text representations of `size` queries of the training split (seeded draw), the bank of
        test-time calibrations such as UCoFiA's SK-norm and of QB-Norm's re-scoring
        (`rescored`); never the evaluated split."""
        datasets = getattr(model.trainer.datamodule, "datasets", {}) if model.trainer is not None else {}
        if "train" not in datasets:
            raise ValueError("the head's calibration needs the training split as its query bank (data.train_split)")
        events = [record.descriptions for record in datasets["train"].records]
        chosen = np.random.default_rng(0).permutation(len(events))[:size]
        bank = [events[i] for i in chosen]
        rows = self.config.query_rows
        with self.encoding(model):
            reps = [model.query_reps(bank[start : start + rows]) for start in range(0, len(bank), rows)]
        return map_rep(cat_reps(reps), full_precision)

    def encoded_rows(
        self, model: L.LightningModule, events: list[list[str]], gallery: Any, mode: QueryMode | None = None
    ) -> Iterator[tuple[slice, torch.Tensor]]:
        """(row slice, scores) of `events` encoded as queries, `query_rows` at a time."""
        if not events:
            yield slice(0, 0), no_rows(gallery)
            return
        score = self.head_score(model.head)
        for start in range(0, len(events), self.config.query_rows):
            rows = slice(start, start + self.config.query_rows)
            with self.encoding(model):
                reps = model.query_reps(events[rows], mode)
            yield rows, score(reps, gallery)

    def save_scores(self, model: L.LightningModule, split: EvalSplit, scores: torch.Tensor) -> None:
        """Write every process's rows of `scores` (this process's queries against the gallery) and
        the per-query values of the score files (`lit_retrieval.metrics.score_files`) to the run
        directory, on rank 0; every rank takes part in the merges."""
        rows = self.merge_queries(model, split, scores)
        targets = self.merge_queries(model, split, split.targets)
        device = split.index.device
        per_query = {"num_events": torch.tensor([len(e) for e in split.events], dtype=torch.long, device=device)}
        if hasattr(model, "query_token_counts"):
            per_query["query_tokens"] = token_counts(
                split.events, model.query_token_counts, device, type(model).__name__
            )
        counts = {name: values.tolist() for name, values in self.merge_queries(model, split, per_query).items()}
        flags: dict[str, Any] = {}
        relational = self.config.relational
        if relational is not None and "relational" in split.attributes:
            flags = {key: self.merge_queries(model, split, split.attributes[key]).tolist() for key in RELATIONAL_KEYS}
            flags["min_shots"] = relational.min_shots
        directory = run_directory(model)
        if model.trainer.is_global_zero:
            write_scores(
                directory,
                rows,
                split.video_ids,
                targets.tolist(),
                num_events=counts["num_events"],
                query_tokens=counts.get("query_tokens"),
                **flags,
            )

    @staticmethod
    def save_bank(model: L.LightningModule, scores: torch.Tensor) -> None:
        """Write QB-Norm's querybank scores (`scores_bank.npy`) to the run directory, on rank 0."""
        directory = run_directory(model)
        if model.trainer.is_global_zero:
            write_bank(directory, scores)


def no_rows(gallery: Any) -> torch.Tensor:
    """An empty `[0, videos]` score block."""
    first = next(iter(gallery.values())) if isinstance(gallery, dict) else gallery
    return torch.zeros(0, rep_len(gallery), device=first.device)


def run_directory(model: L.LightningModule) -> Path:
    """The run directory the score files go to (created); every rank must ask (a broadcast under DDP)."""
    trainer = model.trainer
    run_dir = Path(trainer.log_dir or trainer.default_root_dir)
    if trainer.is_global_zero:
        run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir
