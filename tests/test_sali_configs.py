"""SALI configs: each CLIP4Clip baseline and its SALI+max twin train with the same InfoNCE scaling,
and the Tab. 3 grid overlays derive their run folder from the base config (no data set hard-coded).

Reference: CLIP4Clip's loss is (L_CE(S) + L_CE(S^T)) / 2 (its `modeling.py`, the two directions
averaged), and SALI trains "with symmetric InfoNCE [2]" citing CLIP4Clip (SALI Sec. 3)."""

from pathlib import Path

import pytest
import yaml

from lit_retrieval.cli import main

ROOT = Path(__file__).resolve().parents[1]
SALI = ROOT / "configs" / "sali"
PAIRS = sorted(p.name.removesuffix("_clip4clip.yaml") for p in SALI.glob("*_clip4clip.yaml"))
REAL_DATA = [name for name in PAIRS if name != "synthetic"]  # CLIP4Clip's official recipe
TRAIN_OVERLAYS = sorted(p.name for p in (SALI / "grid").glob("train_*.yaml"))


def resolved(capsys, monkeypatch, *configs: str) -> dict:
    """The full config `fit --print_config` resolves from `configs` (defaults included)."""
    monkeypatch.chdir(ROOT)
    args = [arg for config in configs for arg in ("--config", config)]
    with pytest.raises(SystemExit) as finished:
        main(["fit", *args, "--print_config"])
    out = capsys.readouterr()
    assert finished.value.code in (0, None), out.err[-2000:]
    return yaml.safe_load(out.out)


def test_every_baseline_has_a_sali_twin():
    assert PAIRS == ["anet", "cm", "msrvtt", "synthetic"]
    assert all((SALI / f"{name}_sali_max.yaml").exists() for name in PAIRS)


@pytest.mark.parametrize("name", PAIRS)
def test_pairs_use_the_same_infonce_scaling(name, capsys, monkeypatch):
    baseline = resolved(capsys, monkeypatch, f"configs/sali/{name}_clip4clip.yaml")["model"]["init_args"]
    sali = resolved(capsys, monkeypatch, f"configs/sali/{name}_sali_max.yaml")["model"]["init_args"]
    assert baseline["average_directions"] == sali["average_directions"]
    if name in REAL_DATA:
        assert baseline["average_directions"] is True  # CLIP4Clip averages the two directions


@pytest.mark.parametrize("base", [f"{name}_sali_max.yaml" for name in PAIRS])
def test_grid_runs_live_in_the_base_run_folder(base, capsys, monkeypatch):
    for overlay in TRAIN_OVERLAYS:
        trainer = yaml.safe_load((SALI / "grid" / overlay).read_text()).get("trainer", {})  # no data set's folder:
        assert "default_root_dir" not in trainer and "save_dir" not in trainer.get("logger", {}).get("init_args", {})
    plain = resolved(capsys, monkeypatch, f"configs/sali/{base}")["trainer"]
    folders = {(plain["logger"]["init_args"]["save_dir"], plain["logger"]["init_args"]["name"])}
    for overlay in TRAIN_OVERLAYS:
        trainer = resolved(capsys, monkeypatch, f"configs/sali/{base}", f"configs/sali/grid/{overlay}")["trainer"]
        logger = trainer["logger"]["init_args"]
        assert logger["save_dir"] == plain["logger"]["init_args"]["save_dir"]
        assert trainer["default_root_dir"] == plain["default_root_dir"]
        for callback in trainer["callbacks"]:  # checkpoints follow the logger's folder
            assert callback["init_args"].get("dirpath") is None
        folders.add((logger["save_dir"], logger["name"]))
    assert len(folders) == 1 + len(TRAIN_OVERLAYS)  # every row has its own folder
