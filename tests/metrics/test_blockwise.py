"""Blockwise evaluation equals the full-matrix path; several relevant items; tie rules."""

from __future__ import annotations

import pytest
import torch

from lit_retrieval.metrics.blockwise import Relevance, blockwise_search, ranked_metrics
from lit_retrieval.metrics.ranking import retrieval_metrics, text_to_video_ranks


@pytest.mark.parametrize("ties", ["optimistic", "pessimistic", "average"])
def test_blockwise_equals_full_matrix(ties):
    g = torch.Generator().manual_seed(0)
    queries, gallery = torch.randn(300, 16, generator=g), torch.randn(200, 16, generator=g)
    queries, gallery = queries.round(), gallery.round()  # integer scores: many ties
    targets = torch.randint(0, 200, (300,), generator=g)
    tiny_budget = 200 * 5 * 7 / 2**20  # 7 query rows per block
    result = blockwise_search(queries, gallery, Relevance.single(targets), k=10, memory_mb=tiny_budget, ties=ties)
    scores = queries @ gallery.t()
    torch.testing.assert_close(result.ranks, text_to_video_ranks(scores, targets, ties))
    torch.testing.assert_close(result.topk_scores, scores.topk(10, dim=1).values)
    full = retrieval_metrics(scores, targets, ties)
    got = ranked_metrics(result)
    for k in (1, 5, 10):
        assert got[f"R@{k}"] * 100 == pytest.approx(full[f"t2v/R@{k}"])
    assert got["MdR"] == full["t2v/MdR"] and got["MnR"] == pytest.approx(full["t2v/MnR"])


def test_several_relevant_items_recall_and_precision_at_one():
    scores_gallery = torch.eye(6)
    queries = torch.tensor([[6.0, 5, 4, 3, 2, 1], [1.0, 2, 3, 4, 5, 6], [0.0, 0, 0, 9, 0, 0]])
    relevance = Relevance.from_lists([[0, 1, 5], [2], [3, 4]])
    result = blockwise_search(queries, scores_gallery, relevance, k=3)
    assert result.ranks.tolist() == [1.0, 2.0, 6.0, 4.0, 1.0, 2.0]
    metrics = ranked_metrics(result, ks=(1, 2))
    assert metrics["P@1"] == pytest.approx(2 / 3)  # queries 0 and 2 have a relevant item on top
    assert metrics["R@1"] == pytest.approx((1 / 3 + 0 + 1 / 2) / 3)
    assert metrics["R@2"] == pytest.approx((2 / 3 + 0 + 2 / 2) / 3)
    assert metrics["hit@2"] == pytest.approx(2 / 3) and metrics["MnR"] == pytest.approx((1 + 4 + 1) / 3)
    assert result.topk[0].tolist() == [0, 1, 2]


def test_bad_relevance_is_refused():
    with pytest.raises(ValueError, match="index the 4 gallery rows"):
        blockwise_search(torch.zeros(1, 2), torch.zeros(4, 2), Relevance.from_lists([[4]]))
