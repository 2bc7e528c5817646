"""The real DeepSpeed engine on 2 CPU ranks (DeepSpeed's CPU accelerator, gloo) through
`lit-retrieval`, with the shipped `configs/strategy/deepspeed_*.yaml` composed with the quick-start
(shrunk: the test corpus, 2 frames, a few steps) and with GVE's tiny CPU config. Each stage runs at
least once (fp32: `--trainer.precision 32-true`, so runs can be compared exactly; ZeRO-3 also as shipped,
in bf16-mixed):

- quick-start x ZeRO-3: fit, a `last.ckpt/` directory, `convert-checkpoint`, `test` under
  DeepSpeed on the directory = `test` in one process on the converted file (every score), resume of the epoch-0
  directory with `--ckpt_path newest` = the uninterrupted run's weights;
- grid's conversion of that directory for `uvrb` (once);
- quick-start x ZeRO-3 as shipped (bf16-mixed): fp32 master weights in the checkpoint, `test` on the
  directory within bf16's precision of the fp32 scores of the converted file;
- quick-start x ZeRO-2 with optimizer offload: the same run = ZeRO-3's weights (sharding and
  offload change no arithmetic);
- GVE x ZeRO-3 with offload, validation split so that one rank embeds text while the other embeds
  videos (the collective mismatch): fit, LoRA-only checkpoint, the converted file validates
  without DeepSpeed to the metrics the DeepSpeed run logged.

GVE under every shipped DeepSpeed config as a user launches it (bf16-mixed, the config's callbacks,
ZeRO-2's loader without a batch sampler): tests/training/test_deepspeed_gve_lane.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from helpers.deepspeed_runs import (
    FP32,
    KEEP_FROZEN,
    assert_same_weights,
    checkpoints,
    cli,
    convert,
    quickstart,
    run_config,
    strategy,
)

pytest.importorskip("deepspeed")

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.distributed, pytest.mark.slow]


# ---- quick-start -------------------------------------------------------------------------------
def logged_metrics(run: Path, version: str) -> dict[str, float]:
    return json.loads((run / "logs" / version / "metrics.json").read_text())


@pytest.fixture(scope="module")
def zero3_quickstart(tmp_path_factory, corpus):
    """The uninterrupted ZeRO-3 run: 2 epochs of 2 steps, a checkpoint directory per epoch."""
    run = tmp_path_factory.mktemp("zero3") / "run"
    cli("fit", *quickstart(run, corpus, 2, every_epoch=True), *strategy("zero3"), *KEEP_FROZEN)
    return run


def in_process(*args: str) -> None:
    """`lit-retrieval ARGS` on one CPU process, in this one (no DeepSpeed)."""
    from lit_retrieval.cli import main

    main([*args, *FP32, "--trainer.devices", "1"])


def plain_test(config: list[str], checkpoint: Path) -> None:
    """`test` of a converted checkpoint without DeepSpeed, in this process on one rank (logged as version
    `plain`): the reference for the scores of a DeepSpeed run's `test`."""
    in_process(
        "test",
        *config,
        "--trainer.strategy",
        "auto",
        "--trainer.logger.init_args.version",
        "plain",
        "--ckpt_path",
        str(checkpoint),
    )


def test_quickstart_zero3_checkpoint_converts_and_tests_as_without_deepspeed(zero3_quickstart, corpus, tmp_path):
    run = zero3_quickstart
    last = run / "checkpoints" / "last.ckpt"
    assert (last / "latest").is_file() and len(list((last / "checkpoint").glob("*model_states.pt"))) == 2
    weights = convert(last, tmp_path / "last.ckpt")
    assert any(k.startswith("encoder.text.model.") for k in weights)  # frozen MiniLM kept: loads strictly
    config = [*quickstart(run, corpus, 2), "--model.init_args.evaluation.save_scores", "true"]
    cli(
        "test",
        *config,
        *strategy("zero3"),
        *KEEP_FROZEN,
        "--trainer.logger.init_args.version",
        "ds",
        "--ckpt_path",
        str(last),
    )
    plain_test(config, tmp_path / "last.ckpt")
    # every score, not the metrics (scores between -0.09 and 0.09). Before the sequential gathers on CPU
    # (lit_retrieval/strategies.py) one or two tensors kept their initial values, differently from run
    # to run: scores up to 0.07 off. The same weights in one process and under ZeRO-3 sum in other orders.
    deepspeed, plain = (np.load(next((run / "logs" / v).rglob("scores.npy"))) for v in ("ds", "plain"))
    assert deepspeed.shape == plain.shape == (7, 7)
    np.testing.assert_allclose(deepspeed, plain, atol=1e-5, rtol=0)
    assert np.abs(plain - plain.mean()).max() > 1e-2  # not a constant matrix


def test_grid_converts_a_zero3_directory_for_uvrb_once(zero3_quickstart, tmp_path):
    """`grid`'s evaluation of a run whose last.ckpt is a DeepSpeed directory (lit_retrieval/grid/runs.py)."""
    from lit_retrieval.grid.runs import CONVERTED, _evaluable

    last = zero3_quickstart / "checkpoints" / "last.ckpt"
    folder = tmp_path / "grid_run"
    folder.mkdir()
    path, code = _evaluable(folder, last, "uvrb")
    assert code == 0 and path == folder / CONVERTED / "last.ckpt"
    converted = torch.load(path, map_location="cpu", weights_only=False)["state_dict"]
    assert_same_weights(converted, convert(last, tmp_path / "by_hand.ckpt"))
    written = path.stat().st_mtime_ns
    assert _evaluable(folder, last, "uvrb") == (path, 0) and path.stat().st_mtime_ns == written  # not again


def test_quickstart_zero3_resumes_newest_directory_to_the_uninterrupted_weights(zero3_quickstart, corpus, tmp_path):
    uninterrupted = convert(zero3_quickstart / "checkpoints" / "last.ckpt", tmp_path / "uninterrupted.ckpt")
    (epoch0,) = (zero3_quickstart / "checkpoints").glob("epoch=0*.ckpt")
    run = tmp_path / "run"
    shutil.copytree(epoch0, run / "checkpoints" / "last.ckpt")
    first = convert(epoch0, tmp_path / "epoch0.ckpt")
    cli("fit", *quickstart(run, corpus, 2), *strategy("zero3"), *KEEP_FROZEN, "--ckpt_path", "newest")
    resumed = convert(run / "checkpoints" / "last.ckpt", tmp_path / "resumed.ckpt")
    assert_same_weights(resumed, uninterrupted, changed_from=first)


def test_quickstart_zero2_offload_trains_as_zero3(zero3_quickstart, corpus, tmp_path):
    """The same 2 epochs (the learning-rate schedule spans the run) as the ZeRO-3 run."""
    run = tmp_path / "run"
    cli("fit", *quickstart(run, corpus, 2), *strategy("zero2_offload"), *KEEP_FROZEN)
    zero2 = convert(run / "checkpoints" / "last.ckpt", tmp_path / "z2.ckpt")
    zero3 = convert(zero3_quickstart / "checkpoints" / "last.ckpt", tmp_path / "z3.ckpt")
    assert_same_weights(
        zero2,
        zero3,
        changed_from=convert(next((zero3_quickstart / "checkpoints").glob("epoch=0*")), tmp_path / "e0.ckpt"),
    )


def test_quickstart_zero3_as_shipped_in_bf16_keeps_fp32_masters_and_tests_its_directory(corpus, tmp_path):
    """`configs/strategy/deepspeed_zero3.yaml` as shipped (bf16-mixed): DeepSpeed casts the model to
    bf16 and keeps fp32 master weights in the optimizer's shards, which the checkpoint holds."""
    run, shipped = tmp_path / "run", ["--config", str(ROOT / "configs" / "strategy" / "deepspeed_zero3.yaml")]
    cli("fit", *quickstart(run, corpus, 1), *shipped, *KEEP_FROZEN)
    weights = convert(run / "checkpoints" / "last.ckpt", tmp_path / "last.ckpt")
    trained = [v for k, v in weights.items() if not k.startswith("encoder.text.model.")]
    assert all(v.dtype == torch.float32 for v in trained)
    # the masters start as the bf16-cast model; Adam's steps (~lr) then leave bf16's grid: not the bf16 copies
    assert any((v != v.to(torch.bfloat16).float()).any() for v in trained)
    config = [*quickstart(run, corpus, 1), "--model.init_args.evaluation.save_scores", "true"]
    directory = ["--ckpt_path", str(run / "checkpoints" / "last.ckpt")]
    cli("test", *config, *shipped, *KEEP_FROZEN, "--trainer.logger.init_args.version", "ds", *directory)
    plain_test(config, tmp_path / "last.ckpt")
    deepspeed, plain = (np.load(next((run / "logs" / v).rglob("scores.npy"))) for v in ("ds", "plain"))
    assert deepspeed.dtype == np.float32 and deepspeed.shape == plain.shape == (7, 7)
    # bf16 weights and activations (8 bits of mantissa) against fp32: 2.0e-3 apart here (scores -0.08 to 0.07)
    np.testing.assert_allclose(deepspeed, plain, atol=1e-2, rtol=0)
    assert np.abs(plain - plain.mean()).max() > 1e-2  # not a constant matrix


# ---- GVE ---------------------------------------------------------------------------------------
def gve(run: Path, tiny_qwen: Path, gve_tasks) -> list[str]:
    """GVE's tiny CPU config for 2 steps; validation on T->V with one batch of queries (text) and
    one of targets (videos), so under 2 ranks one rank embeds text while the other embeds video."""
    paths = {s.name: str(s.path) for s in gve_tasks["train"]}
    config = yaml.safe_load((ROOT / "configs" / "gve" / "tiny_cpu.yaml").read_text())
    tasks = [{**task, "path": paths[task["name"]], "batch_size": 4} for task in config["data"]["init_args"]["tasks"]]
    (val,) = [
        {**t, "path": str(s.path)}
        for t in config["data"]["init_args"]["val_tasks"]
        for s in gve_tasks["val"]
        if s.name == t["name"] == "syn_t2v"
    ]
    data = {"tasks": tasks, "val_tasks": [val], "steps_per_epoch": 2, "eval_batch_size": 64, "num_workers": 0}
    overrides = run_config(run, data, 1)
    pyramid = {"class_path": "lit_retrieval.callbacks.ModalityPyramid", "init_args": {"num_probe_pairs": 6}}
    model = [
        "--model.init_args.embedder.model_path",
        str(tiny_qwen),
        "--model.init_args.embedder.inputs.max_frames",
        "2",
    ]
    callbacks = ["--trainer.callbacks=[]", "--trainer.callbacks+", json.dumps(pyramid), *checkpoints(run, False)]
    return ["--config", str(ROOT / "configs" / "gve" / "tiny_cpu.yaml"), "--config", str(overrides), *model, *callbacks]


def lora_only(weights: dict[str, torch.Tensor]) -> bool:
    return bool(weights) and all(".lora_A." in k or ".lora_B." in k for k in weights)


def test_gve_zero3_offload_runs_text_and_video_ranks_side_by_side(tiny_qwen, gve_tasks, tmp_path):
    run = tmp_path / "run"
    # the tiny model's weights are all below DeepSpeed's persistence threshold, which keeps them whole
    # on every rank (no gather); 0 partitions every one, as most of a 3B model's are
    partition_all = ["--trainer.strategy.init_args.param_persistence_threshold", "0"]
    cli("fit", *gve(run, tiny_qwen, gve_tasks), *strategy("zero3_offload"), *partition_all)
    assert lora_only(convert(run / "checkpoints" / "last.ckpt", tmp_path / "last.ckpt"))
