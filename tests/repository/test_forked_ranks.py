"""tests/helpers/forked_ranks.py: ranks forked from this process where that is safe, spawned otherwise."""

from __future__ import annotations

import json
import os
import sys

import pytest
import torch
import torch.multiprocessing as mp
from helpers.forked_ranks import run_ranks

MARK = "set at import"  # a test sets it before starting ranks: only a forked rank sees the new value


def _record(rank: int, out: str, parent: int) -> None:
    facts = {"ppid": os.getppid(), "parent": parent, "mark": MARK}
    with open(os.path.join(out, f"rank{rank}.json"), "w") as handle:
        json.dump(facts, handle)


def _fail(rank: int) -> None:
    if rank == 1:
        raise ValueError("rank 1 failed on purpose")


def test_ranks_are_forked_children_of_this_process_with_its_state(tmp_path, monkeypatch):
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    monkeypatch.setattr(sys.modules[__name__], "MARK", "set by the test")
    run_ranks(_record, (str(tmp_path), os.getpid()))
    facts = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    assert all(f["ppid"] == f["parent"] == os.getpid() for f in facts)
    assert [f["mark"] for f in facts] == ["set by the test"] * 2  # a spawned rank imports this module afresh


def test_a_failing_rank_raises_its_error_here(monkeypatch):
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    with pytest.raises(mp.ProcessRaisedException, match="rank 1 failed on purpose"):
        run_ranks(_fail, ())


@pytest.mark.parametrize(("threads", "group_set_up"), [(4, False), (1, True)], ids=["threads", "process-group"])
def test_what_a_fork_would_copy_into_a_rank_spawns_the_ranks(monkeypatch, threads, group_set_up):
    """More than one torch thread (GNU OpenMP's pool) or a process group set up here: the ranks are spawned."""
    chosen = []
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: group_set_up)
    monkeypatch.setattr(mp, "start_processes", lambda *args, start_method, **kwargs: chosen.append(start_method))
    run_ranks(_fail, ())
    assert chosen == ["spawn"]
