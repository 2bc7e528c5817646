"""The real DeepSpeed engine on CPU ranks through `lit-retrieval`, as the DeepSpeed tests run it: the shipped
`configs/strategy/deepspeed_*.yaml` in fp32, the quick-start shrunk to the test corpus, a run folder with
per-epoch checkpoint directories, and the conversion of a checkpoint directory to one file. Importing this
module skips the importing test module where DeepSpeed is not installed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from helpers.cli_server import run_cli
from helpers.fit_configs import clean_launch_env

pytest.importorskip("deepspeed")

ROOT = Path(__file__).resolve().parents[2]

FP32 = ["--trainer.precision", "32-true"]

# the dual encoder loads strictly: its frozen text tower must be in the checkpoint (docs/scale-out.md)
KEEP_FROZEN = ["--trainer.strategy.init_args.exclude_frozen_parameters", "false"]


def strategy(name: str) -> list[str]:
    return ["--config", str(ROOT / "configs" / "strategy" / f"deepspeed_{name}.yaml"), *FP32]


def cli(*args: str, ranks: int = 2) -> None:
    """`lit-retrieval ARGS` on `ranks` CPU processes (rank 0 forked from a warm interpreter: helpers.cli_server)."""
    env = {**clean_launch_env(str(ROOT / "tests")), "DS_ACCELERATOR": "cpu"}
    done = run_cli([*args, "--trainer.devices", str(ranks)], ROOT, env, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]


def convert(directory: Path, out: Path) -> dict[str, torch.Tensor]:
    from lit_retrieval.commands.convert_checkpoint import run

    assert run([str(directory), str(out)]) == 0
    return torch.load(out, map_location="cpu", weights_only=False)["state_dict"]


def assert_same_weights(got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], changed_from=None) -> None:
    assert got.keys() == expected.keys()
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], atol=2e-6, rtol=1e-5, msg=name)
    if changed_from is not None:  # training moved the weights: the comparison is not of two initialisations
        assert any(not torch.equal(got[k], changed_from[k]) for k in got)


def run_config(run: Path, data: dict, epochs: int) -> Path:
    """Trainer and data overrides over a shipped config: `run` as the run folder, a checkpoint
    directory per epoch and `last.ckpt`."""
    config = {
        "trainer": {
            "max_epochs": epochs,
            "default_root_dir": str(run),
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "logger": {
                "class_path": "lightning.pytorch.loggers.CSVLogger",
                "init_args": {"save_dir": str(run), "name": "logs", "version": "fit"},
            },
        },
        "data": {"init_args": data},
    }
    path = run.with_suffix(".yaml")
    run.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    return path


def checkpoints(run: Path, every_epoch: bool) -> list[str]:
    args = {"dirpath": str(run / "checkpoints"), "save_last": True, "save_top_k": -1 if every_epoch else 0}
    args["enable_version_counter"] = False  # a resumed run writes last.ckpt again, not last-v1.ckpt
    callback = {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint", "init_args": args}
    return ["--trainer.callbacks+", json.dumps(callback)]


QUICKSTART = ["--config", str(ROOT / "configs" / "quickstart.yaml")]


def quickstart(run: Path, corpus: Path, epochs: int, every_epoch: bool = False) -> list[str]:
    data = {"annotation": str(corpus / "annotations.json"), "synthetic": None, "num_frames": 2, "batch_size": 4}
    data.update(eval_batch_size=8, num_workers=0)
    overrides = run_config(run, data, epochs)
    # ZeRO-3: every rank must run the same sub-modules, which a text-cache hit on one rank breaks
    no_cache = ["--model.init_args.encoder.init_args.text_cache_size", "0"]
    fit = ["--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "0", "--trainer.callbacks=[]"]
    return [*QUICKSTART, "--config", str(overrides), *no_cache, *fit, *checkpoints(run, every_epoch)]
