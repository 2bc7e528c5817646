"""The interruption tests' tiny CLIP4Clip + MEA fit (2 epochs of 4 steps; CSV and TensorBoard logs,
`last.ckpt`), and the checks that a run interrupted and resumed ends as the uninterrupted one: the same
weights, optimizer state, `metrics.csv` rows and TensorBoard scalars."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
import yaml

from helpers.fit_configs import clip_fit_config

STEPS_PER_EPOCH = 4  # 16 training videos of the test corpus in batches of 4

EPOCHS = 2


def write_config(
    path: Path,
    tiny_clip: Path,
    corpus: Path,
    run: Path,
    *,
    callbacks: list | None = None,
    resume: dict | None = None,
    num_workers: int = 0,
) -> Path:
    """The tiny MEA fit, its CSV + TensorBoard logs and checkpoints in `run` (the data pipeline
    is deterministic, so the number of loader workers does not change the result)."""
    config = clip_fit_config(
        tiny_clip,
        corpus,
        trainer={
            "max_epochs": EPOCHS,
            "limit_val_batches": 0,
            "log_every_n_steps": 1,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "default_root_dir": str(run),
            "logger": [
                {
                    "class_path": "lightning.pytorch.loggers.CSVLogger",
                    "init_args": {
                        "save_dir": str(run),
                        "name": "logs",
                        "version": "fit",
                        "flush_logs_every_n_steps": 1,
                    },
                },
                {
                    "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                    "init_args": {"save_dir": str(run), "name": "tb", "version": "fit"},
                },
            ],
            "callbacks": [
                {
                    "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                    "init_args": {"dirpath": str(run / "checkpoints"), "save_last": True, "save_top_k": 0},
                },
                *(callbacks or []),
            ],
        },
        model={"mea": {"weight": 0.5}},
        data={"num_workers": num_workers},
    )
    config["resume_checkpoint"] = {"every_n_steps": None, "every_n_minutes": None, **(resume or {})}
    path.write_text(yaml.safe_dump(config))
    return path


def assert_same_state(got_model: dict, got_optimizer: dict, want: dict) -> None:
    assert got_model.keys() == want["state_dict"].keys() and any(
        "mea" in k for k in got_model
    )  # theta^t buffers included
    for name, value in want["state_dict"].items():
        torch.testing.assert_close(got_model[name], value, atol=1e-6, rtol=0, msg=name)
    torch.testing.assert_close(got_optimizer["state"], want["optimizer"]["state"], atol=1e-6, rtol=0)


def csv_rows(run: Path) -> list[dict[str, str]]:
    with open(run / "logs" / "fit" / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def assert_same_logs(run: Path, whole: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    got, want = csv_rows(run), csv_rows(whole)
    assert [(r["step"], r["epoch"]) for r in got] == [(r["step"], r["epoch"]) for r in want]  # every row once, in order
    assert got[0].keys() == want[0].keys() and "train/loss" in got[0]
    for a, b in zip(got, want):
        assert {k: float(v) for k, v in a.items() if v} == pytest.approx(
            {k: float(v) for k, v in b.items() if v}, abs=1e-5
        )
    scalars = []
    for folder in (run, whole):
        events = EventAccumulator(str(folder / "tb" / "fit"))
        events.Reload()
        scalars.append([(e.step, e.value) for e in events.Scalars("train/loss")])
    assert [s for s, _ in scalars[0]] == [s for s, _ in scalars[1]] == list(range(STEPS_PER_EPOCH * EPOCHS))
    assert [v for _, v in scalars[0]] == pytest.approx([v for _, v in scalars[1]], abs=1e-5)


def final_state(run: Path) -> tuple[dict, dict]:
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    assert checkpoint["global_step"] == STEPS_PER_EPOCH * EPOCHS
    return checkpoint["state_dict"], checkpoint["optimizer_states"][0]
