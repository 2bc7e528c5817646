"""The paired comparison (`paired.py`) of two sides' `uvrb` runs on a task list: each run's
`per_query.json` (`uvrb/runner.py`) holds every query's term of its task's metric (R@1 for the
synthetic GVE suite). The statistic is the mean over tasks of the per-task metric, AVG_datasets's
rule (GVE Tab. 1), so each query's value is weighted by Q / (T n_t) (Q queries in all, T tasks,
n_t in its task) before the per-query differences are tested: with equal task sizes this is the
plain pooled test; a task of few queries is not outweighed by a large one. Queries without a
relevant item (None) count in no task. The sign-flip test stays exact under weights (it flips
each query's weighted difference); the bootstrap resamples queries from the pooled set.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lit_retrieval.data.reading import parse_json, read_text
from lit_retrieval.errors import UsageError
from lit_retrieval.metrics.paired import PairedResult, paired_comparison

PER_QUERY_FILE = "per_query.json"  # written by `uvrb` beside results.json
PerQuery = dict[str, tuple[list[str], np.ndarray]]  # task -> (query ids, values)


def read_per_query(path: Path, tasks: tuple[str, ...] | None) -> PerQuery:
    """`tasks` (None: all) of one per_query.json; a missing task or a malformed entry is refused by name."""
    raw = parse_json(read_text(str(path)), str(path))
    if not isinstance(raw, dict):
        raise UsageError(str(path), f"expected a JSON object {{task: {{ids, values}}}}, got {type(raw).__name__}")
    missing = sorted(set(tasks or ()) - set(raw))
    if missing:
        raise UsageError(str(path), f"no per-query values for task(s) {missing}")
    out: PerQuery = {}
    for name in tasks or sorted(raw):
        entry = raw[name]
        ids, values = (entry.get("ids"), entry.get("values")) if isinstance(entry, dict) else (None, None)
        if not isinstance(ids, list) or not isinstance(values, list) or len(ids) != len(values):
            raise UsageError(str(path), f"task {name!r}: expected 'ids' and 'values' lists of one length")
        numbers = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
        out[name] = ([str(i) for i in ids], numbers)
    return out


def task_weighted(runs: list[tuple[Path, PerQuery]]) -> np.ndarray:
    """[runs, queries] of each query's value times Q / (T n_t); every run must hold the first one's
    tasks and query ids in the same order (a run of other data is refused by name)."""
    first_path, first = runs[0]
    for path, run in runs[1:]:
        for name, (ids, _) in first.items():
            if name not in run or run[name][0] != ids:
                raise UsageError(str(path), f"task {name!r}: not the queries of {first_path}")
    counted = {name: ~np.isnan(values) for name, (_, values) in first.items()}
    total = sum(int(mask.sum()) for mask in counted.values())
    if total == 0:
        raise UsageError(str(first_path), "no query with a relevant item in the compared tasks")
    used = [name for name, mask in counted.items() if mask.any()]
    rows = []
    for _, run in runs:
        parts = [run[name][1][counted[name]] * total / (len(used) * counted[name].sum()) for name in used]
        rows.append(np.concatenate(parts))
    return np.stack(rows)


def compare_per_query_files(
    a: list[Path],
    b: list[Path],
    tasks: tuple[str, ...] | None = None,
    permutations: int = 10_000,
    resamples: int = 10_000,
    seed: int = 0,
) -> PairedResult:
    """Side `a`'s mean over `tasks` of the per-task metric against side `b`'s (module notes); the
    means are the AVG_datasets of those tasks, averaged over each side's runs."""
    runs = [(path, read_per_query(path, tasks)) for path in [*a, *b]]
    values = task_weighted(runs)
    return paired_comparison(values[: len(a)], values[len(a) :], permutations, resamples, seed)
