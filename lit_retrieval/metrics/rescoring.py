"""Inference-time re-scoring of a text x video score matrix, reported beside the raw metrics.

Raw metrics stay the headline; a re-scored metric is keyed by its method's name in `RESCORINGS`,
`<method>/t2v/R@1`, `<method>/v2t/R@1` (`v2t_group_max/` under that rule,
`lit_retrieval.metrics.ranking`). That name is also the method's field of `RescoreConfig`
(`evaluation.rescore.<method>`) and its choice of `lit-retrieval metrics --rescore`:

- `dsl/` dual softmax (CAMoE; TS2-Net's test-time DSL, `main_task_retrieval.py`): one matrix for
  both directions, `S'_ij = S_ij * softmax_i(S_ij / T)`, the softmax over the *texts* of each video
  column (TS2-Net: `sim_matrix * softmax(sim_matrix, axis=0)` on its logits `100 * cos`, hence
  our default `T = 0.01` on the heads' cosines). As in TS2-Net, V2T ranks the same matrix's
  columns: with positive scores it ranks them as the raw scores do.
- `inverted_softmax/` inverted softmax (Smith et al., ICLR 2017; QB-Norm Sec. 3 with the test
  queries as the bank): each gallery item is normalised over the queries. T2V: `S'_ij =
  exp(S_ij / T) / sum_i' exp(S_i'j / T)` (a video over the test texts); V2T: a text over the test
  videos, `exp(S_ij / T) / sum_j' exp(S_ij' / T)`.
- `qbnorm/` QB-Norm's dynamic inverted softmax (Bogolin et al., CVPR 2022, Eq. 5-6;
  `dynamic_inverted_softmax.py` of its repository), T2V only (its repository reports none other):
  with a querybank `B` of training queries scored against the test gallery, the activation set is
  the union of every bank query's top-`k` videos; a test query whose raw top-1 video is in it gets
  `S'_ij = exp(S_ij / T) / sum_b exp(B_bj / T)`, every other query keeps its raw row.
  Its defaults follow the repository: `k = 1`, inverse temperature 20 (`T = 0.05`).

Memory: the matrices are re-scored `chunk` rows at a time (`ScoreRows`); the column statistics
(log-sum-exp over the texts, computed blockwise first) and the bank's are one value per video,
so a 10^5 x 10^5 evaluation holds no second matrix. Arithmetic is float64.

A method is its options dataclass (a `temperature`, which `metrics --temperature` sets, and its
own fields), one function `(scores, options, bank, chunk) -> (t2v, v2t)` returning the matrices
T2V and V2T are ranked from (`v2t` None: T2V only), and one entry in `RESCORINGS`
(docs/extending.md, "Add a re-scoring method").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, make_dataclass
from typing import Any

import torch

from lit_retrieval.errors import ConfigError
from lit_retrieval.metrics.ranking import (
    V2T_PREFIX,
    ScoreRows,
    Scores,
    Ties,
    V2TRule,
    row_slices,
    summarize_ranks,
    take_rows,
    text_to_video_ranks,
    video_to_text_ranks,
)

CHUNK = 4096


def positive(name: str, value: float) -> None:
    """A temperature must be finite and > 0: `inf` ties every score, and one so small that
    `S / T` overflows leaves NaN; either would be ranked as if it were a result."""
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{name} must be a finite number > 0, got {value}")


@dataclass
class DualSoftmax:
    """`dsl/`: temperature of the softmax over the texts (TS2-Net: 0.01 on cosines)."""

    temperature: float = 0.01

    def __post_init__(self) -> None:
        positive("rescore.dsl.temperature", self.temperature)


@dataclass
class InvertedSoftmax:
    """`inverted_softmax/`: temperature of the inverted softmax over the test queries."""

    temperature: float = 0.05

    def __post_init__(self) -> None:
        positive("rescore.inverted_softmax.temperature", self.temperature)


@dataclass
class QBNorm:
    """`qbnorm/`: temperature, top-`k` of the activation set, and how many training queries form
    the bank (a seeded draw of the training split; our choice, the paper varies it)."""

    temperature: float = 0.05
    k: int = 1
    bank_size: int = 5000

    def __post_init__(self) -> None:
        positive("rescore.qbnorm.temperature", self.temperature)
        if self.k < 1 or self.bank_size < 1:
            raise ConfigError(f"rescore.qbnorm.k and bank_size must be >= 1, got {self.k} and {self.bank_size}")


@dataclass
class QueryBank:
    """QB-Norm's statistics of a querybank against the gallery: `log_norm[j] = log sum_b
    exp(B_bj / T)` and `activated[j]`: video j is among some bank query's top-k."""

    log_norm: torch.Tensor  # [V] float64
    activated: torch.Tensor  # [V] bool

    @classmethod
    def from_blocks(cls, blocks: Iterable[torch.Tensor], num_videos: int, config: QBNorm) -> QueryBank:
        """The statistics from the bank's score rows, given block by block."""
        log_norm = torch.full((num_videos,), float("-inf"), dtype=torch.float64)
        activated = torch.zeros(num_videos, dtype=torch.bool)
        seen = 0
        for block in blocks:
            if block.shape[1] != num_videos:
                raise ValueError(f"the querybank scores {block.shape[1]} videos, the gallery has {num_videos}")
            if not torch.isfinite(block).all():
                raise ValueError("the querybank's scores contain NaN or infinite values")
            block = block.double()
            log_norm = log_norm.to(block.device)
            log_norm = torch.logaddexp(log_norm, (block / config.temperature).logsumexp(0))
            top = block.topk(min(config.k, num_videos), dim=1).indices.flatten()
            activated = activated.to(block.device)
            activated[top] = True
            seen += len(block)
        if seen == 0:
            raise ValueError("the querybank has no queries")
        return cls(log_norm, activated)


def finite_rows(rows: Callable[[slice | torch.Tensor], torch.Tensor], method: str, temperature: float):
    """`rows` that refuses a block holding NaN or an infinity: a temperature small enough that
    `S / T` overflows (1e-320) leaves NaN, which would rank as ties and report R@1 100."""

    def checked(index: slice | torch.Tensor) -> torch.Tensor:
        block = rows(index)
        if not torch.isfinite(block).all():
            raise ConfigError(
                f"rescore.{method}.temperature {temperature:g}: the re-scored matrix holds non-finite values "
                "(S / T overflows); give a larger temperature"
            )
        return block

    return checked


def column_logsumexp(scores: Scores, temperature: float, chunk: int = CHUNK) -> torch.Tensor:
    """`log sum_i exp(S_ij / T)` per column, accumulated over blocks of rows."""
    total = None
    for index in row_slices(scores.shape[0], chunk):
        part = (take_rows(scores, index).double() / temperature).logsumexp(0)
        total = part if total is None else torch.logaddexp(total, part)
    assert total is not None, "no rows"
    return total


def dual_softmax(scores: Scores, config: DualSoftmax, chunk: int = CHUNK) -> ScoreRows:
    """`S * softmax over the texts (S / T)` (module docstring)."""
    log_norm = column_logsumexp(scores, config.temperature, chunk)

    def rows(index: slice | torch.Tensor) -> torch.Tensor:
        raw = take_rows(scores, index).double()
        return raw * torch.exp(raw / config.temperature - log_norm)

    return ScoreRows(tuple(scores.shape), finite_rows(rows, "dsl", config.temperature))


def inverted_softmax_t2v(scores: Scores, config: InvertedSoftmax, chunk: int = CHUNK) -> ScoreRows:
    """Each video column normalised over the texts: `exp(S_ij / T) / sum_i' exp(S_i'j / T)`."""
    log_norm = column_logsumexp(scores, config.temperature, chunk)

    def rows(index: slice | torch.Tensor) -> torch.Tensor:
        return torch.exp(take_rows(scores, index).double() / config.temperature - log_norm)

    return ScoreRows(tuple(scores.shape), finite_rows(rows, "inverted_softmax", config.temperature))


def inverted_softmax_v2t(scores: Scores, config: InvertedSoftmax) -> ScoreRows:
    """Each text row normalised over the videos: `exp(S_ij / T) / sum_j' exp(S_ij' / T)`."""

    def rows(index: slice | torch.Tensor) -> torch.Tensor:
        return torch.softmax(take_rows(scores, index).double() / config.temperature, dim=1)

    return ScoreRows(tuple(scores.shape), finite_rows(rows, "inverted_softmax", config.temperature))


def qb_norm(scores: Scores, bank: QueryBank, config: QBNorm) -> ScoreRows:
    """QB-Norm's dynamic inverted softmax (module docstring): rows whose raw top-1 video is in the
    bank's activation set divided by the bank's normaliser, the others raw."""
    if len(bank.log_norm) != scores.shape[1]:
        raise ValueError(f"the querybank scores {len(bank.log_norm)} videos, the gallery has {scores.shape[1]}")

    def rows(index: slice | torch.Tensor) -> torch.Tensor:
        raw = take_rows(scores, index).double()
        log_norm, activated = bank.log_norm.to(raw.device), bank.activated.to(raw.device)
        normalised = activated[raw.argmax(1)]
        return torch.where(normalised[:, None], torch.exp(raw / config.temperature - log_norm), raw)

    return ScoreRows(tuple(scores.shape), finite_rows(rows, "qbnorm", config.temperature))


Rescored = tuple[Scores, "Scores | None"]
"""The matrix whose rows T2V ranks, and the one whose columns V2T ranks (None: T2V only)."""


def rescore_dsl(scores: Scores, options: DualSoftmax, bank: QueryBank | None, chunk: int) -> Rescored:
    """TS2-Net's DSL: one matrix for both directions (module docstring)."""
    rows = dual_softmax(scores, options, chunk)
    return rows, rows


def rescore_inverted_softmax(scores: Scores, options: InvertedSoftmax, bank: QueryBank | None, chunk: int) -> Rescored:
    """Videos normalised over the texts for T2V, texts over the videos for V2T."""
    return inverted_softmax_t2v(scores, options, chunk), inverted_softmax_v2t(scores, options)


def rescore_qbnorm(scores: Scores, options: QBNorm, bank: QueryBank | None, chunk: int) -> Rescored:
    """QB-Norm's dynamic inverted softmax against the querybank `bank`, T2V only."""
    if bank is None:
        raise ValueError("rescore.qbnorm needs a querybank (training queries scored against the gallery)")
    return qb_norm(scores, bank, options), None


@dataclass(frozen=True)
class Rescoring:
    """A re-scoring method: its options dataclass and its function (module docstring)."""

    options: type
    rescore: Callable[[Scores, Any, QueryBank | None, int], Rescored]


RESCORINGS: dict[str, Rescoring] = {
    "dsl": Rescoring(DualSoftmax, rescore_dsl),
    "inverted_softmax": Rescoring(InvertedSoftmax, rescore_inverted_softmax),
    "qbnorm": Rescoring(QBNorm, rescore_qbnorm),
}
"""Every re-scoring method by its one name: the metric prefix `<name>/`, the field of `RescoreConfig`
and the choice of `lit-retrieval metrics --rescore`."""

RescoreConfig = make_dataclass(
    "RescoreConfig",
    [(name, method.options | None, field(default=None)) for name, method in RESCORINGS.items()],
    namespace={
        "__module__": __name__,  # checkpoints name it `lit_retrieval.metrics.rescoring.RescoreConfig`
        "__doc__": """Which re-scorings `test` reports beside the raw metrics (`evaluation.rescore`): one
    field per method of `RESCORINGS`, named as there, holding its options (`None`: not reported).""",
    },
)


def direction_metrics(
    t2v: Scores, v2t: Scores | None, targets: torch.Tensor, ties: Ties, v2t_rule: V2TRule, chunk: int
) -> dict[str, float]:
    """`t2v/...` ranked from `t2v`'s rows and, with `v2t`, `v2t/...` from its columns."""
    out = {f"t2v/{k}": v for k, v in summarize_ranks(text_to_video_ranks(t2v, targets, ties, chunk)).items()}
    if v2t is not None:
        ranks = video_to_text_ranks(v2t, targets, ties, chunk, v2t_rule)
        out.update({f"{V2T_PREFIX[v2t_rule]}/{k}": v for k, v in summarize_ranks(ranks).items()})
    return out


def rescored_metrics(
    scores: Scores,
    targets: torch.Tensor,
    config: RescoreConfig,
    bank: QueryBank | None = None,
    ties: Ties = "optimistic",
    v2t_rule: V2TRule = "strict",
    chunk: int = CHUNK,
) -> dict[str, float]:
    """The metrics of every re-scoring `config` asks for, keyed `<method>/t2v/...` in the order of
    `RESCORINGS`, reading `chunk` rows of `scores` at a time; `bank` is QB-Norm's querybank
    (needed with `config.qbnorm`)."""
    out: dict[str, float] = {}
    for name, method in RESCORINGS.items():
        options = getattr(config, name)
        if options is not None:
            t2v, v2t = method.rescore(scores, options, bank, chunk)
            metrics = direction_metrics(t2v, v2t, targets, ties, v2t_rule, chunk)
            out.update({f"{name}/{k}": v for k, v in metrics.items()})
    return out
