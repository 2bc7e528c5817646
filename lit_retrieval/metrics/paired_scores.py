"""The paired comparison (`paired.py`) of two sides' saved score matrices: the files `test` writes
with `evaluation.save_scores` (`score_files.py`), one per run, read once each, ranked, and
optionally restricted to a slice of the queries (by their length in tokens, or SALI's relational
subsets: relational, non-relational, Rel-Multi); and Holm's correction of
several such comparisons (docs/experiments.md, "Shared statistics"). `lit-retrieval compare` and
`lit-retrieval report` (a plan's `comparisons`) both call `compare_score_files`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from lit_retrieval.errors import ConfigError, UsageError
from lit_retrieval.metrics.paired import PairedResult, paired_comparison
from lit_retrieval.metrics.ranking import text_to_video_ranks
from lit_retrieval.metrics.score_files import check_same_rows, ids_file, load_matrix, load_targets


QuerySubset = Literal["all", "relational", "non_relational", "rel_multi"]
QUERY_SUBSETS = ("all", "relational", "non_relational", "rel_multi")


@dataclass(frozen=True)
class TokenRange:
    """Queries of `low` to `high` tokens, both inclusive (`None`: unbounded): `TokenRange(78)` are
    the queries CLIP's 77 positions truncate."""

    low: int | None = None
    high: int | None = None

    def __post_init__(self) -> None:
        for bound in (self.low, self.high):
            if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int) or bound < 0):
                raise ConfigError(f"token bounds are counts >= 0 or unbounded, got {bound!r}")
        if self.low is not None and self.high is not None and self.low > self.high:
            raise ConfigError(f"the token range {self.low}-{self.high} is empty (reversed bounds)")

    def __str__(self) -> str:
        return f"{self.low or 0}-{'' if self.high is None else self.high} tokens"

    def mask(self, tokens: np.ndarray) -> np.ndarray:
        low = -np.inf if self.low is None else self.low
        high = np.inf if self.high is None else self.high
        return (tokens >= low) & (tokens <= high)


def compare_score_files(
    a: list[Path],
    b: list[Path],
    k: int = 1,
    ties: str = "optimistic",
    text_video: Path | None = None,
    tokens: TokenRange | None = None,
    queries: QuerySubset = "all",
    permutations: int = 10_000,
    resamples: int = 10_000,
    seed: int = 0,
) -> PairedResult:
    """Side `a`'s text-to-video R@k against side `b`'s on the same queries: each matrix must hold
    the first one's queries and gallery (ids, or shapes where no file has ids; the targets then
    come from `text_video` or the diagonal). With `tokens`, only the queries of that length in the
    first file's `query_tokens` are compared, and with `queries` only that relational subset of its
    `relational` flags (a file without them is refused by name)."""
    first_path = a[0]
    first_scores, first_ids = load_matrix(first_path)
    first = (first_path, first_scores.shape, first_ids)
    targets = query_targets(first_path, first_scores.shape, first_ids, text_video)
    chosen = np.ones(first_scores.shape[0], dtype=bool)
    if tokens is not None:
        chosen &= token_slice(first_path, first_ids, tokens)
    if queries != "all":
        chosen &= relational_subset(first_path, first_ids, queries)
    if not chosen.any():
        raise UsageError(str(ids_file(first_path)), f"no query is in the slice ({tokens or 'any length'}, {queries})")
    hits = {}
    for side, paths in (("a", a), ("b", b)):
        rows = []
        for path in paths:
            scores, ids = (first_scores, first_ids) if path == first_path else load_matrix(path)
            check_same_rows(*first, path, scores.shape, ids)
            if not np.isfinite(scores).all():
                raise UsageError(str(path), f"{int((~np.isfinite(scores)).sum())} scores are infinite")
            ranks = text_to_video_ranks(torch.from_numpy(scores).double(), targets, ties)
            rows.append((ranks <= k).numpy().astype(np.float64))
        hits[side] = np.stack(rows)[:, chosen]
    return paired_comparison(hits["a"], hits["b"], permutations, resamples, seed)


def query_targets(path: Path, shape: tuple[int, ...], ids: dict | None, text_video: Path | None) -> torch.Tensor:
    """Each text row's video column: `text_video`'s array, else the ids file's targets, else the
    diagonal; refused unless there is one valid column per row."""
    if text_video is not None:
        targets = load_targets(text_video)
    elif ids is not None:
        targets = torch.tensor(ids["targets"], dtype=torch.long)
    else:
        targets = torch.arange(shape[0])
    texts, videos = shape
    if len(targets) != texts or (texts and not 0 <= int(targets.min()) <= int(targets.max()) < videos):
        raise UsageError(
            str(text_video or path), f"needs {texts} targets, each a video column in [0, {videos}), for {path}"
        )
    return targets


def token_slice(path: Path, ids: dict | None, tokens: TokenRange) -> np.ndarray:
    """The rows of the queries within `tokens`; a file without token counts is refused."""
    counts = None if ids is None else ids.get("query_tokens")
    if counts is None:
        raise UsageError(
            str(ids_file(path)),
            "has no 'query_tokens' (written by `test` with save_scores since the token slices): cannot slice by tokens",
        )
    return tokens.mask(np.asarray(counts))


def relational_subset(path: Path, ids: dict | None, subset: QuerySubset) -> np.ndarray:
    """SALI Sec. 4's subsets as `test` reports them (`metrics/relational.py`): the relational
    queries, the others, or Rel-Multi (relational, and the video has at least `min_shots` shots;
    `null`: the median shot count of all queries)."""
    if ids is None or ids.get("relational") is None:
        raise UsageError(
            str(ids_file(path)), f"has no 'relational' flags (a test with relational evaluation): cannot take {subset}"
        )
    relational = np.asarray(ids["relational"], dtype=bool)
    if subset == "relational":
        return relational
    if subset == "non_relational":
        return ~relational
    shots = np.asarray(ids["num_shots"], dtype=np.float64)
    threshold = ids.get("min_shots")
    threshold = float(np.quantile(shots, 0.5)) if threshold is None else float(threshold)
    return relational & (shots >= threshold)


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm, 1979), in the input order: the i-th smallest of m
    is multiplied by m - i + 1 (i from 1), capped at 1, and made non-decreasing along that order."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [0.0] * len(p_values)
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted
