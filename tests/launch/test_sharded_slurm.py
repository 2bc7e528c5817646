"""`ShardedDataModule` under the REAL one-node Slurm (`tests/launch/local_cluster.sh`): a fit streaming shards
with 2 loader workers, preempted mid-epoch (SIGUSR1 to the step: Lightning's hpc checkpoint and requeue) and
resumed by the requeued job (`fit.sbatch`, `--ckpt_path newest`), trains on the uninterrupted run's batches,
checked item by item: none twice, none skipped (17 training items: no batch size, worker or rank count here
divides them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from helpers.fit_configs import clip_fit_config
from helpers.shard_runs import shard
from helpers.slurm_jobs import fit_job, output, preempt_once, submit
from lit_retrieval.cli import main

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def config(tmp_path: Path, tiny_clip: Path, corpus: Path, shards: Path, run: Path, pause: Path | None) -> Path:
    callbacks = [
        {"class_path": "helpers.resume_probes.WriteBatches", "init_args": {"folder": str(run / "batches")}},
        {
            "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
            "init_args": {"dirpath": str(run / "checkpoints"), "save_last": True, "save_top_k": 0},
        },
    ]
    if pause is not None:
        callbacks.append(
            {"class_path": "helpers.interrupt_callbacks.PauseAtStep", "init_args": {"step": 7, "marker": str(pause)}}
        )
    raw = clip_fit_config(
        tiny_clip,
        corpus,
        {"max_epochs": 2, "logger": False, "enable_progress_bar": False, "callbacks": callbacks},
    )
    raw["data"] = {
        "class_path": "lit_retrieval.data.ShardedDataModule",
        "init_args": {"shards": str(shards), "batch_size": 3, "num_workers": 2, "shuffle_seed": 1},
    }
    path = tmp_path / f"{run.name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def batches(path: Path) -> list[list[int]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_preempted_sharded_fit_resumes_mid_epoch_with_the_uninterrupted_runs_items(
    slurm_cluster, tmp_path, tiny_clip, corpus
):
    shards = tmp_path / "shards"
    assert shard(corpus, shards, "--part-size", "4", "--chunk-bytes", "8KB", "--splits", "train") == 0
    run, whole = tmp_path / "run", tmp_path / "whole"
    pause = tmp_path / "paused"
    job_id = submit(fit_job(tmp_path, config(tmp_path, tiny_clip, corpus, shards, run, pause), run, JOB_NAME="shards"))
    main(["fit", "--config", str(config(tmp_path, tiny_clip, corpus, shards, whole, None))])
    info = preempt_once(job_id, pause)
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1", output(run)[-3000:]
    want = batches(whole / "batches" / "rank0.jsonl")
    first = batches(run / "batches" / "rank0.jsonl")  # Slurm sets SLURM_RESTART_COUNT from the first requeue on
    resumed = batches(run / "batches" / "rank0-start1.jsonl")
    per_epoch = len(want) // 2
    assert per_epoch >= 4 and len(first) > per_epoch  # stopped inside the second epoch
    assert first == want[: len(first)]
    stop = len(want) - len(resumed)
    assert per_epoch < stop <= len(first)  # resumed inside the second epoch, at a step the first start trained
    assert first[:stop] + resumed == want  # nothing twice, nothing skipped
    epoch = [i for b in want[:per_epoch] for i in b]
    assert len(epoch) == len(set(epoch)) and 17 - len(epoch) < 3 * 2
