"""SALI's relational evaluation (SALI Sec. 2 and 4).

- Rel-Multi: the relational queries whose video has at least the median shot count of the
  evaluation split (34 on Condensed Movies, 4 on ActivityNet); R@K etc. over that subset, the
  whole gallery still ranked.
- Diagnosis (Sec. 2): text-to-video R@10 by shot-count quartile of the matching video, separately
  for relational and non-relational queries.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from lit_retrieval.metrics.ranking import summarize_ranks


@dataclass
class RelationalConfig:
    """What SALI adds to an evaluation stage's metrics.

    Args:
        stages: stages that report it (`val`, `test`).
        min_shots: Rel-Multi's shot threshold; `None` takes the split's median shot count.
        diagnosis: R@`diagnosis_k` by shot-count quartile for relational vs other queries.
        diagnosis_k: the recall cut-off of the diagnosis (10 in the paper).
    """

    stages: list[str] = field(default_factory=lambda: ["val", "test"])
    min_shots: int | None = None
    diagnosis: bool = False
    diagnosis_k: int = 10


# the name before the config-naming convention; checkpoints pickled it in their hyper-parameters
RelationalEval = RelationalConfig


def _summary(prefix: str, ranks: torch.Tensor, chosen: torch.Tensor) -> dict[str, float]:
    out = {f"{prefix}/n": float(chosen.sum())}
    if chosen.any():
        out.update({f"{prefix}/t2v/{k}": v for k, v in summarize_ranks(ranks[chosen]).items()})
    return out


def relational_metrics(
    ranks: torch.Tensor, relational: torch.Tensor, num_shots: torch.Tensor, config: RelationalConfig
) -> dict[str, float]:
    """Relational, non-relational and Rel-Multi metrics (and the quartile diagnosis) from the
    text-to-video rank of every query, its relational flag and its video's shot count."""
    shots = num_shots.double()
    threshold = float(config.min_shots) if config.min_shots is not None else float(torch.quantile(shots, 0.5))
    relational = relational.bool()
    out = {"rel_multi/min_shots": threshold}
    out.update(_summary("relational", ranks, relational))
    out.update(_summary("non_relational", ranks, ~relational))
    out.update(_summary("rel_multi", ranks, relational & (shots >= threshold)))
    if config.diagnosis:
        edges = torch.quantile(shots, torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64, device=shots.device))
        quartile = torch.bucketize(shots, edges, right=True)
        for q in range(4):
            out[f"diagnosis/q{q + 1}/max_shots"] = (
                float(shots[quartile == q].max()) if (quartile == q).any() else float("nan")
            )
            for name, kind in (("relational", relational), ("non_relational", ~relational)):
                chosen = kind & (quartile == q)
                out[f"diagnosis/q{q + 1}/{name}/n"] = float(chosen.sum())
                if chosen.any():
                    hits = (ranks[chosen] <= config.diagnosis_k).double().mean() * 100
                    out[f"diagnosis/q{q + 1}/{name}/R@{config.diagnosis_k}"] = float(hits)
    return out
