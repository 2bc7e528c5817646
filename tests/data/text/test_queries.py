import itertools

import numpy as np
import pytest

from lit_retrieval.data.text.queries import PartialQuerySampler, partial_subsets, reorder_events, replace_words

EVENTS = ["a cat", "a dog runs", "rain falls", "a car stops", "birds sing"]


def test_partial_subsets_omit_m_events_and_keep_the_order():
    subsets = partial_subsets(5, 2)
    assert subsets == list(itertools.combinations(range(5), 3)) and len(subsets) == 10
    assert partial_subsets(3, 2) == [(0,), (1,), (2,)]
    assert partial_subsets(2, 2) == [(0,), (1,)]  # K - m < 1: keep one event
    assert partial_subsets(1, 2) == []
    with pytest.raises(ValueError):
        partial_subsets(4, 0)


def test_sampler_draws_l_distinct_ordered_partials_deterministically():
    sampler = PartialQuerySampler(drop=2, num_partial=3, seed=7)
    batch = [EVENTS, EVENTS[:3], EVENTS[:2], EVENTS[:1]]
    out = sampler.sample(batch, 0, 5)
    by_owner = {i: [q for q, o in zip(out.events, out.owner) if o == i] for i in range(4)}
    assert len(by_owner[0]) == 3 and len({tuple(q) for q in by_owner[0]}) == 3
    for query in by_owner[0]:
        assert len(query) == 3 and [EVENTS.index(e) for e in query] == sorted(EVENTS.index(e) for e in query)
    assert sorted(map(tuple, by_owner[1])) == [(e,) for e in sorted(EVENTS[:3])]
    assert len(by_owner[2]) == 2 and by_owner[3] == []  # fewer than L candidates; none for K = 1
    assert out.num_slots == 3 and all(0 <= s < 3 for s in out.slot)
    again = PartialQuerySampler(drop=2, num_partial=3, seed=7).sample(batch, 0, 5)
    assert again.events == out.events and again.slot == out.slot
    draws = {tuple(map(tuple, sampler.sample([EVENTS], 0, b).events)) for b in range(20)}
    assert len(draws) > 1  # another batch index, another draw


def test_text_augmentation_sources():
    rng = np.random.default_rng(0)
    assert replace_words("a b c d", ["x"], 1.0, rng) == "x x x x"
    assert replace_words("a b c d", ["x"], 1e-9, rng) == "a b c d"
    shuffled = PartialQuerySampler(num_partial=3, source="shuffle_events").sample([EVENTS[:3]], 0)
    orders = [tuple(q) for q in shuffled.events]
    assert (
        len(set(orders)) == 3
        and tuple(EVENTS[:3]) not in orders
        and all(sorted(o) == sorted(EVENTS[:3]) for o in orders)
    )
    replaced = PartialQuerySampler(num_partial=2, source="replace_words", replace_prob=0.5).sample([EVENTS], 0)
    assert len(replaced.events) == 2 and all(len(q) == len(EVENTS) for q in replaced.events)
    with pytest.raises(ValueError, match="unknown partial-query source"):
        PartialQuerySampler(source="paraphrase")


def test_event_order_perturbations():
    rng = np.random.default_rng(1)
    assert reorder_events(EVENTS, "reversed", rng) == EVENTS[::-1]
    for _ in range(10):
        shuffled = reorder_events(EVENTS[:2], "shuffled", rng)
        assert shuffled == EVENTS[:2][::-1]  # the only non-identity order of two events
    assert reorder_events(EVENTS[:1], "shuffled", rng) == EVENTS[:1]
