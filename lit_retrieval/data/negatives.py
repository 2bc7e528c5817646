"""Hard negatives from embeddings (GVE Sec. 3.3, Eq. 1's H_i): for each query, the top-ranked
candidate targets that are not among its positives.

Used offline by `lit-retrieval mine-negatives` (A.4: "pre-mined explicit hard negatives") and, with
`data.negative_mining: prober`, at every epoch start by the Modality Pyramid's prober (Sec. 3.3: "hard
negatives mined ... using the same prober Psi_t"). The search is exact (a faiss inner-product flat
index over unit vectors, i.e. cosine), so the result is the brute-force ranking.
"""

from __future__ import annotations

import numpy as np

from lit_retrieval.data.media import MediaItem


def hardest_negatives(
    queries: np.ndarray, candidates: np.ndarray, positives: list[set[int]], k: int
) -> list[list[int]]:
    """Indices of the `k` highest-scoring candidate rows per query, skipping its positive rows."""
    import faiss  # imported here: the training path loads faiss only when it mines (tests/test_layers.py)

    index = faiss.IndexFlatIP(candidates.shape[1])
    index.add(np.ascontiguousarray(candidates, dtype=np.float32))
    depth = min(len(candidates), k + max((len(p) for p in positives), default=0))
    _, found = index.search(np.ascontiguousarray(queries, dtype=np.float32), depth)
    return [[int(j) for j in row if j >= 0 and int(j) not in skip][:k] for row, skip in zip(found, positives)]


def distinct_targets(positives: list[MediaItem]) -> tuple[list[MediaItem], list[int]]:
    """The distinct items of `positives` (by content key, first occurrence order) and each
    positive's position among them: the candidate corpus of a task's own targets."""
    position: dict[str, int] = {}
    items: list[MediaItem] = []
    for item in positives:
        if item.key not in position:
            position[item.key] = len(items)
            items.append(item)
    return items, [position[item.key] for item in positives]
