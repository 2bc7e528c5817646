"""Multi-event query building: concatenation (MELON Sec. 4.2), per-event pooling (Tab. 5), the
partial queries of the MEA loss (Sec. 4.3), the text augmentations that replace them in Tab. 7,
and the event-order perturbations of Tab. 6.

Every random choice draws from a generator seeded by explicit integers (seed, epoch, batch, rank
or query index), so a run and its resumed copy build the same queries.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Literal

import numpy as np

from lit_retrieval.errors import ConfigError

QueryMode = Literal["concat", "events"]
PartialSource = Literal["drop_events", "replace_words", "shuffle_events"]
EventOrder = Literal["reversed", "shuffled"]


def concat_query(descriptions: list[str], separator: str = " ") -> str:
    """The K event descriptions joined in their original order into one query (MELON Sec. 4.2)."""
    return separator.join(d.strip() for d in descriptions)


def partial_subsets(num_events: int, drop: int) -> list[tuple[int, ...]]:
    """Every proper subset of `range(num_events)` that omits `drop` events, in original order.

    Choice (the paper is silent): when `num_events - drop < 1` the subsets keep one event (the
    largest drop that still leaves a query); a single-event query has no proper subset, so `[]`.
    """
    if drop < 1:
        raise ValueError(f"drop (m) must be >= 1, got {drop}")
    if num_events < 2:
        return []
    keep = max(num_events - drop, 1)
    return list(itertools.combinations(range(num_events), keep))


def replace_words(text: str, vocabulary: list[str], prob: float, rng: np.random.Generator) -> str:
    """Each word replaced with probability `prob` by a random word of `vocabulary` (Tab. 7
    "word replacement"; the paper names no source of words, we draw from the batch's queries,
    so nothing is downloaded and the words stay in-domain)."""
    words = text.split()
    hits = rng.random(len(words)) < prob
    return " ".join(vocabulary[rng.integers(len(vocabulary))] if hit else word for word, hit in zip(words, hits))


def distinct_permutations(num_events: int, count: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """Up to `count` distinct non-identity orders of `num_events` events, drawn at random."""
    identity = tuple(range(num_events))
    if num_events < 2:
        return []
    if count >= np.prod(range(1, num_events + 1)) - 1:
        options = [p for p in itertools.permutations(identity) if p != identity]
        rng.shuffle(options)
        return options[:count]
    chosen: list[tuple[int, ...]] = []
    while len(chosen) < count:
        order = tuple(int(i) for i in rng.permutation(num_events))
        if order != identity and order not in chosen:
            chosen.append(order)
    return chosen


@dataclass
class PartialBatch:
    """The partial queries of a batch, flattened: query `n` belongs to sample `owner[n]` and fills
    slot `slot[n]` of its `[B, L]` row; slots without a query are masked out of the MEA loss."""

    events: list[list[str]]
    owner: list[int]
    slot: list[int]
    num_slots: int


class PartialQuerySampler:
    """Draws L distinct partial queries per sample and step (MELON Sec. 4.3: m omitted events).

    `source` selects what stands in the partial-query slots: `drop_events` (the paper's partial
    queries), or the Tab. 7 alternatives `replace_words` (the full query with words replaced) and
    `shuffle_events` (the full query's events in another order). When fewer than L distinct
    candidates exist (e.g. K = 2 leaves two one-event subsets), the sample uses all of them and
    its remaining slots are masked; a one-event query has no partial query at all.
    """

    def __init__(
        self,
        drop: int = 2,
        num_partial: int = 3,
        source: PartialSource = "drop_events",
        replace_prob: float = 0.3,
        seed: int = 0,
    ) -> None:
        if num_partial < 1:
            raise ConfigError(f"num_partial (L) must be >= 1, got {num_partial}")
        if source not in ("drop_events", "replace_words", "shuffle_events"):
            raise ConfigError(
                f"unknown partial-query source {source!r}; choose drop_events, replace_words or shuffle_events"
            )
        if not 0.0 < replace_prob <= 1.0:
            raise ConfigError(f"replace_prob must be in (0, 1], got {replace_prob}")
        partial_subsets(3, drop)  # validates drop
        self.drop = drop
        self.num_partial = num_partial
        self.source = source
        self.replace_prob = replace_prob
        self.seed = seed

    def sample(self, events: list[list[str]], *stream: int) -> PartialBatch:
        """Partial queries for a batch; `stream` (e.g. epoch, batch index, rank) picks the draw."""
        rng = np.random.default_rng([self.seed, *stream])
        vocabulary = [w for sample in events for d in sample for w in d.split()]
        out = PartialBatch(events=[], owner=[], slot=[], num_slots=self.num_partial)
        for i, sample in enumerate(events):
            for slot, query in enumerate(self._for_sample(sample, vocabulary, rng)):
                out.events.append(query)
                out.owner.append(i)
                out.slot.append(slot)
        return out

    def _for_sample(self, sample: list[str], vocabulary: list[str], rng: np.random.Generator) -> list[list[str]]:
        if self.source == "drop_events":
            subsets = partial_subsets(len(sample), self.drop)
            picks = rng.choice(len(subsets), size=min(self.num_partial, len(subsets)), replace=False) if subsets else []
            return [[sample[k] for k in subsets[p]] for p in sorted(picks)]
        if self.source == "shuffle_events":
            return [[sample[k] for k in order] for order in distinct_permutations(len(sample), self.num_partial, rng)]
        return [[replace_words(d, vocabulary, self.replace_prob, rng) for d in sample] for _ in range(self.num_partial)]


def reorder_events(sample: list[str], order: EventOrder, rng: np.random.Generator) -> list[str]:
    """The query's events reversed, or shuffled into a non-identity order when K >= 2 (Tab. 6)."""
    if order == "reversed":
        return list(reversed(sample))
    if order == "shuffled":
        permutations = distinct_permutations(len(sample), 1, rng)
        return [sample[k] for k in permutations[0]] if permutations else list(sample)
    raise ValueError(f"unknown event order {order!r}; choose reversed or shuffled")
