"""Which checkpoint a run resumes (`checkpoint_io.newest_resume_checkpoint`, `--ckpt_path newest`):
the newest by the global step stored in it, among Lightning's Slurm `hpc_ckpt_*.ckpt` and the last
checkpoints, whatever the files' modification times say."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from lit_retrieval.checkpoint_io import CorruptCheckpointError, checkpoint_step, newest_resume_checkpoint


def write(path: Path, step: int, mtime: float | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"global_step": step, "state_dict": {"w": torch.full((3,), float(step))}}, path)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def test_a_newer_last_checkpoint_wins_over_a_stale_hpc_checkpoint(tmp_path):
    hpc = write(tmp_path / "hpc_ckpt_1.ckpt", 10, mtime=2_000_000_000)  # touched later than last.ckpt
    last = write(tmp_path / "checkpoints" / "last.ckpt", 12, mtime=1_000_000_000)
    assert newest_resume_checkpoint(tmp_path) == last
    hpc2 = write(tmp_path / "hpc_ckpt_2.ckpt", 14, mtime=1)
    assert newest_resume_checkpoint(tmp_path) == hpc2
    assert newest_resume_checkpoint(tmp_path, last_checkpoints=[last]) == hpc2
    hpc2.unlink()
    assert newest_resume_checkpoint(tmp_path, last_checkpoints=[]) == hpc


def test_equal_steps_go_to_the_later_written_file_and_nothing_means_start_afresh(tmp_path):
    assert newest_resume_checkpoint(tmp_path) is None
    write(tmp_path / "hpc_ckpt_1.ckpt", 7, mtime=1_000_000_000)
    last = write(tmp_path / "checkpoints" / "last-v1.ckpt", 7, mtime=1_000_000_100)
    assert newest_resume_checkpoint(tmp_path) == last


def test_an_unreadable_candidate_is_skipped(tmp_path, caplog):
    last = write(tmp_path / "checkpoints" / "last.ckpt", 5)
    (tmp_path / "hpc_ckpt_3.ckpt").write_bytes(b"PK\x03\x04 truncated")
    assert newest_resume_checkpoint(tmp_path) == last
    assert "hpc_ckpt_3.ckpt" in caplog.text
    with pytest.raises(CorruptCheckpointError, match="hpc_ckpt_3.ckpt"):
        checkpoint_step(tmp_path / "hpc_ckpt_3.ckpt")


def test_a_deepspeed_checkpoint_directory_is_read_from_its_model_states(tmp_path):
    """DeepSpeed writes `last.ckpt/` as a folder; Lightning's keys sit in `<tag>/*model_states.pt`."""
    folder = tmp_path / "checkpoints" / "last.ckpt"
    write(folder / "checkpoint" / "mp_rank_00_model_states.pt", 30)
    (folder / "latest").write_text("checkpoint")
    write(tmp_path / "hpc_ckpt_1.ckpt", 20)
    assert checkpoint_step(folder) == 30 and newest_resume_checkpoint(tmp_path) == folder
