"""A job whose step dies of one rank requeues itself (issue 56), under the REAL one-node test Slurm
(`tests/launch/local_cluster.sh`): `fit.sbatch` with 2 gloo ranks, one rank SIGKILLed (as the OOM killer or
a stale kill does) once a checkpoint of this start exists; the batch script requeues the job (RETRIES), the
restart resumes, and the job ends COMPLETED with the weights of an uninterrupted run, no resubmission.
The decision's other endings (exit 2, scancel, RETRIES=0, ...) run under a fake srun in test_slurm.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
import yaml

from helpers.fit_configs import clip_fit_config
from helpers.slurm_jobs import ENDED, fit_job, job, output, start_requeued, submit, wait_for, wait_for_end
from lit_retrieval.cli import main

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def fit_config(tmp_path: Path, tiny_clip: Path, corpus: Path, name: str, batch: int, devices: int, **pause) -> Path:
    """2 epochs of 2 global batches of 8 (InfoNCE over cross-device negatives: 2 ranks of 4 train as 1 process
    of 8), a checkpoint after every step; `pause`: PauseAtStep's arguments, and the start steps recorded."""
    run = tmp_path / name
    checkpoint = {"dirpath": str(run / "checkpoints"), "save_last": True, "save_top_k": 0, "every_n_train_steps": 1}
    callbacks = [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint", "init_args": checkpoint}]
    if pause:
        callbacks += [
            {"class_path": "helpers.interrupt_callbacks.PauseAtStep", "init_args": pause},
            {"class_path": "helpers.interrupt_callbacks.RecordStartStep", "init_args": {"path": str(run / "starts")}},
        ]
    trainer = {"max_epochs": 2, "devices": devices, "logger": False, "enable_progress_bar": False}
    raw = clip_fit_config(
        tiny_clip,
        corpus,
        {**trainer, "callbacks": callbacks},
        model={"cross_device": True},
        data={"val_split": "test", "batch_size": batch},
    )
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def rank_pid(job_id: str, rank: int) -> int:
    """The pid of global rank `rank` of the job's first step (`scontrol listpids`: PID JOBID STEPID LOCALID
    GLOBALID)."""
    listed = subprocess.run(["scontrol", "listpids", job_id], capture_output=True, text=True).stdout
    rows = [line.split() for line in listed.splitlines()[1:]]
    pid = next((int(r[0]) for r in rows if len(r) == 5 and r[2] == "0" and r[4] == str(rank)), None)
    assert pid is not None, f"no rank {rank} of step {job_id}.0 in `scontrol listpids`: {listed!r}"
    return pid


def test_a_rank_killed_past_a_checkpoint_requeues_the_job_which_completes_with_each_step_once(
    slurm_cluster, tmp_path, tiny_clip, corpus
):
    started = time.monotonic()
    run, marker, release = tmp_path / "killed", tmp_path / "paused", tmp_path / "release"
    pause = {"step": 2, "marker": str(marker), "release": str(release)}
    config = fit_config(tmp_path, tiny_clip, corpus, "killed", 4, 2, **pause)
    job_id = submit(fit_job(tmp_path, config, run, TASKS_PER_NODE="2", JOB_NAME="rank-killed"))
    one = tmp_path / "one"
    main(
        [
            "fit",
            "--config",
            str(fit_config(tmp_path, tiny_clip, corpus, "one", 8, 1)),
            "--trainer.default_root_dir",
            str(one),
        ]
    )
    wait_for("the fit to pause at step 2", marker.exists, job_id)
    saved = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["global_step"]
    assert saved == 1, f"last.ckpt at step {saved}, not this start's step 1: {output(run)[-3000:]}"
    os.kill(rank_pid(job_id, 1), signal.SIGKILL)
    release.touch()  # the restart's ranks do not pause

    def requeued() -> bool:
        info = job(job_id)
        assert info.get("JobState") not in ENDED, f"job {job_id} ended, not requeued: {output(run)[-3000:]}"
        return {"JobState": "PENDING", "Restarts": "1"}.items() <= info.items()

    wait_for("the requeue", requeued, job_id)
    start_requeued(job_id)
    info = wait_for_end(job_id, restarts=1)
    log = output(run)
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1", log[-3000:]
    assert "requeue 1 of 2 (RETRIES)" in log and "restart 1" in log
    resumed = sorted(set((run / "starts").read_text().split()))
    assert resumed[0] == "0" and resumed[1] in ("1", "2") and len(resumed) == 2  # every rank started twice
    got, want = (torch.load(r / "checkpoints" / "last.ckpt", weights_only=False) for r in (run, one))
    assert got["global_step"] == want["global_step"] == 4
    for name, value in want["state_dict"].items():  # a step trained twice or skipped would differ
        torch.testing.assert_close(got["state_dict"][name], value, atol=2e-5, rtol=1e-4, msg=name)
    print(json.dumps({"slurm_test": "rank_killed", "requeues": 1, "wall_s": round(time.monotonic() - started, 1)}))
