"""Re-scoring on `test` (`evaluation.rescore`), the evaluator's side: every process's rows of the
raw matrix merged in dataset order, QB-Norm's querybank (`bank_size` training queries drawn by
`RetrievalEvaluator.query_bank`, scored against the test gallery by the head, and written with
`save_scores` as `scores_bank.npy`), and the metrics of every method `RescoreConfig` asks for, keyed
by its name (`lit_retrieval.metrics.rescoring`, `RESCORINGS`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import lightning as L
import torch

from lit_retrieval.metrics.rescoring import QueryBank, rescored_metrics
from lit_retrieval.models.heads.base import rep_len

if TYPE_CHECKING:  # the evaluator calls this module
    from lit_retrieval.modules.evaluation import EvalSplit, RetrievalEvaluator


def rescored(
    evaluator: RetrievalEvaluator, model: L.LightningModule, split: EvalSplit, scores: torch.Tensor
) -> dict[str, float]:
    """The `rescore` metrics of every process's test rows (this process's `scores`) against the
    gallery; with `qbnorm`, its querybank's scores (module docstring)."""
    config = evaluator.config.rescore
    assert config is not None
    matrix = evaluator.merge_queries(model, split, scores)
    targets = evaluator.merge_queries(model, split, split.targets)
    bank = None
    if config.qbnorm is not None:
        reps = evaluator.query_bank(model, config.qbnorm.bank_size)
        scored = evaluator.score_rows(evaluator.head_score(model.head), reps, split.gallery)
        keep = evaluator.config.save_scores
        blocks = [rows for _, rows in scored] if keep else (rows for _, rows in scored)
        bank = QueryBank.from_blocks(blocks, rep_len(split.gallery), config.qbnorm)
        if keep:
            evaluator.save_bank(model, torch.cat(blocks))
    return rescored_metrics(matrix, targets, config, bank, evaluator.config.ties, evaluator.config.v2t_rule)
