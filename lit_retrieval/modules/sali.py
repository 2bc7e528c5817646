"""`SALIRetrieval`: SALI training and evaluation on top of the dual-encoder module (SALI Sec. 3-4).

What SALI changes in `DualEncoderRetrieval`:
- queries: each query (the concatenated events; a single caption for CM and MSR-VTT) is split
  into subject and object spans (`SpanSplitter`); the full queries and the spans of queries with a
  verb go through the text tower in one call;
- videos: the frames' shot indices from the data (`data.shots`) reach the head, which averages
  frames per shot;
- training: symmetric InfoNCE over the gated score s_hat, both towers fine-tuned (backbone 1e-7,
  head 1e-4 in the paper: `optim.backbone_lr` / `optim.head_lr`); `warm_start` (an option of
  every `DualEncoderRetrieval`) loads the encoder and logit scale of a CLIP4Clip-meanP checkpoint;
- evaluation: the overall metrics plus relational / Rel-Multi metrics and optionally the
  shot-quartile diagnosis (`RelationalConfig`, on by default here; any `DualEncoderRetrieval`
  can enable it, so baselines report Rel-Multi too).
"""

from __future__ import annotations

import dataclasses

from typing import Any

import torch

from lit_retrieval.data.text.queries import QueryMode, concat_query
from lit_retrieval.data.text.spans import QuerySpans
from lit_retrieval.errors import ConfigError
from lit_retrieval.metrics.relational import RelationalConfig
from lit_retrieval.models.encoders.base import VideoTextEncoder
from lit_retrieval.models.heads.sali import SALIHead, SpanTextFeatures
from lit_retrieval.modules.dual_encoder import DualEncoderRetrieval
from lit_retrieval.modules.evaluation import EvaluationConfig


class SALIRetrieval(DualEncoderRetrieval):
    """SALI (shot-aware late interaction) with a `SALIHead`.

    Args:
        encoder: the CLIP dual encoder (both towers are fine-tuned unless `frozen` says otherwise).
        head: a `SALIHead` (operators, penalty, gate).
        **kwargs: the options of `DualEncoderRetrieval`; `warm_start` (a CLIP4Clip-meanP checkpoint,
            SALI Sec. 4), `spans` (the verb rules that split queries) and `evaluation.relational`
            (Rel-Multi, diagnosis; on by default here) matter most.
    """

    def __init__(
        self,
        encoder: VideoTextEncoder,
        head: SALIHead,
        **kwargs: Any,
    ) -> None:
        if not isinstance(head, SALIHead):
            raise ConfigError(f"SALIRetrieval needs a SALIHead, got {type(head).__name__}")
        if kwargs.get("query_mode", "concat") != "concat":
            raise ConfigError("SALIRetrieval encodes whole queries (query_mode: concat)")
        evaluation = kwargs.get("evaluation") or EvaluationConfig()
        if evaluation.relational is None:
            evaluation = dataclasses.replace(evaluation, relational=RelationalConfig())
        kwargs["evaluation"] = evaluation
        super().__init__(encoder, head, **kwargs)

    def split_queries(self, events: list[list[str]]) -> list[QuerySpans]:
        return [self.spans.split(concat_query(e)) for e in events]

    def encode_queries(self, events: list[list[str]], mode: QueryMode | None = None) -> SpanTextFeatures:
        """Full query, subject and object features; one text-tower call for all of them."""
        if mode not in (None, "concat"):
            raise ValueError(
                f"SALI encodes whole queries; query mode {mode!r} is not available (drop it from analyses.query_modes)"
            )
        spans = self.split_queries(events)
        with_verb = [i for i, s in enumerate(spans) if s.verb is not None]
        texts = [s.full for s in spans] + [spans[i].subject for i in with_verb] + [spans[i].object for i in with_verb]
        pooled = self.encoder.encode_text(texts).pooled
        n, k = len(spans), len(with_verb)
        full = pooled[:n]
        rows = torch.tensor(with_verb, dtype=torch.long, device=full.device)
        flags = [[s.verb is not None for s in spans], [s.relational for s in spans]]
        has_verb, relational = torch.tensor(flags, dtype=torch.bool, device=full.device)
        return SpanTextFeatures(
            full=full,
            subject=full.index_copy(0, rows, pooled[n : n + k]),
            object=full.index_copy(0, rows, pooled[n + k :]),
            has_verb=has_verb,
            relational=relational,
        )

    def encode_videos(self, batch: dict[str, Any]) -> Any:
        if "frame_shots" not in batch:
            raise ValueError(
                "SALI needs shots: set `data.shots` so the data module detects them and indexes frames by shot"
            )
        return super().encode_videos(batch)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Log SALI's learned scalars, so their curves show in the logger (SALI Sec. 4
        "Mechanism" follows the penalty weights): the gates, capacity c, eps and the penalty
        weights softplus(w1), softplus(w2)."""
        super().on_train_batch_end(outputs, batch, batch_idx)
        head = self.head
        with torch.no_grad():
            gates = torch.sigmoid(head.gate_logits)
            weights = torch.nn.functional.softplus(head.penalty_weights)
            values = {
                "gate/without_verb" if head.gate_by == "verb" else "gate/non_relational": gates[0],
                "gate/with_verb" if head.gate_by == "verb" else "gate/relational": gates[1],
                "capacity": head.capacity,
                "eps": head.eps,
                "penalty/same_shot": weights[0],
                "penalty/distance": weights[1],
            }
        self.log_dict({f"train/sali/{k}": v for k, v in values.items()}, on_step=True, on_epoch=False)
