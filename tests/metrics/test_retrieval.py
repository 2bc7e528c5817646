"""`blockwise_metrics` (issue 57, item 8): the metrics of the full score matrix (brute force:
`retrieval_metrics` on the whole matrix, itself checked against hand-worked ranks in test_ranking.py),
read in row blocks without holding the matrix, with its memory peak bounded by the budget."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
from torch._C._profiler import _EventType
from torch.profiler import ProfilerActivity, profile

from lit_retrieval.metrics.ranking import retrieval_metrics, text_to_video_ranks
from lit_retrieval.metrics.retrieval import blockwise_metrics
from helpers.forked_ranks import run_ranks


def blocks_of(scores: torch.Tensor, rows: int, calls: list[int]):
    def blocks():
        calls.append(1)
        for start in range(0, len(scores), rows):
            yield slice(start, start + rows), scores[start : start + rows]

    return blocks


@pytest.mark.parametrize("ties", ["optimistic", "pessimistic", "average"])
@pytest.mark.parametrize("budget", [10**9, 64], ids=["rows-kept", "scored-again"])
def test_blockwise_metrics_equal_the_full_matrix_with_ties_and_several_captions(ties, budget):
    g = torch.Generator().manual_seed(0)
    videos, queries = 23, 61
    scores = torch.randint(0, 6, (queries, videos), generator=g).float()  # many ties
    targets = torch.cat([torch.arange(videos), torch.randint(0, videos - 3, (queries - videos,), generator=g)])
    calls: list[int] = []
    got, ranks = blockwise_metrics(
        blocks_of(scores, 7, calls), targets, torch.arange(queries), videos, ties, budget, synced=False
    )
    assert got == pytest.approx(retrieval_metrics(scores, targets, ties), abs=1e-9)
    torch.testing.assert_close(ranks, text_to_video_ranks(scores, targets, ties))
    assert len(calls) == (1 if budget > scores.numel() * 4 else 2)


def test_a_query_met_twice_counts_once():
    """The distributed sampler's padding repeats a query: it is one query, in both directions."""
    g = torch.Generator().manual_seed(1)
    scores = torch.randn(9, 9, generator=g)
    repeated = torch.cat([scores, scores[:2]])
    ids, targets = torch.cat([torch.arange(9), torch.arange(2)]), torch.cat([torch.arange(9), torch.arange(2)])
    got, _ = blockwise_metrics(blocks_of(repeated, 4, []), targets, ids, 9, "optimistic", 10**9, synced=False)
    assert got == pytest.approx(retrieval_metrics(scores, torch.arange(9)), abs=1e-9)


def peak_allocated_bytes(run) -> int:
    """The most bytes torch held at once while `run` ran, from the profiler's record of every CPU allocation
    and free. Resident memory (VmHWM) was tried first and was not a fair witness: on a cold page cache the
    library code paged in while scoring counted as the scoring's (307 MB once, 36.6 MB warm; CI saw 278 MB)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    events, changes = list(prof.profiler.kineto_results.experimental_event_tree()), []
    while events:
        event = events.pop()
        if event.tag == _EventType.Allocation:
            changes.append((event.start_time_ns, event.extra_fields.alloc_size))
        events.extend(event.children)
    live = top = 0
    for _, size in sorted(changes):
        live += size
        top = max(top, live)
    return top


def test_the_peak_probe_sees_a_sort_worked_by_hand():
    """A 1,000 x 1,000 fp32 matrix (4 MB) sorted by row: values (4 MB) and int64 indices (8 MB) live at once,
    beside the sort's own scratch (8 kB in torch 2.14)."""

    def sort_one():
        matrix = torch.zeros(1000, 1000)
        matrix.sort(dim=1)

    assert 16_000_000 <= peak_allocated_bytes(sort_one) < 16_100_000


def test_peak_memory_is_bounded_by_the_block_not_the_matrix():
    """6,000 x 6,000 in fp32 is 144 MB; a block of 200 rows is 4.8 MB of scores and 9.6 MB of int64 sort
    indices, and a few small temporaries live beside them (16.3 MB measured): well under the matrix."""
    n, rows, full = 6000, 200, 6000 * 6000 * 4
    g = torch.Generator().manual_seed(0)
    text, video = torch.randn(n, 32, generator=g), torch.randn(n, 32, generator=g)

    def blocks():
        for start in range(0, n, rows):
            yield slice(start, start + rows), text[start : start + rows] @ video.T

    held = peak_allocated_bytes(
        lambda: blockwise_metrics(blocks, torch.arange(n), torch.arange(n), n, "optimistic", 0, synced=False)
    )
    assert held < full / 3, (held, full)
    assert peak_allocated_bytes(lambda: retrieval_metrics(text @ video.T, torch.arange(n))) > full


def shared_scores() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    videos, queries = 11, 17
    scores = torch.randint(0, 5, (queries, videos), generator=g).float()
    return scores, torch.cat([torch.arange(videos), torch.randint(0, videos, (queries - videos,), generator=g)])


def _rank_worker(rank: int, init: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    scores, targets = shared_scores()
    # rank 0: rows 0..8; rank 1: rows 9..16 and rows 0 and 1 again (the distributed sampler's padding)
    mine = torch.arange(0, 9) if rank == 0 else torch.cat([torch.arange(9, 17), torch.arange(2)])
    got, ranks = blockwise_metrics(blocks_of(scores[mine], 3, []), targets[mine], mine, 11, "average", 64)
    torch.save({"metrics": got, "ranks": ranks, "rows": mine}, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()


@pytest.mark.distributed
def test_two_ranks_merge_to_the_full_matrix_metrics(tmp_path):
    """Each rank scores its own rows (one repeating two of the other's); both report the metrics of
    the whole matrix, from O(queries + videos) values exchanged."""
    run_ranks(_rank_worker, (f"file://{tmp_path / 'rendezvous'}", str(tmp_path)))
    scores, targets = shared_scores()
    expected = retrieval_metrics(scores, targets, "average")
    full_ranks = text_to_video_ranks(scores, targets, "average")
    for rank in range(2):
        out = torch.load(tmp_path / f"rank{rank}.pt")
        assert out["metrics"] == pytest.approx(expected, abs=1e-9)
        torch.testing.assert_close(out["ranks"], full_ranks[out["rows"]])
