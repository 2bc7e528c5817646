"""Evaluation under DDP on 3 CPU processes (gloo) gives exactly the metrics of one process: with
one video per rank, and with a rank whose every video is undecodable (it has no batch to evaluate,
yet takes part in every collective). The skipped-video count counts each video once, not the
duplicates PyTorch's `DistributedSampler` adds to even out the ranks (7 videos -> 9 slots: rank r
takes slots r, r + 3, r + 6 of 0 1 2 3 4 5 6 0 1)."""

from __future__ import annotations

import pytest
from helpers.evaluation_runs import annotations, test_metrics


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize(
    "tests, broken, skipped",
    [
        (3, (), None),  # one video per rank
        # rank 2's slots hold videos 2, 5 and 1 (a padding duplicate): all broken, no batch there;
        # rank 1 also meets video 1: 3 videos skipped, not 4
        (7, (1, 2, 5), 3.0),
    ],
    ids=["one-video-per-rank", "rank-without-batches"],
)
def test_three_processes_evaluate_as_one(tmp_path, tiny_clip, corpus, tests, broken, skipped):
    annotation = annotations(corpus, tmp_path, tests, broken)
    [single] = test_metrics(tmp_path, tiny_clip, corpus, annotation, 1)
    ranks = test_metrics(tmp_path, tiny_clip, corpus, annotation, 3)
    assert single.get("skipped_videos") == skipped
    assert single["t2v/R@1"] >= 0 and len(single) > 6
    for results in ranks:  # every rank reports the one-process metrics
        assert results == pytest.approx(single, abs=1e-9)
