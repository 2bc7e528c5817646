"""Training objectives that a retrieval module sums: L = sum of the enabled objectives' terms.

- `InfoNCEObjective`: L_std, symmetric InfoNCE on the text x video logits (MELON Eq. 2).
- `SigmoidObjective`: SigLIP's pairwise sigmoid loss (arXiv:2303.15343, Eq. 1) in its place.
- `HeadAuxiliaryObjective`: the head's own weighted extra terms (e.g. UATVR's, PAU's).
- `MultiEventObjective`: lambda * L_mea on partial queries (MELON Sec. 4.3, Eq. 9; `model.mea`).
- `EventCaptionObjective`: MeVTR's multi-positive loss over event captions (`losses/mevtr.py`).

`TrainingObjectives` builds the set from a module's options and is the one place that says which
objectives combine: InfoNCE or the sigmoid loss + head terms (+ MEA), or MeVTR's event loss alone.
`ContrastiveConfig` (`model.contrastive`) picks the contrastive loss and where its temperature and bias
start; `contrastive_setup` resolves it against the encoder. A step first asks
it which texts to encode (`StepTexts`), then hands every objective the scored batch
(`ScoredBatch`) and sums their `ObjectiveTerm`s.
"""

from __future__ import annotations

import os

from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from lit_retrieval.data.text.queries import PartialBatch, PartialQuerySampler
from lit_retrieval.distributed import distributed_world, gather_global
from lit_retrieval.errors import ConfigError
from lit_retrieval.losses.infonce import SymmetricInfoNCE
from lit_retrieval.losses.mea import MEALoss
from lit_retrieval.losses.mevtr import MeVTRLoss
from lit_retrieval.losses.sigmoid import PAPER_LOGIT_BIAS, PAPER_LOGIT_SCALE, PairwiseSigmoidLoss
from lit_retrieval.models.encoders.base import VideoTextEncoder
from lit_retrieval.models.heads.base import SimilarityHead, map_rep
from lit_retrieval.modules.multi_event import MEAConfig


@dataclass
class ScoredBatch:
    """What every objective of a step sees: the head's representations and scores of the batch."""

    head: SimilarityHead
    text: Any  # the batch's texts (whole queries, or event captions)
    video: Any  # its videos
    similarity: torch.Tensor  # [N_text, B] raw scores s of this process's texts and videos
    contrast: torch.Tensor  # the same over the global batch with cross-device negatives, else `similarity`
    owner: torch.Tensor  # [N_text] the video of each text
    world: int = 1  # processes whose batches `contrast` holds
    partial: PartialBatch | None = None  # MEA's partial queries
    partial_text: Any = None  # their representations


@dataclass
class ObjectiveTerm:
    """One objective's weighted loss, the detached values it adds to the step's outputs (read by
    `TrainingCurves`), and values to log as `train/<name>`."""

    loss: torch.Tensor
    outputs: dict[str, torch.Tensor] = field(default_factory=dict)
    logged: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class StepTexts:
    """The texts a training step encodes in one text-tower call: the batch's multi-event `queries`
    (query i describes video i), followed by MEA's partial queries; or, for MeVTR, one `captions`
    entry per event description, caption i belonging to video `owner[i]`."""

    queries: list[list[str]] = field(default_factory=list)
    partial: PartialBatch | None = None
    captions: list[str] | None = None
    owner: list[int] = field(default_factory=list)

    @property
    def num_main(self) -> int:
        return len(self.captions) if self.captions is not None else len(self.queries)


class InfoNCEObjective(nn.Module):
    """L_std (MELON Eq. 2) on the contrast logits (the global batch with cross-device negatives)."""

    def __init__(self, average_directions: bool = False) -> None:
        super().__init__()
        self.loss = SymmetricInfoNCE(average_directions)

    def forward(self, step: ScoredBatch) -> ObjectiveTerm:
        loss = self.loss(step.head.logits(step.contrast))
        return ObjectiveTerm(loss, {"loss_std": loss.detach()})


class SigmoidObjective(nn.Module):
    """SigLIP's pairwise sigmoid loss (arXiv:2303.15343, Eq. 1) on the contrast logits, in place of
    InfoNCE: the head's `logit_scale` is t', the loss's `logit_bias` is b (logged as `train/logit_bias`)."""

    def __init__(self, bias_init: float = PAPER_LOGIT_BIAS) -> None:
        super().__init__()
        self.loss = PairwiseSigmoidLoss(bias_init)

    def forward(self, step: ScoredBatch) -> ObjectiveTerm:
        loss = self.loss(step.head.logits(step.contrast))
        return ObjectiveTerm(loss, {"loss_std": loss.detach()}, {"logit_bias": self.loss.logit_bias.detach()})


ContrastiveLoss = Literal["infonce", "sigmoid"]


@dataclass
class ContrastiveConfig:
    """`model.contrastive`: the contrastive loss and where its temperature and bias start.

    Args:
        loss: `infonce` (MELON Eq. 2) or `sigmoid` (SigLIP Eq. 1). Default: the encoder's, `sigmoid` for
            a checkpoint trained with it (one that records a `logit_bias_init`: SigLIP), else `infonce`.
        logit_scale_init: the head's t' = log(1/tau) at the start, a number or `encoder` (the
            checkpoint's own, the encoder's `logit_scale_init`). Default: InfoNCE keeps the head's
            (`logit_scale_init`, log 100 as CLIP4Clip); the sigmoid loss starts at the checkpoint's t'
            when the checkpoint was trained with that loss, else at SigLIP's log 10.
        logit_bias_init: the sigmoid loss's b at the start, a number or `encoder`. Default: the
            checkpoint's when it has one, else SigLIP's -10.
    """

    loss: ContrastiveLoss | None = None
    logit_scale_init: float | Literal["encoder"] | None = None
    logit_bias_init: float | Literal["encoder"] | None = None


@dataclass
class ContrastiveSetup:
    """`ContrastiveConfig` resolved against an encoder: the loss, the head's initial `logit_scale`
    (None: the head keeps its own) and the sigmoid loss's initial bias."""

    loss: ContrastiveLoss
    logit_scale: float | None
    logit_bias: float


def contrastive_setup(
    config: ContrastiveConfig | None, encoder: VideoTextEncoder, event_loss: bool = False
) -> ContrastiveSetup:
    """`config` resolved against `encoder`'s recorded checkpoint values (`ContrastiveConfig`). Under
    MeVTR's `event_loss`, which replaces the contrastive loss, the default is InfoNCE (unused)."""
    config = config or ContrastiveConfig()
    recorded_bias = getattr(encoder, "logit_bias_init", None)
    recorded_scale = getattr(encoder, "logit_scale_init", None)
    loss = config.loss or ("sigmoid" if recorded_bias is not None and not event_loss else "infonce")
    if loss not in ("infonce", "sigmoid"):
        raise ConfigError(f"model.contrastive.loss must be 'infonce' or 'sigmoid', got {loss!r}")

    def recorded(value: float | None, what: str) -> float:
        if value is None:
            raise ConfigError(
                f"model.contrastive.{what}: encoder, but {type(encoder).__name__}'s checkpoint records none"
            )
        return float(value)

    scale: float | None
    if config.logit_scale_init == "encoder":
        scale = recorded(recorded_scale, "logit_scale_init")
    elif config.logit_scale_init is not None:
        scale = float(config.logit_scale_init)
    elif loss == "sigmoid":
        scale = float(recorded_scale) if recorded_bias is not None else PAPER_LOGIT_SCALE
    else:
        scale = None
    if config.logit_bias_init == "encoder":
        bias = recorded(recorded_bias, "logit_bias_init")
    elif config.logit_bias_init is not None:
        bias = float(config.logit_bias_init)
    else:
        bias = float(recorded_bias) if recorded_bias is not None else PAPER_LOGIT_BIAS
    return ContrastiveSetup(loss, scale, bias)


class HeadAuxiliaryObjective(nn.Module):
    """The head's `auxiliary_losses`, each logged as `train/aux/<name>`."""

    def forward(self, step: ScoredBatch) -> ObjectiveTerm:
        terms = step.head.auxiliary_losses(step.text, step.video, step.similarity)
        loss = sum(terms.values(), step.similarity.new_zeros(()))
        return ObjectiveTerm(
            loss, {f"aux_{k}": v.detach() for k, v in terms.items()}, {f"aux/{k}": v.detach() for k, v in terms.items()}
        )


class EventCaptionObjective(nn.Module):
    """MeVTR's loss (`MeVTRLoss`) on the logits of every event caption against the batch's videos."""

    def __init__(self, loss: MeVTRLoss) -> None:
        super().__init__()
        self.loss = loss

    def forward(self, step: ScoredBatch) -> ObjectiveTerm:
        loss = self.loss(step.head.logits(step.similarity), step.owner)
        return ObjectiveTerm(loss, {"loss_std": loss.detach()})


class MultiEventObjective(nn.Module):
    """lambda * L_mea (MELON Eq. 9): draws the partial queries, scores each video against its own
    (`[B, L]`, masked where a sample has fewer than L) and applies `MEALoss`, whose threshold
    buffers (delta, xi of the previous step) therefore land in the module's checkpoint. Under
    cross-device negatives delta and xi come from the global batch, identical on every rank."""

    def __init__(self, config: MEAConfig) -> None:
        super().__init__()
        self.config = config
        PartialQuerySampler(config.drop, config.num_partial, config.source, config.replace_prob)  # checks them now
        self.loss = MEALoss(use_xi=config.use_xi, use_pull=config.use_pull)

    @property
    def seed(self) -> int:
        """`mea.seed`, or with `mea.seed: null` (the default) the run's seed: `seed_everything`,
        which Lightning exports as `PL_GLOBAL_SEED` to every rank (0 when the run sets none). The
        paper is silent; tying the draws to the run seed makes a row's seeds differ in their
        partial queries too, not only in their initialisation and data order."""
        return self.config.seed if self.config.seed is not None else int(os.environ.get("PL_GLOBAL_SEED", 0))

    def partial_queries(self, events: list[list[str]], *stream: int) -> PartialBatch:
        config = self.config
        sampler = PartialQuerySampler(config.drop, config.num_partial, config.source, config.replace_prob, self.seed)
        return sampler.sample(events, *stream)

    def partial_scores(
        self, head: SimilarityHead, partial_text: Any, video: Any, partial: PartialBatch, similarity: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
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

    def forward(self, step: ScoredBatch) -> ObjectiveTerm:
        assert step.partial is not None, "MEA needs the step's partial queries (TrainingObjectives.texts)"
        partial_sim, mask = self.partial_scores(step.head, step.partial_text, step.video, step.partial, step.similarity)
        if step.world > 1:
            partial_sim, mask = gather_global(partial_sim), gather_global(mask.to(torch.uint8)).bool()
        mea = self.loss(step.contrast, partial_sim, mask)
        outputs = {f"mea_{k}": getattr(mea, k).detach() for k in ("loss", "push", "pull", "theta", "delta", "xi")}
        return ObjectiveTerm(self.config.weight * mea.loss, outputs)


def has_auxiliary_losses(head: SimilarityHead) -> bool:
    return type(head).auxiliary_losses is not SimilarityHead.auxiliary_losses


class TrainingObjectives(nn.Module):
    """The objectives of a dual-encoder module, checked for combinations that do not exist.

    Args:
        head: the module's similarity head.
        average_directions: InfoNCE halves its sum of directions (CLIP4Clip's convention).
        contrastive: `infonce` (MELON Eq. 2) or `sigmoid` (SigLIP Eq. 1, its bias starting at
            `logit_bias_init`); MeVTR's event loss replaces either.
        mea: add lambda * L_mea (MELON Eq. 9).
        event_loss: train on event captions with MeVTR's loss, instead of InfoNCE on whole queries.
        cross_device: contrast against every rank's batch (InfoNCE and MEA; indexable heads only).
    """

    def __init__(
        self,
        head: SimilarityHead,
        average_directions: bool = False,
        mea: MEAConfig | None = None,
        event_loss: MeVTRLoss | None = None,
        cross_device: bool = False,
        contrastive: ContrastiveLoss = "infonce",
        logit_bias_init: float = PAPER_LOGIT_BIAS,
    ) -> None:
        super().__init__()
        if contrastive == "sigmoid" and average_directions:
            raise ConfigError("average_directions halves InfoNCE; the sigmoid loss has no directions: drop one of them")
        if event_loss is not None:
            if contrastive == "sigmoid":
                raise ConfigError("event_loss (MeVTR) trains with its own loss only: drop model.contrastive.loss")
            if mea is not None:
                raise ConfigError("event_loss (MeVTR) and mea are exclusive: MeVTR trains with its own loss only")
            if cross_device:
                raise ConfigError(
                    "event_loss (MeVTR) is computed per process: cross_device applies to InfoNCE and MEA only"
                )
            if average_directions:
                raise ConfigError(
                    "average_directions scales InfoNCE, which event_loss (MeVTR) replaces: drop one of them"
                )
            if has_auxiliary_losses(head):
                raise ConfigError(
                    f"event_loss (MeVTR) trains with its own loss only; {type(head).__name__} adds auxiliary losses"
                )
        if cross_device and not head.indexable:
            raise ConfigError(
                f"cross_device needs an indexable head (one vector per text and video); {type(head).__name__} is not"
            )
        self.cross_device = cross_device
        self.infonce = InfoNCEObjective(average_directions) if event_loss is None and contrastive == "infonce" else None
        self.sigmoid = SigmoidObjective(logit_bias_init) if event_loss is None and contrastive == "sigmoid" else None
        self.auxiliary = HeadAuxiliaryObjective() if event_loss is None else None
        self.mea = MultiEventObjective(mea) if mea is not None else None
        self.event_loss = EventCaptionObjective(event_loss) if event_loss is not None else None

    def texts(self, events: list[list[str]], *stream: int) -> StepTexts:
        """What the step encodes; `stream` (epoch, batch index, rank) seeds MEA's partial queries."""
        owner = (
            [i for i, e in enumerate(events) for _ in e] if self.event_loss is not None else list(range(len(events)))
        )
        if self.event_loss is not None:
            return StepTexts(captions=[d for e in events for d in e], owner=owner)
        partial = self.mea.partial_queries(events, *stream) if self.mea is not None else None
        return StepTexts(queries=events, partial=partial, owner=owner)

    def score(self, head: SimilarityHead, texts: StepTexts, text_reps: Any, video: Any) -> ScoredBatch:
        """Split the encoded texts into the batch's and the partial queries', and score them."""
        size = texts.num_main
        text = map_rep(text_reps, lambda t: t[:size])
        world = distributed_world() if self.cross_device else 1
        if world > 1:  # cross-device negatives: every rank scores the global batch, its own block is the local one
            contrast = head.score(map_rep(text, gather_global), map_rep(video, gather_global))
            rank = torch.distributed.get_rank()
            own = slice(rank * size, (rank + 1) * size)
            similarity = contrast[own, own]
        else:
            contrast = similarity = head.score(text, video)
        return ScoredBatch(
            head=head,
            text=text,
            video=video,
            similarity=similarity,
            contrast=contrast,
            owner=torch.tensor(texts.owner, device=similarity.device),
            world=world,
            partial=texts.partial,
            partial_text=map_rep(text_reps, lambda t: t[size:]) if texts.partial is not None else None,
        )

    def forward(self, step: ScoredBatch) -> tuple[torch.Tensor, ObjectiveTerm]:
        """The summed loss and every objective's term (outputs and logged values merged)."""
        objectives = (self.infonce, self.sigmoid, self.auxiliary, self.mea, self.event_loss)
        terms = [o(step) for o in objectives if o is not None]
        loss = terms[0].loss
        for term in terms[1:]:
            loss = loss + term.loss
        merged = ObjectiveTerm(
            loss,
            {k: v for t in terms for k, v in t.outputs.items()},
            {k: v for t in terms for k, v in t.logged.items()},
        )
        return loss, merged


# State-dict prefixes of checkpoints written before the objectives were composed -> today's.
LEGACY_PREFIXES = {"mea.": "objectives.mea.", "event_loss.": "objectives.event_loss.loss."}


def rename_legacy_objective_keys(module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    """Load-state-dict pre-hook of a module holding `objectives`: MEA's threshold state and MeVTR's
    alpha ratio of older checkpoints (`mea.*`, `event_loss.*`) load under today's names, and a whole
    module's checkpoint without the sigmoid loss's bias (a SigLIP run trained with InfoNCE, before the
    sigmoid loss was its default) loads into a module that has one, which keeps its initial bias."""
    for old, new in LEGACY_PREFIXES.items():
        for key in [k for k in state_dict if k.startswith(prefix + old)]:
            state_dict[prefix + new + key[len(prefix + old) :]] = state_dict.pop(key)
    sigmoid = getattr(getattr(module, "objectives", None), "sigmoid", None)
    bias = prefix + "objectives.sigmoid.loss.logit_bias"
    if sigmoid is not None and bias not in state_dict and prefix + "head.logit_scale" in state_dict:
        state_dict[bias] = sigmoid.loss.logit_bias.detach().clone()
