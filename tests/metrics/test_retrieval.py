"""`blockwise_metrics` (issue 57, item 8): the metrics of the full score matrix (brute force:
`retrieval_metrics` on the whole matrix, itself checked against hand-worked ranks in test_ranking.py),
read in row blocks without holding the matrix, with its memory peak bounded by the budget."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from lit_retrieval.metrics.ranking import retrieval_metrics, text_to_video_ranks
from lit_retrieval.metrics.retrieval import blockwise_metrics

ROOT = Path(__file__).resolve().parents[2]


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


PEAK = """
import json, sys, torch
from lit_retrieval.metrics.retrieval import blockwise_metrics
def high_water() -> int:  # the process's peak resident bytes since the last reset (Linux: VmHWM)
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM"))
n, rows, full = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "full"
g = torch.Generator().manual_seed(0)
text, video = torch.randn(n, 32, generator=g), torch.randn(n, 32, generator=g)
with open("/proc/self/clear_refs", "w") as refs:  # the imports' peak is not the scoring's: reset it to now
    refs.write("5")
before = high_water()
def blocks():
    for start in range(0, n, rows):
        yield slice(start, start + rows), text[start : start + rows] @ video.T
if full:
    from lit_retrieval.metrics.ranking import retrieval_metrics
    retrieval_metrics(text @ video.T, torch.arange(n))
else:
    blockwise_metrics(blocks, torch.arange(n), torch.arange(n), n, "optimistic", 0, synced=False)
print(json.dumps(high_water() - before))
"""


def peak_bytes(n: int, rows: int, full: bool) -> int:
    env_path = f"{ROOT}:{ROOT / 'tests'}"
    done = subprocess.run(
        [sys.executable, "-c", PEAK, str(n), str(rows), "full" if full else "blocks"],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": env_path, "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_peak_memory_is_bounded_by_the_block_not_the_matrix():
    """6,000 x 6,000 in fp32 is 144 MB; a block of 200 rows is 4.8 MB of scores and 9.6 MB of int64 sort
    indices, and a few such temporaries live at once (36.6 MB measured): well under the matrix."""
    n = 6000
    full = n * n * 4
    blocks = peak_bytes(n, 200, full=False)
    assert blocks < full / 3, (blocks, full)
    assert peak_bytes(n, 200, full=True) > full  # the measurement sees a full matrix


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
    mp.spawn(_rank_worker, args=(f"file://{tmp_path / 'rendezvous'}", str(tmp_path)), nprocs=2, join=True)
    scores, targets = shared_scores()
    expected = retrieval_metrics(scores, targets, "average")
    full_ranks = text_to_video_ranks(scores, targets, "average")
    for rank in range(2):
        out = torch.load(tmp_path / f"rank{rank}.pt")
        assert out["metrics"] == pytest.approx(expected, abs=1e-9)
        torch.testing.assert_close(out["ranks"], full_ranks[out["rows"]])
