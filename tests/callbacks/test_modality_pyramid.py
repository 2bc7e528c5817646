"""Modality Pyramid: sigma(t) and P(k) follow GVE Sec. 3.3; a tiny GVE fit through the CLI probes,
logs, plots, checkpoints only LoRA weights, and a resumed run applies the same curriculum."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import torch
import yaml

from helpers.cli_server import run_cli
from helpers.gve_fit_configs import write_config
from lit_retrieval.callbacks.modality_pyramid import cap_passes, curriculum_sigma, expected_passes, task_probabilities
from lit_retrieval.data.batching.samplers import TaskBatchSampler, default_steps
from lit_retrieval.cli import main


def test_sigma_rises_linearly_from_min_to_max():
    assert [curriculum_sigma(t, 3, 0.1, 1.0) for t in range(3)] == pytest.approx([0.1, 0.55, 1.0])
    assert curriculum_sigma(0, 1, 0.1, 1.0) == 0.1
    assert curriculum_sigma(4, 5, 0.2, 0.6) == pytest.approx(0.6)


def test_probabilities_are_a_softmax_of_alignment_over_sigma():
    alignment = [0.2, 0.5, 0.9]
    for sigma in (0.1, 1.0):
        weights = [math.exp(r / sigma) for r in alignment]
        assert task_probabilities(alignment, sigma) == pytest.approx([w / sum(weights) for w in weights])
    sharp, flat = task_probabilities(alignment, 0.1), task_probabilities(alignment, 1.0)
    assert sharp[2] > flat[2] and sharp[0] < flat[0]  # low sigma favours well-aligned tasks


def test_size_weighting_and_pass_cap_worked_by_hand():
    """Two tasks of 1,000 and 100 pairs, batches of 10, one process, equal alignment: an epoch is
    100 + 10 = 110 batches. Sec. 3.3 as printed (a = 0) draws each half the time: the big task gets
    55 batches (0.55 passes), the small one 55 (5.5 passes). With a = 1 (default) P = (100, 10) / 110:
    one pass each. A cap of 2 passes on a = 0 sets the small task's P to 2 * 100 / (110 * 10) = 2/11
    and gives the big one 9/11 (0.9 passes)."""
    sizes, batches = [1000, 100], [10, 10]
    steps = default_steps(sizes, batches)
    assert steps == 110
    literal = task_probabilities([0.5, 0.5], 1.0, [100, 10], size_exponent=0.0)
    assert literal == pytest.approx([0.5, 0.5])
    assert expected_passes(literal, sizes, batches, steps) == pytest.approx([0.55, 5.5])
    sized = task_probabilities([0.5, 0.5], 1.0, [100, 10], size_exponent=1.0)
    assert sized == pytest.approx([100 / 110, 10 / 110])
    assert expected_passes(sized, sizes, batches, steps) == pytest.approx([1.0, 1.0])
    # alignment still re-weights: R = (0.5, 0.6) at sigma 0.1 multiplies the small task's weight by e
    tilted = task_probabilities([0.5, 0.6], 0.1, [100, 10], size_exponent=1.0)
    assert tilted == pytest.approx([100 / (100 + 10 * math.e), 10 * math.e / (100 + 10 * math.e)])
    capped = cap_passes(literal, sizes, batches, steps, max_passes=2.0)
    assert capped == pytest.approx([9 / 11, 2 / 11])
    assert expected_passes(capped, sizes, batches, steps) == pytest.approx([0.9, 2.0])
    # three tasks, two over the cap of 1 pass: both set to it, the third takes the rest
    three = cap_passes([0.2, 0.4, 0.4], [1000, 100, 100], [10, 10, 10], 120, max_passes=1.0)
    assert three == pytest.approx([1 - 2 * 100 / 1200, 100 / 1200, 100 / 1200])
    # a cap no distribution can meet (caps sum below 1): P proportional to the caps
    assert cap_passes([0.5, 0.5], [100, 100], [10, 10], 100, max_passes=1.0) == pytest.approx([0.5, 0.5])


def test_sampler_draws_the_capped_passes():
    """The sampler's task schedule (a brute-force count over its batches) follows the capped P: about
    2 passes over the small task and 0.9 over the big one per epoch, averaged over 200 epochs."""
    sizes, batches = [1000, 100], [10, 10]
    capped = cap_passes([0.5, 0.5], sizes, batches, default_steps(sizes, batches), max_passes=2.0)
    sampler = TaskBatchSampler(sizes, batches, probabilities=capped, seed=3)
    seen = [0, 0]
    for epoch in range(200):
        sampler.set_epoch(epoch)
        for batch in sampler:
            seen[batch[0][0]] += len(batch)
    passes = [seen[k] / 200 / sizes[k] for k in range(2)]
    assert passes == pytest.approx([0.9, 2.0], rel=0.05)


@pytest.mark.slow
def test_tiny_gve_fit_logs_curriculum_and_saves_lora_only(tmp_path, tiny_qwen, gve_tasks):
    """With a loader worker, as the shipped configs run: each epoch's batches follow that epoch's P. The
    first epoch's loader is built (and, with workers, its schedule drawn) when `configure_optimizers`
    counts the steps, before the curriculum probes; its batches followed the no-curriculum diet."""
    run = tmp_path / "run"
    config = write_config(tmp_path / "gve.yaml", tiny_qwen, gve_tasks, run, epochs=2, steps=6, workers=1)
    raw = yaml.safe_load(config.read_text())
    raw["trainer"]["log_every_n_steps"] = 1
    config.write_text(yaml.safe_dump(raw))
    main(["fit", "--config", str(config)])
    log_dir = run / "logs" / "fit"
    history = json.loads((log_dir / "modality_pyramid.json").read_text())
    names = [t["name"] for t in raw["data"]["init_args"]["tasks"]]
    trained = {}  # step -> the task of its batch: the one whose loss is the step's loss (the others' keep
    for row in csv.DictReader((log_dir / "metrics.csv").open()):  # their last values in the step's row)
        tasks = [n for n in names if row.get("train/loss") and row.get(f"train/task/{n}/loss") == row["train/loss"]]
        if tasks:
            trained[int(row["step"])] = names.index(tasks[0])
    for entry in history:  # the documented draw: numpy's choice over the tasks with P, seeded by (seed, epoch)
        p = [entry["P"][n] for n in names]
        drawn = np.random.default_rng([0, entry["epoch"]]).choice(len(names), size=6, p=p).tolist()
        assert [trained[6 * entry["epoch"] + i] for i in range(6)] == drawn, entry["epoch"]
    assert [e["epoch"] for e in history] == [0, 1] and [e["sigma"] for e in history] == pytest.approx([0.1, 1.0])
    for entry in history:
        names = list(entry["R"])
        # size_exponent 1 (default): P(k) proportional to (n_k / B_k) exp(R_k / sigma), every batch size 4 here
        weights = {n: entry["sizes"][n] / 4 * math.exp(entry["R"][n] / entry["sigma"]) for n in names}
        assert entry["P"] == pytest.approx({n: w / sum(weights.values()) for n, w in weights.items()})
        assert all(-1 <= r <= 1 for r in entry["R"].values())
    assert (log_dir / "modality_pyramid.png").stat().st_size > 10_000
    header = (log_dir / "metrics.csv").read_text().splitlines()[0].split(",")
    for key in (
        "train/loss",
        "train/positive",
        "train/mean_score",
        "train/margin",
        "curriculum/sigma",
        "curriculum/P/syn_t2v",
        "val/R@1",
        "val/syn_t2v/q2c/R@1",
    ):
        assert key in header
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    assert checkpoint["state_dict"] and all("lora_" in k for k in checkpoint["state_dict"])
    assert checkpoint["callbacks"]["ModalityPyramid"]["history"] == history


@pytest.mark.slow
def test_resumed_fit_applies_the_same_curriculum_and_weights(tmp_path, tiny_qwen, gve_tasks):
    whole = tmp_path / "whole"
    main(["fit", "--config", str(write_config(tmp_path / "a.yaml", tiny_qwen, gve_tasks, whole, epochs=3))])
    parts = tmp_path / "parts"
    first = write_config(tmp_path / "b.yaml", tiny_qwen, gve_tasks, parts, epochs=3, stop_after=0)
    main(["fit", "--config", str(first)])  # stops after the first epoch
    stopped = torch.load(parts / "checkpoints" / "last.ckpt", weights_only=False)
    assert [e["epoch"] for e in stopped["callbacks"]["ModalityPyramid"]["history"]] == [0]
    resumed = write_config(tmp_path / "c.yaml", tiny_qwen, gve_tasks, parts, epochs=3)
    main(["fit", "--config", str(resumed), "--ckpt_path", str(parts / "checkpoints" / "last.ckpt")])
    want = json.loads((whole / "logs" / "fit" / "modality_pyramid.json").read_text())
    got = json.loads((parts / "logs" / "fit" / "modality_pyramid.json").read_text())
    assert [e["epoch"] for e in got] == [0, 1, 2]
    for a, b in zip(got, want):
        assert (
            a["sigma"] == b["sigma"]
            and a["R"] == pytest.approx(b["R"], abs=1e-6)
            and a["P"] == pytest.approx(b["P"], abs=1e-6)
        )
    final = [torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"] for run in (whole, parts)]
    for name, value in final[0].items():  # LoRA weights (dropout RNG included) continue exactly
        torch.testing.assert_close(final[1][name], value, atol=1e-6, rtol=0)


@pytest.mark.slow
def test_resume_in_the_middle_of_an_epoch_continues_the_same_batches(tmp_path, tiny_qwen, gve_tasks):
    whole = tmp_path / "whole"
    main(["fit", "--config", str(write_config(tmp_path / "a.yaml", tiny_qwen, gve_tasks, whole, epochs=2, steps=4))])
    parts = tmp_path / "parts"
    crashing = write_config(
        tmp_path / "b.yaml", tiny_qwen, gve_tasks, parts, epochs=2, steps=4, crash_at=6, every_n_steps=1
    )
    with pytest.raises(RuntimeError, match="simulated crash at step 6"):
        main(["fit", "--config", str(crashing)])
    saved = torch.load(parts / "checkpoints" / "last.ckpt", weights_only=False)
    assert (
        saved["global_step"] == 6 and saved["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]["ready"] == 2
    )
    resumed = write_config(tmp_path / "c.yaml", tiny_qwen, gve_tasks, parts, epochs=2, steps=4)
    main(["fit", "--config", str(resumed), "--ckpt_path", str(parts / "checkpoints" / "last.ckpt")])
    final = [torch.load(run / "checkpoints" / "last.ckpt", weights_only=True) for run in (whole, parts)]
    assert final[0]["global_step"] == final[1]["global_step"] == 8
    for name, value in final[0]["state_dict"].items():  # same batches, dropout and schedule after the resume
        torch.testing.assert_close(final[1]["state_dict"][name], value, atol=1e-6, rtol=0)


def test_checkpoint_of_another_lora_setting_is_refused(tmp_path, tiny_qwen):
    from lit_retrieval.models.gve import AdapterConfig
    from lit_retrieval.modules.gve import EmbedderConfig, GVERetrieval

    module = GVERetrieval(
        EmbedderConfig(str(tiny_qwen), lora=AdapterConfig(r=4), dtype="float32", gradient_checkpointing=False)
    )
    state = {"state_dict": {"embedder.model.something.lora_A.weight": torch.zeros(1)}}
    with pytest.raises(RuntimeError, match="does not match this model's trainable weights"):
        module.on_load_checkpoint(state)


@pytest.mark.distributed
@pytest.mark.slow
def test_two_process_ddp_fit_shares_tasks_splits_samples_and_agrees(tmp_path, tiny_qwen, gve_tasks):
    """`lit-retrieval fit` under DDP with 2 CPU processes (gloo): each step both ranks train on the
    same task with different pairs, cross-device negatives and the curriculum probe agree, and both
    ranks compute the same validation metrics."""
    import os

    from helpers.fit_configs import clean_launch_env

    run = tmp_path / "ddp"
    config = write_config(tmp_path / "ddp.yaml", tiny_qwen, gve_tasks, run, epochs=2, steps=3)
    raw = yaml.safe_load(config.read_text())
    raw["trainer"].update(devices=2, strategy="ddp")
    raw["trainer"]["callbacks"].append(
        {"class_path": "helpers.stop_callbacks.RecordBatches", "init_args": {"out": str(tmp_path / "record")}}
    )
    config.write_text(yaml.safe_dump(raw))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = clean_launch_env(os.path.join(root, "tests"))
    done = run_cli(["fit", "--config", str(config)], root, env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / "record" / f"rank{r}.json").read_text()) for r in range(2)]
    assert len(ranks[0]["batches"]) == len(ranks[1]["batches"]) == 6
    for (step0, task0, ids0), (step1, task1, ids1) in zip(ranks[0]["batches"], ranks[1]["batches"]):
        assert step0 == step1 and task0 == task1 and not set(ids0) & set(ids1)
    assert ranks[0]["curriculum"] == ranks[1]["curriculum"] and len(ranks[0]["curriculum"]) == 2
    assert ranks[0]["val"] == ranks[1]["val"] and ranks[0]["val"]["R@1"] >= 0
