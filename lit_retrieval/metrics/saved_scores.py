"""Metrics of saved score files beyond one matrix's ranking (`lit-retrieval metrics`): the weighted
sum of several matrices of the same queries and gallery (SALI Sec. 5, control (a)), SALI's
relational / Rel-Multi metrics from an ids file's flags and shot counts (Sec. 4), and QB-Norm's
querybank read from a `[bank queries, videos]` score file (`scores_bank.npy`). The files' format is
`score_files`'."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from lit_retrieval.errors import UsageError
from lit_retrieval.metrics.ranking import text_to_video_ranks
from lit_retrieval.metrics.relational import RelationalConfig, relational_metrics
from lit_retrieval.metrics.rescoring import QBNorm, QueryBank
from lit_retrieval.metrics.score_files import RELATIONAL_KEYS, check_same_rows, ids_file, load_array, load_matrix


def ensemble(paths: list[Path], weights: list[float]) -> tuple[np.ndarray, dict[str, list] | None]:
    """sum_i weights[i] * matrix_i (float64) and the members' common ids; members whose shapes or
    ids differ are refused, naming the first member and the one that differs."""
    if len(weights) != len(paths):
        raise ValueError(f"--weights has {len(weights)} value(s) for {len(paths)} matrices")
    if not all(np.isfinite(weights)):
        raise ValueError(f"--weights must be finite, got {weights}")
    if not any(weights):
        raise ValueError(f"--weights are all zero ({weights}): the ensemble would score every video alike")
    first, first_ids = load_matrix(paths[0])
    total = weights[0] * first.astype(np.float64)
    for path, weight in zip(paths[1:], weights[1:]):
        scores, ids = load_matrix(path)
        check_same_rows(paths[0], first.shape, first_ids, path, scores.shape, ids)
        if ids is not None:
            if first_ids.get("relational") is None:  # an older first member: the first flags found
                first_ids = {**first_ids, **{k: ids.get(k) for k in (*RELATIONAL_KEYS, "min_shots")}}
            elif ids.get("relational") is not None:
                for key in (*RELATIONAL_KEYS, "min_shots"):
                    if ids.get(key) != first_ids.get(key):
                        raise ValueError(f"{key} differ between {ids_file(paths[0])} and {ids_file(path)}")
        total += weight * scores.astype(np.float64)
    return total, first_ids


def rel_multi(
    scores: torch.Tensor, targets: torch.Tensor, ids: dict | None, source: Path, min_shots: int | None, ties: str
) -> dict[str, float]:
    """SALI's relational / Rel-Multi metrics from the ids file's flags and shot counts; `{}` (with a
    note on stderr for a file written before they were saved) when it has none."""
    if ids is None:
        return {}
    if ids.get("relational") is None:
        if "relational" not in ids:
            print(
                f"note: {ids_file(source)} has no relational flags or shot counts (written before `test` saved "
                "them): no Rel-Multi; run `test` again with evaluation.save_scores to report it",
                file=sys.stderr,
            )
        return {}
    threshold = min_shots if min_shots is not None else ids.get("min_shots")
    ranks = text_to_video_ranks(scores, targets, ties)
    flags, shots = torch.tensor(ids["relational"]), torch.tensor(ids["num_shots"])
    return relational_metrics(ranks, flags, shots, RelationalConfig(min_shots=threshold))


def load_bank(path: Path, num_videos: int, config: QBNorm) -> QueryBank:
    """QB-Norm's querybank statistics from a `[bank queries, videos]` score matrix file."""
    bank = load_array(path)
    if not (np.issubdtype(bank.dtype, np.integer) or np.issubdtype(bank.dtype, np.floating)):
        raise UsageError(str(path), f"bank scores must be numbers, got dtype {bank.dtype}")
    if bank.ndim != 2 or bank.shape[1] != num_videos:
        raise ValueError(f"{path}: the bank must be [bank queries, {num_videos} videos], got shape {bank.shape}")
    if not np.isfinite(bank).all():
        raise ValueError(f"{path}: {int((~np.isfinite(bank)).sum())} bank scores are NaN or infinite")
    blocks = (torch.from_numpy(bank[start : start + 4096]) for start in range(0, len(bank), 4096))
    return QueryBank.from_blocks(blocks, num_videos, config)
