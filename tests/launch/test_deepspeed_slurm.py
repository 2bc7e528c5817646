"""A DeepSpeed (ZeRO-3) fit preempted under the real test Slurm: `fit.sbatch` with 2 gloo ranks on
DeepSpeed's CPU accelerator, SIGUSR1 to the job's step (what `--signal=SIGUSR1@REQUEUE_SECONDS` sends
before the time limit): Lightning writes the hpc checkpoint, a DeepSpeed directory, and requeues; the
restart resumes it with `--ckpt_path newest` and completes the run, to the uninterrupted run's weights.
Lightning's DeepSpeed strategy reads the checkpoint after the training loader was built, which had
made the restart train its step 4 on the epoch's first batch again (tests/training/test_resume_order.py)."""

from __future__ import annotations

import json
import shlex
import time

import pytest

from lit_retrieval.checkpoint_io import checkpoint_step

from helpers.deepspeed_runs import KEEP_FROZEN, assert_same_weights, cli, convert, quickstart, strategy
from helpers.slurm_jobs import fit_job, output, preempt_once, submit

pytestmark = [pytest.mark.slurm, pytest.mark.distributed, pytest.mark.slow]


def test_zero3_fit_preempted_under_slurm_resumes_its_hpc_directory_to_the_uninterrupted_weights(
    slurm_cluster, tmp_path, corpus, monkeypatch
):
    started = time.monotonic()
    whole = tmp_path / "whole"
    # one thread per rank, as the job's CPUS_PER_TASK=1 sets it: another thread count sums in another
    # order, and Adam's first steps turn last-bit differences of near-zero gradients into lr-sized ones
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    cli("fit", *quickstart(whole, corpus, 2), *strategy("zero3"), *KEEP_FROZEN)  # 2 epochs of 2 steps
    run, marker = tmp_path / "run", tmp_path / "paused"
    pause = {"class_path": "helpers.interrupt_callbacks.PauseAtStep", "init_args": {"step": 3, "marker": str(marker)}}
    args = [*quickstart(run, corpus, 2), *strategy("zero3"), *KEEP_FROZEN, "--trainer.callbacks+", json.dumps(pause)]
    config, *extra = args[1:]  # fit.sbatch passes CONFIG after its own --config, the rest as EXTRA
    values = {"TASKS_PER_NODE": "2", "CPUS_PER_TASK": "1", "MEM": "8G", "JOB_NAME": "zero3"}
    job_id = submit(fit_job(tmp_path, config, run, EXTRA=shlex.join(extra), **values))  # DeepSpeed finds no GPU: CPU
    info = preempt_once(job_id, marker)
    log = output(run)
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1", log[-4000:]
    hpc = run / "hpc_ckpt_1.ckpt"
    assert hpc.is_dir() and len(list((hpc / "checkpoint").glob("*model_states.pt"))) == 2, log[-4000:]
    assert checkpoint_step(hpc) == 3 and "restart 1" in log
    at_signal = convert(hpc, tmp_path / "hpc.ckpt")
    assert "--ckpt_path newest: " in log.split("(restart 1)")[1]  # the restart resumed a step-3 checkpoint
    final = convert(run / "checkpoints" / "last.ckpt", tmp_path / "final.ckpt")
    assert checkpoint_step(run / "checkpoints" / "last.ckpt") == 4
    uninterrupted = convert(whole / "checkpoints" / "last.ckpt", tmp_path / "whole.ckpt")
    assert_same_weights(final, uninterrupted, at_signal)
    print(
        json.dumps({"slurm_test": "deepspeed_preemption", "requeues": 1, "wall_s": round(time.monotonic() - started)})
    )
