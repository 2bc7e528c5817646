"""Gradient caching through `lit-retrieval fit` (automatic optimisation): with `accumulate_grad_batches`
and gradient clipping, a cached fit (`model.grad_cache` in the YAML) logs the plain fit's losses and
ends at its weights, and a cached fit stopped after epoch 0 and resumed from `last.ckpt` ends at
the uninterrupted cached fit's weights."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
import yaml

from helpers.cli_server import run_cli
from helpers.fit_configs import clip_fit_config
from lit_retrieval.cli import main

TRAINER = {
    "max_epochs": 2,
    "limit_val_batches": 0,
    "log_every_n_steps": 1,
    "accumulate_grad_batches": 2,
    "gradient_clip_val": 0.05,  # small enough to clip: the clipped norm is the full batch's
    "enable_progress_bar": False,
    "enable_model_summary": False,
}


def fit(run: Path, tiny_clip: Path, corpus: Path, grad_cache: dict | None, stop_after_epoch0: bool = False) -> Path:
    """A tiny MEA fit in `run`; returns its `last.ckpt`."""
    callbacks = [
        {
            "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
            "init_args": {"dirpath": str(run / "checkpoints"), "save_last": True, "save_top_k": 0},
        }
    ]
    if stop_after_epoch0:
        callbacks.append({"class_path": "helpers.stop_callbacks.StopAfterEpoch", "init_args": {"epoch": 0}})
    logger = {
        "class_path": "lightning.pytorch.loggers.CSVLogger",
        "init_args": {"save_dir": str(run), "name": "logs", "version": "fit"},
    }
    trainer = {**TRAINER, "default_root_dir": str(run), "logger": logger, "callbacks": callbacks}
    model = {"mea": {"weight": 0.5}, "optim": {"head_lr": 1e-3, "backbone_lr": 1e-3, "warmup_proportion": 0.0}}
    if grad_cache is not None:
        model["grad_cache"] = grad_cache
    config = clip_fit_config(tiny_clip, corpus, trainer=trainer, model=model, data={"num_workers": 0})
    run.mkdir(parents=True, exist_ok=True)
    (run / "fit.yaml").write_text(yaml.safe_dump(config))
    main(["fit", "--config", str(run / "fit.yaml")])
    return run / "checkpoints" / "last.ckpt"


def weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    return torch.load(checkpoint, map_location="cpu", weights_only=False)["state_dict"]


def train_losses(run: Path) -> list[float]:
    with open(run / "logs" / "fit" / "metrics.csv") as handle:
        return [float(r["train/loss"]) for r in csv.DictReader(handle) if r.get("train/loss")]


def assert_same_weights(got: dict, want: dict, atol: float) -> None:
    assert got.keys() == want.keys()
    for name, value in want.items():
        torch.testing.assert_close(got[name], value, atol=atol, rtol=0, msg=lambda m, name=name: f"{name}: {m}")


def test_cached_fit_equals_the_plain_fit_and_resumes_exactly(tmp_path, tiny_clip, corpus):
    cache = {"text_chunk": 2, "video_chunk": 1}
    plain = fit(tmp_path / "plain", tiny_clip, corpus, None)
    cached = fit(tmp_path / "cached", tiny_clip, corpus, cache)
    losses = train_losses(tmp_path / "cached")
    assert len(losses) == 4  # 2 epochs x 2 optimizer steps of 2 batches, logged per optimizer step
    assert losses == pytest.approx(train_losses(tmp_path / "plain"), rel=1e-5)
    start = weights(tmp_path / "plain" / "checkpoints" / "last.ckpt")
    assert_same_weights(weights(cached), weights(plain), atol=1e-5)  # 4 AdamW steps of lr 1e-3 on rounding
    stopped = fit(tmp_path / "resumed", tiny_clip, corpus, cache, stop_after_epoch0=True)
    assert any(not torch.equal(weights(stopped)[k], start[k]) for k in start)
    config = tmp_path / "resumed" / "fit.yaml"
    resumed = yaml.safe_load(config.read_text())
    resumed["trainer"]["callbacks"] = resumed["trainer"]["callbacks"][:1]
    config.write_text(yaml.safe_dump(resumed))
    main(["fit", "--config", str(config), "--ckpt_path", str(stopped)])
    assert_same_weights(weights(tmp_path / "resumed" / "checkpoints" / "last.ckpt"), weights(cached), atol=0.0)


# the tolerance of each strategy's cached-vs-plain weights after one epoch of AdamW steps (lr 1e-3)
STRATEGY_ATOL = {
    "ddp": 1e-5,
    # a tenth of one step: Adam divides each entry by its own scale, so float rounding on near-zero
    # gradient entries moves them by a fraction of the step (observed 2.5e-5, 1 entry in 16,384)
    "deepspeed_zero2": 1e-4,
}


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize("strategy", sorted(STRATEGY_ATOL))
def test_two_cpu_ranks_train_the_cached_fit_as_the_plain_one(strategy, tmp_path, tiny_clip, corpus):
    """Lightning's DDP (gloo, 2 ranks) and the real DeepSpeed engine (ZeRO-2 on DeepSpeed's CPU
    accelerator; tests/training/test_deepspeed.py's lane), with MEA and cross-device negatives: the bucketed
    all-reduce and ZeRO's gradient partitioning see one backward per step, as without caching."""

    from helpers.fit_configs import clean_launch_env

    root = Path(__file__).resolve().parents[2]
    launch = ["--trainer.strategy", "ddp"]
    env = clean_launch_env(str(root / "tests"))
    if strategy != "ddp":
        pytest.importorskip("deepspeed")
        launch = ["--config", str(root / "configs" / "strategy" / f"{strategy}.yaml"), "--trainer.precision", "32-true"]
        env["DS_ACCELERATOR"] = "cpu"
    found = {}
    for name, cache in (("plain", None), ("cached", {"text_chunk": 3, "video_chunk": 1})):
        run = tmp_path / name
        checkpoint = {
            "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
            "init_args": {"dirpath": str(run / "checkpoints"), "save_last": True, "save_top_k": 0},
        }
        trainer = {**TRAINER, "devices": 2, "max_epochs": 1, "logger": False}
        trainer.update(default_root_dir=str(run), callbacks=[checkpoint])
        model = {"mea": {"weight": 0.5}, "cross_device": True, **({"grad_cache": cache} if cache else {})}
        config = clip_fit_config(tiny_clip, corpus, trainer=trainer, model=model, data={"num_workers": 0})
        run.mkdir(parents=True)
        (run / "fit.yaml").write_text(yaml.safe_dump(config))
        done = run_cli(["fit", "--config", str(run / "fit.yaml"), *launch], root, env, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        found[name] = converted_weights(run / "checkpoints" / "last.ckpt", tmp_path / f"{name}.ckpt")
    assert_same_weights(found["cached"], found["plain"], atol=STRATEGY_ATOL[strategy])


def converted_weights(checkpoint: Path, out: Path) -> dict[str, torch.Tensor]:
    """A checkpoint's weights; a DeepSpeed directory is consolidated first (`convert-checkpoint`)."""
    if checkpoint.is_dir():
        from lit_retrieval.commands.convert_checkpoint import run

        assert run([str(checkpoint), str(out)]) == 0
        checkpoint = out
    return weights(checkpoint)
