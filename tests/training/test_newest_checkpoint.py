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


SLURM_ENV = {
    "SLURM_NTASKS": "1",
    "SLURM_NTASKS_PER_NODE": "1",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
    "SLURM_NODELIST": "node01",
    "SLURM_JOB_NODELIST": "node01",
    "SLURM_JOB_NAME": "lit-retrieval-fit",
    "SLURM_JOB_ID": "4242",
}


@pytest.mark.slow
def test_the_fit_template_resumes_a_newer_last_checkpoint_over_a_stale_hpc_one(tmp_path, tiny_clip, corpus):
    """A Slurm job got SIGUSR1 at step 2 (hpc_ckpt_1.ckpt; the requeue is a recording stand-in
    here) and went on to write last.ckpt at step 8. The next job of `slurm/fit.sbatch` (run with
    bash, `srun` running its command in place) resumes at step 8, not at the stale step 2 that
    Lightning picks by itself under Slurm."""
    import subprocess
    import sys

    import yaml

    from helpers.fit_configs import clean_launch_env, clip_fit_config
    from lit_retrieval.cli import main
    from lit_retrieval.launch.templates import render_template

    root = Path(__file__).resolve().parents[2]
    bin_dir, venv, run = tmp_path / "bin", tmp_path / "venv", tmp_path / "run"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f'#!/bin/bash\necho "$@" >> "{tmp_path}/scontrol.log"\n')
    (bin_dir / "srun").write_text('#!/bin/bash\nshift\nexec "$@"\n')  # drop --kill-on-bad-exit=1, run in place
    for tool in ("scontrol", "srun"):
        (bin_dir / tool).chmod(0o755)
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text("")
    env = {
        **clean_launch_env(str(root / "tests")),
        **SLURM_ENV,
        "PATH": os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), os.environ["PATH"]]),
    }

    def config(epochs: int, callback: dict) -> Path:
        raw = clip_fit_config(
            tiny_clip,
            corpus,
            {
                "max_epochs": epochs,
                "limit_val_batches": 0,
                "logger": False,
                "enable_progress_bar": False,
                "callbacks": [
                    {
                        "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                        "init_args": {"dirpath": str(run / "checkpoints"), "save_last": True, "save_top_k": 0},
                    },
                    callback,
                ],
            },
        )
        path = tmp_path / f"fit{epochs}.yaml"
        path.write_text(yaml.safe_dump(raw))
        return path

    first = config(
        2, {"class_path": "helpers.interrupt_callbacks.SignalAtStep", "init_args": {"step": 2, "signum": 10}}
    )
    saved_env = dict(os.environ)
    try:
        os.environ.update({k: env[k] for k in (*SLURM_ENV, "PATH")})
        main(["fit", "--config", str(first), "--trainer.default_root_dir", str(run)])
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
    assert checkpoint_step(run / "hpc_ckpt_1.ckpt") == 2 and checkpoint_step(run / "checkpoints" / "last.ckpt") == 8
    start = tmp_path / "start.txt"
    second = config(3, {"class_path": "helpers.interrupt_callbacks.RecordStartStep", "init_args": {"path": str(start)}})
    values = {
        "CONFIG": str(second),
        "ACCOUNT": "proj",
        "PARTITION": "cpu",
        "RUN_DIR": str(run),
        "GPUS": "0",
        "TASKS_PER_NODE": "1",
        "ACCELERATOR": "cpu",
        "VENV": str(venv),
    }
    job = tmp_path / "job.sbatch"
    job.write_text(render_template((root / "lit_retrieval" / "launch" / "sbatch" / "fit.sbatch").read_text(), values))
    done = subprocess.run(["bash", str(job)], env=env, cwd=root, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert start.read_text().split() == ["8"]
    assert checkpoint_step(run / "checkpoints" / "last.ckpt") == 12


def test_evaluating_the_newest_checkpoint_of_a_run_without_one_is_refused(tmp_path, tiny_clip, corpus, capsys):
    """`lit-retrieval test --ckpt_path newest` (eval.sbatch with CKPT=newest) on a run folder with no
    checkpoint: one error line naming the folder, exit status 2 (not a test of the untrained model)."""
    import yaml

    from helpers.fit_configs import clip_fit_config
    from lit_retrieval.cli import main

    run = tmp_path / "run"
    config = tmp_path / "test.yaml"
    trainer = {"default_root_dir": str(run), "logger": False, "enable_progress_bar": False}
    config.write_text(yaml.safe_dump(clip_fit_config(tiny_clip, corpus, trainer, data={"test_split": "test"})))
    with pytest.raises(SystemExit) as stopped:
        main(["test", "--config", str(config), "--ckpt_path", "newest"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    reason = "--ckpt_path newest: no hpc_ckpt_*.ckpt or last checkpoint of this run"
    assert err[-1] == f"lit-retrieval test: {run}: {reason}"
