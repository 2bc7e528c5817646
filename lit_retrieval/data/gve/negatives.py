"""Hard negatives from embeddings (GVE Sec. 3.3, Eq. 1's H_i): for each query, the top-ranked
candidate targets that are not its positive.

GVE Sec. 3.3: "we augment in-batch negatives with hard negatives mined from a large external corpus
using the same prober Psi_t. For a query-target pair (q, v+), the loss contrasts v+ against both other
positives in the batch and the top-K retrieved hard negatives." Used at every epoch start by the
`HardNegativeMining` callback (`data.negative_mining: prober`, Psi_t) and once, before training, by
`lit-retrieval mine-negatives` (`offline`). The candidates are the task's distinct targets plus the items
of its external corpus files (`TaskSpec.negative_corpus`, `--corpus`); the paper does not say what its
corpus holds. The search is exact (a faiss inner-product flat index over unit vectors, i.e. cosine), so
the result is the brute-force ranking.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from lit_retrieval.data.items import MediaItem, item_from_json
from lit_retrieval.errors import ConfigError


def hardest_negatives(
    queries: np.ndarray, candidates: np.ndarray, positives: list[set[int]], k: int
) -> list[list[int]]:
    """Indices of the `k` highest-scoring candidate rows per query, skipping its positive rows."""
    from lit_retrieval.faiss_library import faiss  # here: the training path loads faiss only when it mines

    index = faiss.IndexFlatIP(candidates.shape[1])
    index.add(np.ascontiguousarray(candidates, dtype=np.float32))
    depth = min(len(candidates), k + max((len(p) for p in positives), default=0))
    _, found = index.search(np.ascontiguousarray(queries, dtype=np.float32), depth)
    return [[int(j) for j in row if j >= 0 and int(j) not in skip][:k] for row, skip in zip(found, positives)]


def read_corpus(paths: list[str], target_format: str) -> list[MediaItem]:
    """The items of external corpus files (JSONL, one item per line), each checked to be a target of
    `target_format`; an error names the file and line."""
    items = []
    for path in paths:
        root = Path(path).parent
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except OSError as err:
            raise ConfigError(f"negative corpus {path}: cannot be read ({err.strerror or err})") from None
        for number, line in enumerate(lines, 1):
            if line.strip():
                try:
                    raw = json.loads(line)
                except ValueError as err:
                    raise ConfigError(f"{path}:{number}: not valid JSON ({err})") from None
                item = item_from_json(raw, f"{path}:{number}", root)
                if item.modality != target_format:
                    raise ConfigError(
                        f"{path}:{number}: corpus item is {item.modality}, the task's targets are {target_format}"
                    )
                items.append(item)
    return items


def candidate_targets(positives: list[MediaItem], corpus: list[MediaItem] = ()) -> tuple[list[MediaItem], list[int]]:
    """The distinct items of `positives` then `corpus` (by content key, first occurrence order) and
    each positive's position among them: the candidates a query's negatives are drawn from."""
    position: dict[str, int] = {}
    items: list[MediaItem] = []
    for item in [*positives, *corpus]:
        if item.key not in position:
            position[item.key] = len(items)
            items.append(item)
    return items, [position[item.key] for item in positives]
