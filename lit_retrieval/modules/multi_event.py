"""The MEA objective inside a LightningModule: partial queries, their scores, L_mea (MELON Eq. 9).

`MEAConfig` is the YAML block `model.mea`; `MultiEventObjective` owns the partial-query sampler
and the `MEALoss` (whose threshold buffers therefore land in the module's checkpoint).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from lit_retrieval.data.queries import PartialBatch, PartialQuerySampler, PartialSource
from lit_retrieval.losses.mea import MEALoss, MEAOutput
from lit_retrieval.models.heads.base import SimilarityHead, map_rep


@dataclass
class MEAConfig:
    """MEA loss settings; defaults are MELON supp. B.1 for CLIP4Clip.

    Args:
        weight: lambda of Eq. 9 (CLIP4Clip 0.2, X-CLIP 0.7, TS2-Net 0.1, UCoFiA 0.7, UATVR 0.2,
            PAU 0.3, TempMe 0.2).
        drop: m, events omitted from a query to form a partial query.
        num_partial: L, distinct partial queries drawn per sample and step.
        use_xi / use_pull: the Tab. 3 ablation switches (upper bound xi, pull term).
        source: `drop_events` (partial queries), or the Tab. 7 stand-ins `replace_words` and
            `shuffle_events`.
        replace_prob: word replacement probability for `replace_words`.
        seed: seed of the partial-query draws (with epoch, batch index and rank).
    """

    weight: float = 0.2
    drop: int = 2
    num_partial: int = 3
    use_xi: bool = True
    use_pull: bool = True
    source: PartialSource = "drop_events"
    replace_prob: float = 0.3
    seed: int = 0

    def __post_init__(self) -> None:
        if self.weight < 0:
            raise ValueError(f"mea.weight (lambda) must be >= 0, got {self.weight}")


class MultiEventObjective(nn.Module):
    """Draws partial queries and turns the batch's scores into `MEAOutput`."""

    def __init__(self, config: MEAConfig) -> None:
        super().__init__()
        self.config = config
        self.sampler = PartialQuerySampler(config.drop, config.num_partial, config.source, config.replace_prob, config.seed)
        self.loss = MEALoss(use_xi=config.use_xi, use_pull=config.use_pull)

    def partial_queries(self, events: list[list[str]], *stream: int) -> PartialBatch:
        return self.sampler.sample(events, *stream)

    def partial_scores(self, head: SimilarityHead, partial_text: Any, video: Any, partial: PartialBatch, similarity: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`[B, L]` scores of each video against its own partial queries (dtype and device of the
        batch's `similarity` [B, B]), and the mask of the slots that hold one. `partial_text` are
        the head's representations of `partial.events`."""
        batch = similarity.shape[0]
        partial_sim = similarity.new_zeros(batch, partial.num_slots)
        mask = torch.zeros(batch, partial.num_slots, dtype=torch.bool, device=similarity.device)
        if partial.events:
            owner = torch.tensor(partial.owner, device=similarity.device)
            slot = torch.tensor(partial.slot, device=similarity.device)
            scores = head.score_pairs(partial_text, map_rep(video, lambda t: t[owner]))
            partial_sim = partial_sim.index_put((owner, slot), scores.to(partial_sim.dtype))
            mask[owner, slot] = True
        return partial_sim, mask

    def forward(self, head: SimilarityHead, similarity: torch.Tensor, partial_text: Any, video: Any, partial: PartialBatch) -> MEAOutput:
        """`similarity` [B, B] of the full queries; `partial_text` the head's representations of
        `partial.events` (one row each, from the same text forward as the full queries)."""
        return self.loss(similarity, *self.partial_scores(head, partial_text, video, partial, similarity))
