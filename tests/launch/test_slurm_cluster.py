"""The training path under a REAL Slurm (`tests/launch/local_cluster.sh`, tests marked `slurm`): each test
renders the project's own templates (`lit-retrieval slurm fit.sbatch --set ...`), submits
them with `sbatch` and drives the jobs as a cluster would, on CPU with gloo:

- a fit with 2 tasks (srun, DDP over gloo) ends with the metrics and weights of a 1-process run;
- preemption: Slurm's SIGUSR1 to the step (`scancel --signal=USR1`, what `--signal=USR1@N` sends
  before the time limit) makes Lightning write `hpc_ckpt_1.ckpt` and requeue the job, whose next
  start resumes and ends with the uninterrupted run's weights and `metrics.csv` rows;
- `scancel` (SIGTERM to every process of the step, DataLoader workers included) writes the
  on-signal checkpoint, and the next submission resumes from it: no step lost;
- SIGUSR1 once training has ended (final checkpoint, after Lightning's teardown, between the steps,
  during the follow-on test step of `TEST=true`): the job ends COMPLETED, exit 0, not requeued (issue 45);
- `cache-frames`, `shots` and `index --embed-only` as 2-shard arrays (`slurm/array.sbatch`) whose
  outputs merge into what a 1-shard run writes; each `cache-frames` task's Slurm `.out` reads as plain
  periodic progress lines naming its shard.

Jobs are polled with `scontrol show job` (the test cluster keeps no accounting), with bounded
waits. The node has 2 CPUs: jobs of other tests may queue before these start.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from helpers.fit_configs import clip_fit_config
from helpers.slurm_jobs import (
    CPU_FIT,
    assert_index_as_one_process,
    fit_job,
    job_env,
    output,
    preempt_once,
    render,
    submit,
    wait_for,
    wait_for_end,
)
from lit_retrieval.cli import main
from helpers.resumed_fits import assert_same_logs, assert_same_state, final_state, write_config
from helpers.terminal import ESCAPE

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def pause_config(tmp_path: Path, tiny_clip: Path, corpus: Path, run: Path) -> tuple[Path, Path, Path]:
    """The interruption tests' tiny MEA fit (2 epochs of 4 steps, CSV + TensorBoard logs) with 2
    loader workers, pausing after step 5 until a signal comes; the step each start resumed at is
    appended to a file. Returns the config, the pause marker and the file of start steps."""
    marker, starts = tmp_path / "paused", tmp_path / "starts.txt"
    callbacks = [
        {"class_path": "helpers.interrupt_callbacks.PauseAtStep", "init_args": {"step": 5, "marker": str(marker)}},
        {"class_path": "helpers.interrupt_callbacks.RecordStartStep", "init_args": {"path": str(starts)}},
    ]
    config = write_config(tmp_path / "fit.yaml", tiny_clip, corpus, run, callbacks=callbacks, num_workers=2)
    return config, marker, starts


@pytest.fixture(scope="module")
def whole(tiny_clip, corpus, tmp_path_factory) -> Path:
    """The uninterrupted run of `pause_config`'s fit (without the pause), its states after step 5
    recorded, run as the jobs run: its own process, one thread per task (OMP_NUM_THREADS=1 as
    CPUS_PER_TASK=1 sets it; another thread count sums in another order and differs in the last bits)."""
    run = tmp_path_factory.mktemp("whole")
    record = {
        "class_path": "helpers.interrupt_callbacks.RecordStateAtSteps",
        "init_args": {"steps": [5], "out": str(run / "states")},
    }
    config = write_config(run / "fit.yaml", tiny_clip, corpus, run, callbacks=[record])
    done = subprocess.run(
        [sys.executable, "-m", "lit_retrieval", "fit", "--config", str(config)],
        cwd=ROOT,
        env={**job_env(), "OMP_NUM_THREADS": CPU_FIT["CPUS_PER_TASK"]},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return run


def test_fit_with_two_tasks_on_gloo_equals_one_process(slurm_cluster, tmp_path, tiny_clip, corpus):
    """`fit.sbatch` with TASKS_PER_NODE=2: srun starts 2 ranks, Lightning's SLURMEnvironment makes
    them one DDP job over gloo; with cross-device negatives a step's global batch (4 per rank) is the
    1-process batch of 8, so metrics and weights equal a 1-process run's."""
    started = time.monotonic()

    def config(name: str, batch: int, devices: int) -> Path:
        run = tmp_path / name
        raw = clip_fit_config(
            tiny_clip,
            corpus,
            {
                "max_epochs": 2,
                "devices": devices,
                "logger": False,
                "enable_progress_bar": False,
                "callbacks": [
                    {"class_path": "helpers.stop_callbacks.RecordBatches", "init_args": {"out": str(run / "record")}},
                    {
                        "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                        "init_args": {"dirpath": str(run / "checkpoints"), "save_last": True, "save_top_k": 0},
                    },
                ],
            },
            model={"cross_device": True},  # InfoNCE (MEA's partial queries are drawn per rank: another stream)
            data={"val_split": "test", "batch_size": batch},
        )
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(raw))
        return path

    ddp = tmp_path / "ddp"
    job_id = submit(fit_job(tmp_path, config("ddp", 4, 2), ddp, TASKS_PER_NODE="2", JOB_NAME="ddp"))
    one = tmp_path / "one"
    main(["fit", "--config", str(config("one", 8, 1)), "--trainer.default_root_dir", str(one)])
    info = wait_for_end(job_id)
    assert info["JobState"] == "COMPLETED", output(ddp)[-3000:]
    assert "1 x 2 tasks" in output(ddp)
    want = json.loads((one / "record" / "rank0.json").read_text())
    ranks = [json.loads((ddp / "record" / f"rank{r}.json").read_text()) for r in range(2)]
    assert len(ranks[0]["batches"]) == len(want["batches"]) == 4  # 2 epochs of 2 global batches of 8
    for step in range(4):  # the 2 ranks' batches make up the 1-process batch
        assert sorted(ranks[0]["batches"][step][2] + ranks[1]["batches"][step][2]) == sorted(want["batches"][step][2])
    assert ranks[0]["val"] == ranks[1]["val"] and "t2v/R@1" in want["val"]
    assert ranks[0]["val"] == pytest.approx(want["val"], abs=1e-4)
    got, reference = (torch.load(r / "checkpoints" / "last.ckpt", weights_only=False) for r in (ddp, one))
    assert got["global_step"] == reference["global_step"] == 4
    for name, value in reference["state_dict"].items():
        torch.testing.assert_close(got["state_dict"][name], value, atol=2e-5, rtol=1e-4, msg=name)
    print(json.dumps({"slurm_test": "ddp", "jobs": 1, "wall_s": round(time.monotonic() - started, 1)}))


def test_preemption_signal_writes_the_hpc_checkpoint_requeues_and_the_job_loses_nothing(
    slurm_cluster,
    tmp_path,
    tiny_clip,
    corpus,
    whole,
):
    """SIGUSR1 to the job's step (what `#SBATCH --signal=SIGUSR1@REQUEUE_SECONDS` sends before the
    time limit, and what a preempting scheduler sends), 2 loader workers: Lightning writes
    hpc_ckpt_1.ckpt and runs `scontrol requeue`; Slurm stops the job (SIGTERM: the on-signal
    last.ckpt) and starts it again (Restarts=1), `--ckpt_path newest` resumes at step 5, and the
    job ends with the uninterrupted run's weights, optimizer state and logs."""
    started = time.monotonic()
    run = tmp_path / "run"
    config, marker, starts = pause_config(tmp_path, tiny_clip, corpus, run)
    job_id = submit(fit_job(tmp_path, config, run, JOB_NAME="preempted"))
    info = preempt_once(job_id, marker)
    log = output(run)
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1", log[-3000:]
    assert "restart 0" in log and "restart 1" in log and "killed by signal" not in log
    hpc = torch.load(run / "hpc_ckpt_1.ckpt", weights_only=False)
    assert hpc["global_step"] == 5
    assert_same_state(hpc["state_dict"], hpc["optimizer_states"][0], torch.load(whole / "states" / "step5.pt"))
    assert starts.read_text().split() == ["0", "5"]  # the restart resumed where the first start stopped
    want = torch.load(whole / "checkpoints" / "last.ckpt", weights_only=False)
    assert_same_state(*final_state(run), {"state_dict": want["state_dict"], "optimizer": want["optimizer_states"][0]})
    assert_same_logs(run, whole)
    print(json.dumps({"slurm_test": "preemption", "jobs": 1, "requeues": 1, "steps_lost": 0,
                      "wall_s": round(time.monotonic() - started, 1)}))  # fmt: skip


def test_scancel_sigterm_to_every_process_writes_a_checkpoint_and_the_next_submission_resumes(
    slurm_cluster,
    tmp_path,
    tiny_clip,
    corpus,
    whole,
):
    """`scancel` (as at a time limit: SIGTERM to every process of the step, the 2 loader workers
    included, SIGKILL after KillWait): the fit stops after step 5 with last.ckpt; the next `sbatch`
    of the same job script resumes there and ends as the uninterrupted run."""
    started = time.monotonic()
    run = tmp_path / "run"
    config, marker, starts = pause_config(tmp_path, tiny_clip, corpus, run)
    script = fit_job(tmp_path, config, run, JOB_NAME="cancelled")
    first = submit(script)
    wait_for("the fit to reach step 5", marker.exists, first)
    subprocess.run(["scancel", first], check=True)
    assert wait_for_end(first)["JobState"] == "CANCELLED"
    wait_for("the on-signal checkpoint", (run / "checkpoints" / "last.ckpt").exists, first, timeout=60)
    assert "killed by signal" not in output(run), output(run)[-3000:]
    saved = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    assert saved["global_step"] == 5
    assert_same_state(saved["state_dict"], saved["optimizer_states"][0], torch.load(whole / "states" / "step5.pt"))
    second = submit(script)
    info = wait_for_end(second)
    assert info["JobState"] == "COMPLETED", output(run)[-3000:]
    assert starts.read_text().split() == ["0", "5"]  # steps lost: 5 - 5 = 0
    want = torch.load(whole / "checkpoints" / "last.ckpt", weights_only=False)
    assert_same_state(*final_state(run), {"state_dict": want["state_dict"], "optimizer": want["optimizer_states"][0]})
    assert_same_logs(run, whole)
    print(json.dumps({"slurm_test": "scancel", "jobs": 2, "steps_lost": 0,
                      "wall_s": round(time.monotonic() - started, 1)}))  # fmt: skip


def cache_frames_progress(logs: Path, task: int) -> int:
    """Array task `task`'s `.out` as Slurm wrote it: no control sequences, and `cache-frames`' lines for its
    shard from 0 to all of its videos, at least one between (every 25 %); the shard's video count."""
    (out,) = logs.glob(f"*_{task}.out")
    text = out.read_text()
    assert not ESCAPE.search(text), text[-2000:]
    counts = [
        tuple(map(int, m)) for m in re.findall(rf"^shard {task}/2: caching frames (\d+)/(\d+) videos", text, re.M)
    ]
    total = counts[0][1]
    assert counts[0][0] == 0 and counts[-1] == (total, total) and len(counts) >= 3, text[-2000:]
    assert [done for done, _ in counts] == sorted(done for done, _ in counts) and {n for _, n in counts} == {total}
    assert re.search(
        rf"{total}/{total} videos \(100%\), done in \d+ s; cached 0, decoded {total}, failed 0$", text, re.M
    )
    return total


def test_cache_frames_shots_and_index_arrays_merge_into_the_one_shard_outputs(
    slurm_cluster, tmp_path, tiny_clip, corpus
):
    """`slurm/array.sbatch` with SHARDS=2 for `cache-frames`, `shots` and `index --embed-only`:
    every array task writes its shard into the shared folder, and what the folder then gives
    (frame cache entries, shot lists, the index built from the embedded parts) equals a 1-shard run."""

    from lit_retrieval.commands import run_command
    from lit_retrieval.data.media.frame_cache import FrameCache

    started = time.monotonic()
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump(clip_fit_config(tiny_clip, corpus, {"max_epochs": 1})))
    videos = corpus / "videos"
    arrays = tmp_path / "arrays"
    commands = {
        "frames": f"cache-frames --config {config} --out {arrays / 'frames'} --progress-every 25%",
        "shots": f"shots --dir {videos} --cache {arrays / 'shots'}",
        "index": f"index --config {config} --videos {videos} --out {arrays / 'index'} --embed-only",
    }
    jobs = []
    for name, command in commands.items():
        logs = tmp_path / "logs" / name  # made by `lit-retrieval slurm` (Slurm opens --output first)
        values = {"COMMAND": command, "LOG_DIR": str(logs), "SHARDS": "2", "CPUS": "1", "MEM": "4G"}
        script = render("array.sbatch", tmp_path / f"{name}.sbatch", **values)
        jobs.append((name, submit(script), logs))
    one = tmp_path / "one"  # the 1-shard runs, meanwhile
    assert run_command("cache-frames", ["--config", str(config), "--out", str(one / "frames")]) == 0
    shots_args = ["--dir", str(videos), "--cache", str(one / "shots"), "--out", str(one / "shots.json")]
    assert run_command("shots", shots_args) == 0
    assert run_command("index", ["--config", str(config), "--videos", str(videos), "--out", str(one / "index")]) == 0
    for name, job_id, logs in jobs:
        for task in (0, 1):
            info = wait_for_end(f"{job_id}_{task}")
            assert info["JobState"] == "COMPLETED", (name, "".join(p.read_text() for p in logs.glob("*.out"))[-3000:])

    assert sum(cache_frames_progress(logs, task) for name, _, logs in jobs if name == "frames" for task in (0, 1)) == 24

    frames = sorted(p.name for p in (arrays / "frames").glob("*.index.jsonl"))
    assert frames == ["shard-00000-of-00002.index.jsonl", "shard-00001-of-00002.index.jsonl"]
    params = json.loads((one / "frames" / "cache.json").read_text())["sampling"]
    merged, single = FrameCache(arrays / "frames", params), FrameCache(one / "frames", params)
    assert merged.entries.keys() == single.entries.keys() and len(single.entries) == 24
    for video, start, end in single.entries:
        assert (merged.get(video, start, end).frames == single.get(video, start, end).frames).all()

    # the array's cache holds every video: a plain run over it detects nothing and lists them all
    merged_shots = tmp_path / "merged_shots.json"
    shots_args = ["--dir", str(videos), "--cache", str(arrays / "shots"), "--out", str(merged_shots)]
    assert run_command("shots", shots_args) == 0
    assert json.loads(merged_shots.read_text()) == json.loads((one / "shots.json").read_text())

    assert len(list((arrays / "index" / "parts").glob("*.npy"))) >= 2  # parts of both shards
    assert_index_as_one_process(config, videos, arrays / "index", one / "index")
    print(json.dumps({"slurm_test": "arrays", "jobs": 3, "array_tasks": 6,
                      "wall_s": round(time.monotonic() - started, 1)}))  # fmt: skip


def test_sigusr1_after_training_between_the_steps_and_during_the_test_step_leaves_the_job_completed(
    slurm_cluster, tmp_path, tiny_clip, corpus
):
    """Issue 45: `fit.sbatch` with its follow-on test step (TEST=true), SIGUSR1 as Slurm sends it at
    three moments after training ended: to the step while the final checkpoint is written
    (`on_train_end`: Lightning's handler would save and requeue the finished job), to the step and the
    batch script (`scancel --full`) after Lightning's teardown (its default disposition killed the rank,
    srun failed the job; the script's trap runs between the two steps) and during the test step (the
    trap runs at the script's end). A witness process in the step tells when each signal has arrived.
    The job ends COMPLETED, exit 0, not requeued, no hpc checkpoint, each step's metrics once."""
    started = time.monotonic()
    run, held = tmp_path / "run", tmp_path / "held"
    held.mkdir()
    trainer = {
        "devices": 1,
        "max_epochs": 1,
        "limit_train_batches": 3,
        "limit_val_batches": 0,
        "log_every_n_steps": 1,
        "enable_progress_bar": False,
        "default_root_dir": str(run),
        "logger": {
            "class_path": "lightning.pytorch.loggers.CSVLogger",
            "init_args": {"save_dir": str(run), "name": "logs", "version": "fit"},
        },
        "callbacks": [
            {"class_path": "helpers.interrupt_callbacks.HoldForSignalAtRunEnd", "init_args": {"folder": str(held)}},
            {
                "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                "init_args": {"dirpath": str(run / "checkpoints"), "save_last": True, "save_top_k": 0},
            },
        ],
    }
    config = tmp_path / "fit.yaml"
    config.write_text(yaml.safe_dump(clip_fit_config(tiny_clip, corpus, trainer)))
    job_id = submit(fit_job(tmp_path, config, run, JOB_NAME="ended", TEST="true"))
    for hook, full in (("train_end", []), ("fit_teardown", ["--full"]), ("test_start", ["--full"])):
        wait_for(f"the job to hold at {hook}", (held / f"{hook}.held").exists, job_id)
        subprocess.run(["scancel", "--signal=USR1", *full, job_id], check=True)
    info = wait_for_end(job_id)
    log = output(run)
    assert (info["JobState"], info["ExitCode"], info["Restarts"]) == ("COMPLETED", "0:0", "0"), log[-3000:]
    assert sorted(p.name for p in held.glob("*.signalled")) == [
        "fit_teardown.signalled",
        "test_start.signalled",
        "train_end.signalled",
    ]
    assert log.count("restart 0") == 1 and "restart 1" not in log and "Handling auto-requeue" not in log, log[-3000:]
    assert "User defined signal" not in log and log.count("batch script: SIGUSR1 noted") == 2, log[-3000:]
    assert not list(run.glob("hpc_ckpt_*"))
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 3
    with open(run / "logs" / "fit" / "metrics.csv") as handle:
        steps = [row["step"] for row in csv.DictReader(handle)]
    assert steps == ["0", "1", "2"]  # each step logged once: nothing trained again
    with open(run / "logs" / "test" / "metrics.csv") as handle:
        assert len(list(csv.DictReader(handle))) == 1  # one test, not repeated
    print(json.dumps({"slurm_test": "signals_after_training", "jobs": 1, "signals": 3, "requeues": 0,
                      "wall_s": round(time.monotonic() - started, 1)}))  # fmt: skip
