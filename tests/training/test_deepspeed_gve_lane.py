"""GVE under each shipped DeepSpeed config, launched as a user launches it (issue 39): the commands
in `configs/gve/tiny_cpu.yaml`'s header, read from the file and run as written (the tiny model, the
synthetic corpus, the task files), then `lit-retrieval fit --config configs/gve/tiny_cpu.yaml
--config configs/strategy/deepspeed_*.yaml` (docs/scale-out.md) on 2 CPU ranks (DeepSpeed's CPU
accelerator, gloo), as shipped: bf16-mixed, the config's callbacks (Modality Pyramid with its
prober), loader workers and validation tasks. Only the length is cut (1 epoch of 2 steps). Every
config in `configs/strategy/deepspeed_*.yaml` is a case, so a new one cannot be missed.

Each run must exit 0, write a `last.ckpt/` directory that `convert-checkpoint` turns into LoRA
weights only (trained: some `lora_B` nonzero; `exclude_frozen_parameters`), log the validation
metrics of both validation tasks and the curriculum, and the converted file must validate
without DeepSpeed."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
import torch
from helpers.cli_server import run_cli
from helpers.fit_configs import clean_launch_env

pytest.importorskip("deepspeed")

ROOT = Path(__file__).resolve().parents[2]
GVE_CONFIG = ROOT / "configs" / "gve" / "tiny_cpu.yaml"
STRATEGIES = sorted(p.stem for p in (ROOT / "configs" / "strategy").glob("deepspeed_*.yaml"))
SHORT = ["--trainer.max_epochs", "1", "--data.init_args.steps_per_epoch", "2"]
pytestmark = [pytest.mark.distributed, pytest.mark.slow]


def header_commands(config: Path) -> list[list[str]]:
    """The `lit-retrieval ...` commands of a config's header comment, in order (`&&` splits a line)."""
    commands = []
    for line in config.read_text().splitlines():
        if line.startswith("#   lit-retrieval "):
            commands += [shlex.split(part) for part in line[1:].split("&&")]
    return commands


def lit_retrieval(args: list[str], cwd: Path, timeout: int = 400) -> subprocess.CompletedProcess:
    env = {**clean_launch_env(str(ROOT / "tests")), "DS_ACCELERATOR": "cpu"}
    return run_cli(args, cwd, env, timeout=timeout)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    """A folder after the header's preparation commands (all but the final `fit`)."""
    folder = tmp_path_factory.mktemp("gve_lane")
    *prepare, fit = header_commands(GVE_CONFIG)
    assert fit[1:] == ["fit", "--config", "configs/gve/tiny_cpu.yaml"], fit
    for command in prepare:
        done = lit_retrieval(command[1:], folder)
        assert done.returncode == 0, (command, done.stderr[-3000:])
    return folder


def workspace(prepared: Path, into: Path) -> Path:
    """`into` with the prepared model and data linked in: a run of its own (runs/gve_tiny/...)."""
    (into / "runs" / "gve_tiny").mkdir(parents=True)
    (into / "runs" / "gve_tiny" / "model").symlink_to(prepared / "runs" / "gve_tiny" / "model")
    (into / "data").symlink_to(prepared / "data")
    return into


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_gve_fits_under_each_shipped_deepspeed_config_as_launched(prepared, strategy, tmp_path, monkeypatch):
    run = workspace(prepared, tmp_path)
    configs = ["--config", str(GVE_CONFIG), "--config", str(ROOT / "configs" / "strategy" / f"{strategy}.yaml")]
    done = lit_retrieval(["fit", *configs, "--trainer.devices", "2", *SHORT], run)
    assert done.returncode == 0, done.stderr[-6000:]
    folder = run / "runs" / "gve_tiny"
    columns = (folder / "logs" / "fit" / "metrics.csv").read_text().splitlines()[0].split(",")
    for task in ("syn_t2v", "syn_i2v"):  # both validation tasks, and the curriculum's log
        assert f"val/{task}/q2c/R@1" in columns, columns
    assert any(column.startswith("curriculum/") for column in columns), columns
    last = folder / "checkpoints" / "last.ckpt"
    assert (last / "latest").is_file(), sorted(p.name for p in last.parent.iterdir())
    from lit_retrieval.commands.convert_checkpoint import run as convert

    assert convert([str(last), str(tmp_path / "converted.ckpt")]) == 0
    weights = torch.load(tmp_path / "converted.ckpt", map_location="cpu", weights_only=False)["state_dict"]
    assert weights and all(".lora_A." in k or ".lora_B." in k for k in weights), sorted(weights)[:5]
    assert any(k.endswith("lora_B.default.weight") and v.abs().sum() > 0 for k, v in weights.items())
    if strategy == "deepspeed_zero2":  # once: the converted file validates without DeepSpeed (GVE loads LoRA only)
        from lit_retrieval.cli import main

        monkeypatch.chdir(run)
        version = ["--trainer.logger.init_args.version", "plain", "--ckpt_path", str(tmp_path / "converted.ckpt")]
        main(["validate", "--config", str(GVE_CONFIG), "--data.init_args.num_workers", "0", *version])
        assert "val/syn_t2v/q2c/R@1" in (folder / "logs" / "plain" / "metrics.csv").read_text()
