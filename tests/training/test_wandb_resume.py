"""A resumed fit continues its W&B run (issues 42, 54): two real `lit-retrieval fit` processes with
Lightning's `WandbLogger` in W&B's offline mode (nothing leaves the machine), the second resuming
the first's last checkpoint (by its path or as `--ckpt_path last`); W&B's own offline run folders
(`wandb/offline-run-<time>-<id>`) show which run each process wrote, and W&B's own reader of their
`.wandb` logs (`wandb leet inspect --json`) shows the history's steps."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from helpers.cli_server import run_cli
from helpers.fit_configs import clip_fit_config

if importlib.util.find_spec("wandb") is None:
    if os.environ.get("CI"):  # the dev extra installs it: missing under CI is a failure
        raise ImportError("wandb is not installed (the dev extra includes lit-retrieval[wandb])")
    pytest.skip("the wandb extra (pip install 'lit-retrieval[wandb]')", allow_module_level=True)

from lightning.pytorch.loggers import WandbLogger  # noqa: E402

from lit_retrieval.callbacks.resume_checkpoint import check_configured_wandb_ids, continue_wandb_runs  # noqa: E402
from lit_retrieval.errors import ConfigError  # noqa: E402

WANDB_OFFLINE_ENV = {**os.environ, "WANDB_SILENT": "true", "WANDB_MODE": "offline"}


def fit(config: Path, *args: str) -> None:
    done = run_cli(["fit", "--config", str(config), *args], Path.cwd(), WANDB_OFFLINE_ENV, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def run_ids(save_dir: Path) -> list[str]:
    """The run id of each offline W&B run folder, oldest first."""
    return [p.name.rsplit("-", 1)[1] for p in sorted((save_dir / "wandb").glob("offline-run-*"))]


def wandb_history(run_folder: Path) -> list[dict]:
    """The history rows of an offline run folder, read by W&B's own reader (`wandb leet inspect --json`)."""
    wandb = Path(sys.executable).parent / "wandb"
    done = subprocess.run(
        [str(wandb), "leet", "inspect", "--json", str(run_folder)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return [r["history"]["item"] for r in records if r.get("type") == "history"]


def wandb_fit_config(tmp_path: Path, tiny_clip: Path, corpus: Path, **trainer_options) -> Path:
    trainer = {
        "devices": 1,
        "max_epochs": 1,
        "limit_train_batches": 2,
        "limit_val_batches": 0,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "default_root_dir": str(tmp_path / "run"),
        "logger": {
            "class_path": "lightning.pytorch.loggers.WandbLogger",
            "init_args": {"save_dir": str(tmp_path / "wb"), "project": "lit", "offline": True},
        },
        "callbacks": [
            {
                "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                "init_args": {"dirpath": str(tmp_path / "ckpt"), "save_last": True, "save_top_k": 0},
            }
        ],
        **trainer_options,
    }
    config = tmp_path / "fit.yaml"
    config.write_text(yaml.safe_dump(clip_fit_config(tiny_clip, corpus, trainer)))
    return config


def test_a_resumed_fit_logs_into_the_same_wandb_run(tmp_path, tiny_clip, corpus):
    config = wandb_fit_config(tmp_path, tiny_clip, corpus)
    fit(config)
    (first,) = run_ids(tmp_path / "wb")
    state = torch.load(tmp_path / "ckpt" / "last.ckpt", map_location="cpu", weights_only=False)["callbacks"]
    assert [s["wandb_ids"] for k, s in state.items() if k.startswith("ResumeCheckpoint")] == [[first]]
    fit(config, "--trainer.max_epochs", "2", "--ckpt_path", str(tmp_path / "ckpt" / "last.ckpt"))
    assert run_ids(tmp_path / "wb") == [first, first]  # a second process, the same run
    fit(config, "--trainer.max_epochs", "1")  # a fresh fit: a new run
    assert len(set(run_ids(tmp_path / "wb"))) == 2


def test_an_id_the_user_gives_wins_and_a_started_run_is_left_alone(tmp_path):
    given = WandbLogger(save_dir=str(tmp_path), offline=True, id="mine")
    fresh = WandbLogger(save_dir=str(tmp_path), offline=True)
    trainer = type("Trainer", (), {"loggers": [given, fresh]})()
    continue_wandb_runs(trainer, ["saved0", "saved1"])
    assert (given.version, fresh.version) == ("mine", "saved1")
    assert fresh._wandb_init["id"] == "saved1" and fresh._wandb_init["resume"] == "allow"
    started = WandbLogger(save_dir=str(tmp_path), offline=True)
    started._experiment = object()  # a run already created
    continue_wandb_runs(type("Trainer", (), {"loggers": [started]})(), ["saved"])
    assert started._id is None


@pytest.mark.slow
def test_ckpt_path_last_keeps_the_run_and_its_steps_continue_from_the_global_step(tmp_path, tiny_clip, corpus):
    """`--ckpt_path last` (docs/scale-out.md's spelling) resumes the same W&B run, and the resumed
    process's W&B steps go on from the checkpoint's global step instead of restarting at 0."""
    config = wandb_fit_config(tmp_path, tiny_clip, corpus, limit_train_batches=3, log_every_n_steps=1)
    fit(config)
    fit(config, "--trainer.max_epochs", "2", "--ckpt_path", "last")
    folders = sorted((tmp_path / "wb" / "wandb").glob("offline-run-*"))
    assert len(folders) == 2 and len({p.name.rsplit("-", 1)[1] for p in folders}) == 1
    first, second = (wandb_history(folder) for folder in folders)
    for row in first + second:
        assert row["_step"] == row["trainer/global_step"], row
    steps = [[row["_step"] for row in rows if "train/loss" in row] for rows in (first, second)]
    assert steps[0] and steps[1] and min(steps[1]) > max(steps[0]), steps


@pytest.mark.parametrize("bad", ["bad/id?", "a:b", " padded", "it's"])
def test_an_id_wandb_refuses_is_refused_at_once_naming_where_it_came_from(tmp_path, bad):
    """W&B's own rule (its `Settings.run_id` validator: no `:;,#?/'`, no surrounding white space),
    before `wandb.init` would refuse it as a traceback; from the config or from an edited checkpoint."""
    configured = type("Trainer", (), {"loggers": [WandbLogger(save_dir=str(tmp_path), offline=True, id=bad)]})()
    with pytest.raises(ConfigError, match=r"trainer\.logger: WandbLogger id: W&B run id .* is refused by W&B"):
        check_configured_wandb_ids(configured)
    fresh = type("Trainer", (), {"loggers": [WandbLogger(save_dir=str(tmp_path), offline=True)]})()
    with pytest.raises(ConfigError, match=r"edited\.ckpt: its recorded W&B run: W&B run id"):
        continue_wandb_runs(fresh, [bad], "runs/x/edited.ckpt")
    check_configured_wandb_ids(type("Trainer", (), {"loggers": [WandbLogger(save_dir=str(tmp_path), id="ok-1")]})())


def test_fit_with_a_refused_wandb_id_is_one_line_exit_2(tmp_path, tiny_clip, corpus):
    trainer = {
        "devices": 1,
        "max_epochs": 1,
        "default_root_dir": str(tmp_path / "run"),
        "logger": {
            "class_path": "lightning.pytorch.loggers.WandbLogger",
            "init_args": {"save_dir": str(tmp_path / "wb"), "offline": True, "id": "bad/id?"},
        },
    }
    config = tmp_path / "fit.yaml"
    config.write_text(yaml.safe_dump(clip_fit_config(tiny_clip, corpus, trainer)))
    done = run_cli(["fit", "--config", str(config)], Path.cwd(), WANDB_OFFLINE_ENV, timeout=600)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1].startswith("lit-retrieval fit: ") and "'bad/id?'" in done.stderr
    assert not (tmp_path / "wb" / "wandb").exists()  # wandb.init never ran
