"""Paired comparison of two retrieval systems on the same queries (docs/experiments.md, "Shared
statistics"): per query, the R@k hit of each system averaged over its runs (seeds), differenced;
a two-sided sign-flip permutation test of the mean difference and a percentile bootstrap interval.

Why this test: the queries are the replicate a recall is an average over, and pairing on the same
query removes its difficulty; 3 seeds per system give a t-test over seeds almost no power. Under
the null hypothesis (the two systems are exchangeable on every query) each query's difference is
as likely to have either sign, so flipping signs draws from the null distribution of the mean.
With one run per side the differences are -1, 0 or 1 and the test is the exact two-sided sign
test (McNemar's exact test). No paper of the three prescribes a test; this is our choice.

Exact enumeration of the 2^m sign vectors of the m nonzero differences when 2^m is at most
`permutations`, else `permutations` random sign vectors and the add-one p-value (count + 1) /
(permutations + 1) (Phipson and Smyth, 2010), which is never 0.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

TOLERANCE = 1e-9  # |mean| comparisons: sums of the same numbers in another order


@dataclass(frozen=True)
class PairedResult:
    queries: int
    mean_a: float
    mean_b: float
    difference: float
    ci95: tuple[float, float]
    p_value: float
    exact: bool
    permutations: int

    def as_dict(self, scale: float = 100.0) -> dict:
        """In percentage points (`scale` 100) as the project reports recalls."""
        return {
            "queries": self.queries,
            "a": self.mean_a * scale,
            "b": self.mean_b * scale,
            "difference": self.difference * scale,
            "ci95": [self.ci95[0] * scale, self.ci95[1] * scale],
            "p_value": self.p_value,
            "test": "exact sign-flip" if self.exact else f"sign-flip, {self.permutations} random flips",
        }


def sign_flip_p_value(differences: np.ndarray, permutations: int, rng: np.random.Generator) -> tuple[float, bool]:
    """Two-sided p-value of mean(differences) = 0 and whether it was enumerated exactly."""
    nonzero = differences[differences != 0]
    observed = abs(nonzero.sum())
    if len(nonzero) == 0:
        return 1.0, True
    if 2 ** len(nonzero) <= permutations:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=len(nonzero))))
        return float(np.mean(np.abs(signs @ nonzero) >= observed - TOLERANCE)), True
    extreme = 0
    for start in range(0, permutations, 1024):  # blocks bound the memory at 1024 x queries
        signs = rng.choice((1.0, -1.0), size=(min(1024, permutations - start), len(nonzero)))
        extreme += int(np.sum(np.abs(signs @ nonzero) >= observed - TOLERANCE))
    return (extreme + 1) / (permutations + 1), False


def bootstrap_interval(
    differences: np.ndarray, resamples: int, rng: np.random.Generator, level: float = 0.95
) -> tuple[float, float]:
    """Percentile interval of the mean difference over `resamples` resamplings of the queries."""
    means = np.empty(resamples)
    for start in range(0, resamples, 1024):
        rows = rng.integers(0, len(differences), size=(min(1024, resamples - start), len(differences)))
        means[start : start + len(rows)] = differences[rows].mean(axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def paired_comparison(
    hits_a: np.ndarray, hits_b: np.ndarray, permutations: int = 10_000, resamples: int = 10_000, seed: int = 0
) -> PairedResult:
    """`hits_a` [runs_a, queries] and `hits_b` [runs_b, queries]: 1 where a run ranks the query's
    video within k, else 0. Each side is averaged over its runs, then compared per query."""
    if hits_a.ndim != 2 or hits_b.ndim != 2 or hits_a.shape[1] != hits_b.shape[1] or hits_a.shape[1] == 0:
        raise ValueError(f"hits must be [runs, queries] over the same queries, got {hits_a.shape} and {hits_b.shape}")
    if permutations < 1 or resamples < 1:
        raise ValueError(f"permutations and resamples must be >= 1, got {permutations} and {resamples}")
    a, b = hits_a.mean(axis=0), hits_b.mean(axis=0)
    differences = a - b
    rng = np.random.default_rng(seed)
    p_value, exact = sign_flip_p_value(differences, permutations, rng)
    return PairedResult(
        queries=len(differences),
        mean_a=float(a.mean()),
        mean_b=float(b.mean()),
        difference=float(differences.mean()),
        ci95=bootstrap_interval(differences, resamples, rng),
        p_value=p_value,
        exact=exact,
        permutations=permutations,
    )
