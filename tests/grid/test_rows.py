"""`grid --rows` (some rows of a plan) and `grid --config` (files for every training row, e.g. a strategy), run as
docs/reproduce.md prints them, under a fake `sbatch` (`helpers/fake_slurm.py`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from lit_retrieval.commands import run_command
from lit_retrieval.errors import UsageError
from helpers.doc_commands import documented_command
from helpers.fake_slurm import fake_slurm

ROOT = Path(__file__).resolve().parents[2]


def test_the_documented_two_rows_of_melon_tab2_under_deepspeed_are_one_array(tmp_path, monkeypatch):
    """MELON Tab. 2's `clip4clip` and `clip4clip_mea` rows (3 seeds each: the plan's task ids 0-5) are prepared
    and submitted, with the DeepSpeed strategy in each run's config.yaml; no other row gets a folder."""
    words = documented_command("docs/reproduce.md", "grid", "--rows")
    assert words[:3] == ["lit-retrieval", "grid", "configs/plans/melon_tab2.yaml"]
    runs = tmp_path / "runs"
    args = [str(runs) if w == "runs/melon_tab2" else w for w in words[2:]]
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("PATH", fake_slurm(tmp_path)["PATH"])
    assert run_command("grid", args) == 0
    assert sorted(p.name for p in runs.iterdir() if p.name != "slurm" and p.is_dir()) == ["clip4clip", "clip4clip_mea"]
    for row in ("clip4clip", "clip4clip_mea"):
        for seed in (0, 1, 2):
            config = yaml.safe_load((runs / row / f"seed{seed}" / "config.yaml").read_text())
            assert config["trainer"]["strategy"]["class_path"] == "lit_retrieval.strategies.DeepSpeedStrategy"
            assert config["trainer"]["strategy"]["init_args"]["stage"] == 2
            assert config["model"]["init_args"]["encoder"]["init_args"]["pretrained"] == "/models/longclip-B.pt"
    record = json.loads((runs / "slurm" / "submissions.jsonl").read_text().splitlines()[-1])
    assert record["array"] == "0-5%64"


def test_an_unknown_row_or_config_file_is_refused_naming_it(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    plan = ["configs/plans/melon_tab2.yaml", "--out", str(tmp_path / "runs"), "--dry-run"]
    with pytest.raises(UsageError, match=r"has no row \['clip4clp'\] \(its rows: clip4clip, clip4clip_mea, xclip"):
        run_command("grid", [*plan, "--rows", "clip4clp"])
    with pytest.raises(UsageError, match="--config: no such file: configs/strategy/deepspeed_zero9.yaml"):
        run_command("grid", [*plan, "--config", "configs/strategy/deepspeed_zero9.yaml"])
    assert not (tmp_path / "runs").exists()


def test_rows_bring_the_rows_they_evaluate(tmp_path, monkeypatch, capsys):
    """SALI Tab. 3's rows that only test (`evaluates`) bring the training row whose checkpoints they test."""
    monkeypatch.chdir(ROOT)
    plan = yaml.safe_load((ROOT / "configs" / "plans" / "sali_tab3.yaml").read_text())
    evaluating = next(r for r in plan["rows"] if "evaluates" in r)
    args = ["configs/plans/sali_tab3.yaml", "--out", str(tmp_path / "runs"), "--dry-run", "--rows", evaluating["name"]]
    assert run_command("grid", args) == 0
    listed = {line.split()[1] for line in capsys.readouterr().out.splitlines() if line.startswith("[")}
    assert listed == {evaluating["name"], evaluating["evaluates"]}
