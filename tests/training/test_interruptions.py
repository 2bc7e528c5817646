"""Interrupted `lit-retrieval fit` runs lose nothing: real fit processes of a tiny CLIP4Clip + MEA
model are stopped mid-epoch by SIGTERM or Ctrl+C (a checkpoint is written, exit status 143 / 130) or SIGKILL (the
last interval checkpoint survives) and resumed with `--ckpt_path last`. The checkpoint equals the
uninterrupted run's state at its step (weights, optimizer, MEA's threshold buffers theta^t), and the
resumed run ends with the uninterrupted run's weights, optimizer state, `metrics.csv` rows and
TensorBoard scalars (nothing lost, nothing twice). A tiny GVE fit stopped by SIGTERM (in-process)
keeps its Modality Pyramid curriculum and LoRA weights the same way."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from helpers.fit_configs import clean_launch_env
from helpers.resumed_fits import assert_same_logs, assert_same_state, csv_rows, final_state, write_config
from lit_retrieval.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def whole(tiny_clip, corpus, tmp_path_factory) -> Path:
    """The uninterrupted run, with its states after steps 3 and 5 recorded."""
    run = tmp_path_factory.mktemp("whole")
    record = {
        "class_path": "helpers.interrupt_callbacks.RecordStateAtSteps",
        "init_args": {"steps": [3, 5], "out": str(run / "states")},
    }
    main(["fit", "--config", str(write_config(run / "fit.yaml", tiny_clip, corpus, run, callbacks=[record]))])
    return run


def interrupted_fit(
    tmp_path: Path,
    tiny_clip: Path,
    corpus: Path,
    step: int,
    sig: signal.Signals,
    resume: dict,
    *,
    num_workers: int = 0,
    env: dict[str, str] | None = None,
    release: str | None = None,
) -> tuple[int, Path]:
    """A `lit-retrieval fit` process paused after `step`, sent `sig`; its exit status and run folder.
    With `num_workers` > 0 the fit runs in its own process group and `sig` goes to the whole group
    (`kill -SIG -- -PGID`: the DataLoader workers too), as a scheduler signals a job step."""
    run = tmp_path / "run"
    marker = tmp_path / "paused"
    pause = {
        "class_path": "helpers.interrupt_callbacks.PauseAtStep",
        "init_args": {"step": step, "marker": str(marker), "release": release},
    }
    config = write_config(
        tmp_path / "fit.yaml", tiny_clip, corpus, run, callbacks=[pause], resume=resume, num_workers=num_workers
    )
    log = tmp_path / "fit.log"  # a file, not a pipe: a full pipe would block the process before its pause
    with open(log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "lit_retrieval", "fit", "--config", str(config)],
            cwd=ROOT,
            env={**clean_launch_env(str(ROOT / "tests")), **(env or {})},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=num_workers > 0,
        )
    deadline = time.monotonic() + 300
    while not marker.exists():
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.05)
    if num_workers > 0:
        group = process_group(process.pid)
        assert len(group) >= 1 + num_workers, group  # the fit and its live workers
        os.killpg(process.pid, sig)
    else:
        process.send_signal(sig)
    process.communicate(timeout=300)
    return process.returncode, run


def process_group(pgid: int) -> list[int]:
    """The processes of process group `pgid` (read from /proc)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def resume(tmp_path: Path, tiny_clip: Path, corpus: Path, run: Path, num_workers: int = 0) -> None:
    config = write_config(tmp_path / "resume.yaml", tiny_clip, corpus, run, num_workers=num_workers)
    main(["fit", "--config", str(config), "--ckpt_path", "last"])


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_mid_epoch_writes_a_checkpoint_exits_nonzero_and_the_resumed_run_loses_nothing(
    tmp_path, tiny_clip, corpus, whole, sig
):
    status, run = interrupted_fit(tmp_path, tiny_clip, corpus, step=5, sig=sig, resume={})
    assert status == 128 + sig  # 143 / 130, not 0: a scheduler records the job as interrupted
    saved = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    assert (
        saved["global_step"] == 5
        and saved["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]["completed"] == 1
    )  # mid-epoch
    assert_same_state(
        saved["state_dict"], saved["optimizer_states"][0], torch.load(whole / "states" / "step5.pt", weights_only=False)
    )
    assert len(csv_rows(run)) == 5  # rows of steps 0-4, flushed with the checkpoint
    resume(tmp_path, tiny_clip, corpus, run)
    want = torch.load(whole / "checkpoints" / "last.ckpt", weights_only=False)
    assert_same_state(*final_state(run), {"state_dict": want["state_dict"], "optimizer": want["optimizer_states"][0]})
    assert_same_logs(run, whole)


@pytest.mark.slow
def test_sigterm_to_the_whole_process_group_with_loader_workers_writes_a_checkpoint_and_loses_nothing(
    tmp_path, tiny_clip, corpus, whole
):
    """`kill -TERM -- -PGID`, as Slurm signals every process of a step (time limit, scancel,
    preemption): the workers ignore it, the main process stops after the step, writes last.ckpt,
    exits 143, and the resumed run ends as the uninterrupted one. (Before, the workers died first
    and the fit failed with "DataLoader worker ... killed by signal: Terminated", no checkpoint.)"""
    status, run = interrupted_fit(tmp_path, tiny_clip, corpus, step=5, sig=signal.SIGTERM, resume={}, num_workers=2)
    assert status == 128 + signal.SIGTERM, (tmp_path / "fit.log").read_text()[-3000:]
    saved = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    assert saved["global_step"] == 5
    assert_same_state(
        saved["state_dict"], saved["optimizer_states"][0], torch.load(whole / "states" / "step5.pt", weights_only=False)
    )
    resume(tmp_path, tiny_clip, corpus, run, num_workers=2)
    want = torch.load(whole / "checkpoints" / "last.ckpt", weights_only=False)
    assert_same_state(*final_state(run), {"state_dict": want["state_dict"], "optimizer": want["optimizer_states"][0]})
    assert_same_logs(run, whole)


@pytest.mark.slow
def test_sigusr1_to_the_whole_process_group_runs_lightnings_requeue_path_and_the_workers_survive(
    tmp_path, tiny_clip, corpus, whole
):
    """Slurm's `--signal=SIGUSR1@N` reaches every process of the step: the workers ignore it and
    Lightning's Slurm handler writes `hpc_ckpt_1.ckpt` and calls `scontrol requeue` (a recording
    stand-in here; the real requeue is tested under Slurm in test_slurm_cluster.py). Training goes
    on to the end with the same workers. (Before, the workers died: "killed by signal: User
    defined signal 1", and the fit failed.)"""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f'#!/bin/bash\necho "$@" >> "{tmp_path}/scontrol.log"\n')
    (bin_dir / "scontrol").chmod(0o755)
    slurm = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        **{f"SLURM_{k}": v for k, v in dict(NTASKS="1", PROCID="0", LOCALID="0", NODEID="0").items()},
        **{"SLURM_NODELIST": "node01", "SLURM_JOB_NAME": "fit", "SLURM_JOB_ID": "4242"},
    }
    hpc = tmp_path / "run" / "hpc_ckpt_1.ckpt"
    status, run = interrupted_fit(
        tmp_path, tiny_clip, corpus, step=5, sig=signal.SIGUSR1, resume={}, num_workers=2, env=slurm, release=str(hpc)
    )
    assert status == 0, (tmp_path / "fit.log").read_text()[-3000:]
    assert (tmp_path / "scontrol.log").read_text().split() == ["requeue", "4242"]
    saved = torch.load(hpc, weights_only=False)
    assert saved["global_step"] == 5
    assert_same_state(
        saved["state_dict"], saved["optimizer_states"][0], torch.load(whole / "states" / "step5.pt", weights_only=False)
    )
    want = torch.load(whole / "checkpoints" / "last.ckpt", weights_only=False)
    assert_same_state(*final_state(run), {"state_dict": want["state_dict"], "optimizer": want["optimizer_states"][0]})


@pytest.mark.slow
def test_sigkill_loses_only_the_steps_after_the_interval_checkpoint(tmp_path, tiny_clip, corpus, whole):
    status, run = interrupted_fit(tmp_path, tiny_clip, corpus, step=5, sig=signal.SIGKILL, resume={"every_n_steps": 3})
    assert status == -signal.SIGKILL
    saved = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    assert saved["global_step"] == 3  # the interval checkpoint, mid-epoch (4 steps per epoch)
    assert_same_state(
        saved["state_dict"], saved["optimizer_states"][0], torch.load(whole / "states" / "step3.pt", weights_only=False)
    )
    rows_saved = saved["callbacks"]["ResumeCheckpoint"]["csv_rows"][str(run / "logs" / "fit" / "metrics.csv")]
    # steps 0-2 (step 2's row was logged just after the checkpoint, and its batch is not repeated);
    # rows of later steps reached the file too: the resumed run logs them again
    assert rows_saved == 3 and len(csv_rows(run)) > rows_saved
    resume(tmp_path, tiny_clip, corpus, run)
    want = torch.load(whole / "checkpoints" / "last.ckpt", weights_only=False)
    assert_same_state(*final_state(run), {"state_dict": want["state_dict"], "optimizer": want["optimizer_states"][0]})
    assert_same_logs(run, whole)


@pytest.mark.slow
def test_interval_checkpoints_reach_a_run_without_a_configured_last_checkpoint(tmp_path, tiny_clip, corpus):
    """No ModelCheckpoint in the config: Lightning's default one is told to write `last.ckpt`,
    which the interval rewrites every 3 steps (and at the end of the epoch)."""
    import lightning as L

    from lit_retrieval.callbacks import ResumeCheckpoint
    from lit_retrieval.data import MultiEventDataModule
    from lit_retrieval.models.encoders import CLIPEncoder
    from lit_retrieval.models.heads import MeanPHead
    from lit_retrieval.modules import DualEncoderRetrieval

    class Saved(L.Callback):
        steps: list[tuple[int, int]] = []  # (step, step of last.ckpt) after each batch

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):  # runs after ResumeCheckpoint's
            last = tmp_path / "checkpoints" / "last.ckpt"
            if last.exists():
                self.steps.append((trainer.global_step, torch.load(last, weights_only=False)["global_step"]))

    module = DualEncoderRetrieval(CLIPEncoder(pretrained=str(tiny_clip)), MeanPHead())
    data = MultiEventDataModule(
        annotation=str(corpus / "annotations.json"), num_frames=2, image_size=32, batch_size=4, num_workers=0
    )
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        limit_val_batches=0,
        logger=False,
        default_root_dir=str(tmp_path),
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[ResumeCheckpoint(every_n_steps=3, every_n_minutes=None), Saved()],
    )
    trainer.fit(module, data)
    assert (
        Saved.steps == [(3, 3), (4, 3)]
        and torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 4
    )


@pytest.mark.slow
def test_sigterm_in_a_tiny_gve_fit_keeps_the_curriculum_and_lora_weights(tmp_path, tiny_qwen, gve_tasks):
    """GVE with the Modality Pyramid: SIGTERM after step 6 (epoch 2 of 2, 4 steps each) writes a
    checkpoint with the curriculum history; the resumed run ends as the uninterrupted one."""
    import json

    from helpers.gve_fit_configs import write_config as gve_config

    whole = tmp_path / "whole"
    main(["fit", "--config", str(gve_config(tmp_path / "a.yaml", tiny_qwen, gve_tasks, whole, epochs=2, steps=4))])
    parts = tmp_path / "parts"
    config = gve_config(tmp_path / "b.yaml", tiny_qwen, gve_tasks, parts, epochs=2, steps=4)
    raw = yaml.safe_load(config.read_text())
    raw["trainer"]["callbacks"].append(
        {"class_path": "helpers.interrupt_callbacks.SignalAtStep", "init_args": {"step": 6}}
    )
    config.write_text(yaml.safe_dump(raw))
    with pytest.raises(SystemExit) as stopped:
        main(["fit", "--config", str(config)])
    assert stopped.value.code == 128 + signal.SIGTERM
    saved = torch.load(parts / "checkpoints" / "last.ckpt", weights_only=False)
    want = json.loads((whole / "logs" / "fit" / "modality_pyramid.json").read_text())
    assert saved["global_step"] == 6 and [e["epoch"] for e in saved["callbacks"]["ModalityPyramid"]["history"]] == [
        0,
        1,
    ]
    resumed = gve_config(tmp_path / "c.yaml", tiny_qwen, gve_tasks, parts, epochs=2, steps=4)
    main(["fit", "--config", str(resumed), "--ckpt_path", "last"])
    got = json.loads((parts / "logs" / "fit" / "modality_pyramid.json").read_text())
    assert [e["epoch"] for e in got] == [0, 1]
    for a, b in zip(got, want):
        assert (
            a["sigma"] == b["sigma"]
            and a["R"] == pytest.approx(b["R"], abs=1e-6)
            and a["P"] == pytest.approx(b["P"], abs=1e-6)
        )
    final = [torch.load(run / "checkpoints" / "last.ckpt", weights_only=True) for run in (whole, parts)]
    assert final[0]["global_step"] == final[1]["global_step"] == 8
    for name, value in final[0]["state_dict"].items():  # LoRA weights
        torch.testing.assert_close(final[1]["state_dict"][name], value, atol=1e-6, rtol=0)
    rows = [
        [(r["step"], r["epoch"]) for r in csv.DictReader(open(run / "logs" / "fit" / "metrics.csv"))]
        for run in (whole, parts)
    ]
    assert rows[0] == rows[1]
