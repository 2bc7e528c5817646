"""MELON Tab. 4 compares a baseline and its +MEA row on one test set: both configs, loaded through
the CLI parser and set up on the fixtures, evaluate (and train on) the same video ids; `min_events`
(a filter a config may still set) applies to the training split only by default."""

import importlib
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from lit_retrieval.cli import main
from lit_retrieval.data import AnnotationError, DiDeMoDataModule

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


def row_configs(row: str) -> list[str]:
    """The config files of a MELON row: one file `configs/melon/{row}.yaml`, or the composition a
    row file under `configs/melon/rows/` names in its leading comment lines."""
    flat = ROOT / "configs" / "melon" / f"{row}.yaml"
    if flat.exists():
        return [str(flat)]
    lines = (ROOT / "configs" / "melon" / "rows" / f"{row}.yaml").read_text().splitlines()
    header = " ".join(line for line in lines[: next(i for i, line in enumerate(lines) if not line.startswith("#"))])
    configs = re.findall(r"--config\s+(\S+)", header)
    assert configs and configs[-1].endswith(f"rows/{row}.yaml"), header
    return configs


def data_module(row: str, annotation_dir: Path, capsys, monkeypatch):
    """The data module of MELON row `row` as `fit` resolves it, pointed at `annotation_dir`."""
    monkeypatch.chdir(ROOT)
    configs = [arg for config in row_configs(row) for arg in ("--config", config)]
    args = ["--data.init_args.annotation_dir", str(annotation_dir), "--data.init_args.video_root", str(annotation_dir)]
    with pytest.raises(SystemExit) as finished:
        main(["fit", *configs, *args, "--print_config"])
    out = capsys.readouterr()
    assert finished.value.code in (0, None), out.err[-2000:]
    data = yaml.safe_load(out.out)["data"]
    module, name = data["class_path"].rsplit(".", 1)
    dm = getattr(importlib.import_module(module), name)(**data["init_args"])
    dm.setup()
    return dm


def ids(dm, role):
    return sorted(r.video_id for r in dm.datasets[role].records) if role in dm.datasets else None


@pytest.fixture
def activitynet(tmp_path):
    """The ActivityNet fixture plus a one-sentence test video (as val_1 has)."""
    root = tmp_path / "activitynet"
    shutil.copytree(FIXTURES / "activitynet", root)
    val = json.loads((root / "val_1.json").read_text())
    val["v_One1Sent2Ab"] = {"duration": 30.0, "timestamps": [[0.0, 30.0]], "sentences": ["A dog runs on a beach."]}
    (root / "val_1.json").write_text(json.dumps(val))
    return root


@pytest.mark.parametrize("name", ["anet_clip4clip", "didemo_clip4clip"])
def test_baseline_and_mea_twin_evaluate_the_same_videos(name, activitynet, capsys, monkeypatch):
    root = activitynet if name.startswith("anet") else FIXTURES / "didemo"
    baseline = data_module(name, root, capsys, monkeypatch)
    mea = data_module(f"{name}_mea", root, capsys, monkeypatch)
    one_event = {"anet_clip4clip": "v_One1Sent2Ab", "didemo_clip4clip": "88@N02_456_abcd"}[name]
    for role in ("train", "val", "test"):
        assert ids(mea, role) == ids(baseline, role)
    assert one_event in ids(mea, "test")
    # MEA applies where a partial query exists: DiDeMo's one-description training video trains in both
    if name.startswith("didemo"):
        assert ids(mea, "train") == ["55512345@N00_4412345678_0a1b2c3d4e", "77@N01_123_ffee"]
        assert mea.dropped_records == []


def test_min_events_on_every_split_is_still_available():
    everywhere = DiDeMoDataModule(str(FIXTURES / "didemo"), min_events=2, min_events_scope="all", on_bad_record="raise")
    with pytest.raises(AnnotationError, match="1 events; at least 2 needed in split 'train'"):
        everywhere.setup()
    skipping = DiDeMoDataModule(str(FIXTURES / "didemo"), min_events=2, min_events_scope="all", on_bad_record="skip")
    with pytest.raises(ValueError, match="no videos in split 'test'"):  # its only test video has one event
        skipping.setup()
