"""The score files `test` writes to the run directory with `evaluation.save_scores`: their format
(this docstring), their writer and their reader.

- `scores.npy`: float32 `[num_texts, num_videos]`, row i = query i, column j = video j, both in
  dataset order (duplicates from distributed padding removed).
- `scores_ids.json`: `{"text_ids": [...], "video_ids": [...], "targets": [...], "relational": ...,
  "num_shots": ..., "min_shots": ..., "num_events": ..., "query_tokens": ...}`, where `text_ids[i]`
  is the id of the video query i describes, `video_ids[j]` the id of column j's video and
  `targets[i]` query i's column. With `relational` evaluation, `relational[i]` is query i's
  relational flag, `num_shots[i]` its video's shot count and `min_shots` Rel-Multi's threshold
  (`null`: the median), so `metrics` reports Rel-Multi from the file alone (SALI Sec. 4); without,
  the three are `null`. `num_events[i]` is query i's number of events and `query_tokens[i]` its
  untruncated length in the text tower's tokens (`null` for a model that does not count them), so
  `compare` and `report` test a slice of the queries (`--min-tokens`). A file written before an
  entry was saved lacks it; the reader accepts that (`RELATIONAL_KEYS`, `QUERY_COUNT_KEYS`).
- `scores_bank.npy` (with `rescore.qbnorm`): QB-Norm's querybank scores, float32 `[bank queries,
  videos]` in `scores.npy`'s column order, so that `lit-retrieval metrics scores.npy --rescore
  qbnorm --bank scores_bank.npy` re-scores the saved matrix as `test` did.

The writer (`write_scores`, `write_bank`) takes one process's complete values; gathering them over
processes and writing on rank 0 is the evaluator's (`RetrievalEvaluator.save_scores`,
lit_retrieval/modules/evaluation.py). The reader takes any `NAME.npy` with its `NAME_ids.json`
(`ids_file`), each checked against the other; every failure names the file.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import torch

from lit_retrieval.errors import UsageError

SCORES_FILE = "scores.npy"  # beside the test's metrics.json
SCORE_IDS_FILE = "scores_ids.json"
BANK_FILE = "scores_bank.npy"
ID_KEYS = ("text_ids", "video_ids", "targets")
RELATIONAL_KEYS = ("relational", "num_shots")  # per query; with `min_shots`, written by `test` since Rel-Multi
QUERY_COUNT_KEYS = ("num_events", "query_tokens")  # per query; written by `test` since the token slices


def write_scores(
    directory: Path,
    scores: torch.Tensor,
    video_ids: list[str],
    targets: list[int],
    num_events: list[int],
    query_tokens: list[int] | None = None,
    relational: list[bool] | None = None,
    num_shots: list[int] | None = None,
    min_shots: int | None = None,
) -> None:
    """Write `scores.npy` and `scores_ids.json` (module docstring) to `directory`: `scores` is the
    `[texts, videos]` matrix, `video_ids` names its columns, `targets[i]` is text i's column (its
    `text_ids` entry is that column's video id); `relational` and `num_shots` go together, and
    `min_shots` is written only with them."""
    np.save(directory / SCORES_FILE, scores.cpu().numpy().astype(np.float32))
    ids = {
        "text_ids": [video_ids[t] for t in targets],
        "video_ids": video_ids,
        "targets": targets,
        "relational": relational,
        "num_shots": num_shots,
        "min_shots": min_shots if relational is not None else None,
        "num_events": num_events,
        "query_tokens": query_tokens,
    }
    (directory / SCORE_IDS_FILE).write_text(json.dumps(ids))


def write_bank(directory: Path, scores: torch.Tensor) -> None:
    """Write QB-Norm's querybank scores `[bank queries, videos]` as `scores_bank.npy` (module docstring)."""
    np.save(directory / BANK_FILE, scores.cpu().numpy().astype(np.float32))


def ids_file(matrix: Path) -> Path:
    """The ids file `test` writes next to `matrix` (`scores.npy` -> `scores_ids.json`)."""
    return matrix.with_name(f"{matrix.stem}_ids.json")


def load_ids(matrix: Path, shape: tuple[int, ...]) -> dict[str, list] | None:
    """The ids of `matrix` (None without an ids file), checked against its shape."""
    path = ids_file(matrix)
    if not path.exists():
        return None
    try:
        ids = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(ids, dict) or any(not isinstance(ids.get(k), list) for k in ID_KEYS):
        raise ValueError(f"{path}: needs the lists {list(ID_KEYS)}")
    sizes = (len(ids["text_ids"]), len(ids["video_ids"]))
    if len(ids["targets"]) != sizes[0] or sizes != tuple(shape):
        raise ValueError(
            f"{path}: {sizes[0]} text ids, {len(ids['targets'])} targets and {sizes[1]} video ids "
            f"do not fit {matrix}'s shape {tuple(shape)}"
        )
    if any(not isinstance(t, int) or isinstance(t, bool) for t in ids["targets"]):
        raise ValueError(f"{path}: targets must be integers (video columns)")
    check_relational(path, ids, sizes[0])
    check_query_counts(path, ids, sizes[0])
    return ids


def is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_query_counts(path: Path, ids: dict, num_texts: int) -> None:
    """`num_events` and `query_tokens`: each a list of one count per text, or `null`/absent (a file
    written before they were saved, or a model that does not count tokens)."""
    for key in QUERY_COUNT_KEYS:
        values = ids.get(key)
        if values is not None and (
            not isinstance(values, list) or len(values) != num_texts or not all(is_count(v) for v in values)
        ):
            raise ValueError(f"{path}: {key!r} must be a list of {num_texts} counts >= 0 (one per text) or null")


def check_relational(path: Path, ids: dict, num_texts: int) -> None:
    """The relational entries of an ids file: both lists (one flag and one shot count per text) or
    both `null` or both absent (a file written before they were saved)."""
    present = [key for key in RELATIONAL_KEYS if ids.get(key) is not None]
    if not present:
        return
    if len(present) == 1:
        raise ValueError(f"{path}: has {present[0]!r} without {set(RELATIONAL_KEYS).difference(present).pop()!r}")
    flags, shots = ids["relational"], ids["num_shots"]
    if not isinstance(flags, list) or not isinstance(shots, list) or len(flags) != num_texts or len(shots) != num_texts:
        raise ValueError(f"{path}: 'relational' and 'num_shots' must be lists of {num_texts} values (one per text)")
    if any(not isinstance(f, bool) for f in flags) or not all(is_count(n) for n in shots):
        raise ValueError(f"{path}: 'relational' must hold true/false and 'num_shots' counts >= 0")
    if ids.get("min_shots") is not None and not is_count(ids["min_shots"]):
        raise ValueError(f"{path}: 'min_shots' must be a count >= 0 or null, got {ids['min_shots']!r}")


def load_array(path: Path) -> np.ndarray:
    """The array of a `.npy` file; an `.npz` archive, pickled objects or an unreadable file is a
    `UsageError` naming it."""
    try:
        array = np.load(path, allow_pickle=False)
    except (ValueError, EOFError, pickle.UnpicklingError):
        raise UsageError(
            str(path), "not a .npy array (unreadable, or pickled objects, which are never loaded)"
        ) from None
    if not isinstance(array, np.ndarray):  # an .npz archive
        array.close()
        raise UsageError(str(path), "an .npz archive; give one .npy array (np.save)")
    return array


def load_targets(path: Path) -> torch.Tensor:
    """Text-to-video targets of a `.npy` file: integers, refused otherwise (a float array is not
    truncated: 2.7 is not a video column)."""
    targets = load_array(path)
    if not np.issubdtype(targets.dtype, np.integer):
        raise UsageError(
            str(path), f"targets must be an integer array, got {targets.dtype} (save them with .astype(int))"
        )
    return torch.from_numpy(targets.astype(np.int64))


def load_matrix(path: Path) -> tuple[np.ndarray, dict[str, list] | None]:
    scores = load_array(path)
    if not (np.issubdtype(scores.dtype, np.integer) or np.issubdtype(scores.dtype, np.floating)):
        raise UsageError(str(path), f"scores must be numbers, got dtype {scores.dtype}")
    if np.isnan(scores).any():
        raise UsageError(str(path), f"{int(np.isnan(scores).sum())} scores are NaN")
    if scores.ndim != 2:
        raise ValueError(f"{path}: scores must be [texts, videos], got shape {scores.shape}")
    return scores, load_ids(path, scores.shape)


Shape = tuple[int, ...]


def check_same_rows(
    first: Path, first_shape: Shape, first_ids: dict | None, path: Path, shape: Shape, ids: dict | None
) -> None:
    """Refuse a matrix `path` whose queries and gallery are not `first`'s: another shape, an ids
    file on one side only, or ids that differ (naming the first position where they do)."""
    if tuple(shape) != tuple(first_shape):
        raise ValueError(f"{path} has shape {tuple(shape)}, {first} has {tuple(first_shape)}")
    if (ids is None) != (first_ids is None):
        with_ids, without = (path, first) if ids is not None else (first, path)
        raise ValueError(f"{with_ids} has an ids file but {without} has none ({ids_file(without)})")
    if ids is not None:
        for key in ID_KEYS:
            if ids[key] != first_ids[key]:
                at = next(i for i, (a, b) in enumerate(zip(first_ids[key], ids[key])) if a != b)
                where = f"{ids_file(first)} and {ids_file(path)} (first at position {at})"
                raise ValueError(f"{key} differ between {where}")
