"""MELON rows composed from parts resolve to the configs the 19 per-row files used to give.

Each row file under `configs/melon/rows/` names its composition on its first lines (the command a
user runs). For every row, the composition and the row's recorded config from before the split
are parsed with the real `RetrievalCLI` parser and the two resolved configs must be equal;
defaults come from the same parser on both sides, so a changed default elsewhere does not break
the comparison. The record `tests/fixtures/melon_resolved/<row>.json` holds the values the parser
resolved from the old single file `configs/melon/<row>.yaml` (as of commit 01f26ac), restricted to
the keys (and list items) that file set; when it was written, parsing the record alone gave the
same complete config as parsing the old file. The evaluation options have since moved, by name
only, under `model.init_args.evaluation` in the records too. The intended differences are listed by
`changed`: the TempMe rows' learning rate (MELON supp. B.1), gradient clipping at norm 1.0 in every row
(the heads' official recipes), and the +MEA rows' data, now their baselines' (issue 36).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from lit_retrieval.grid.plan import Plan, load_plan
from lit_retrieval.grid.runs import override_args
from lit_retrieval.retrieval_cli import resolved_training_config
from lit_retrieval.retrieval_cli import RetrievalCLI

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "melon_resolved"
ROWS = sorted(p.stem for p in FIXTURES.glob("*.json"))
# {key: (recorded, composed)}: the intended changes since the per-row files (`changed`).
# TempMe's adapters and frame positions: TempMe's own 6e-4 -> MELON supp. B.1's 1e-4 for every
# module but Long-CLIP (issue 16, item 10).
TEMPME_LR = {"model.init_args.optim.head_lr": (6.0e-4, 1.0e-4)}
# Every row: gradient clipping at norm 1.0, as every head's official training loop (issue 36).
CLIPPED = {"trainer.gradient_clip_val": (None, 1.0), "trainer.gradient_clip_algorithm": (None, "norm")}
# Every row: the paper's batch recorded, warned about when a run's differs (issue 34).
RECIPE = {"model.init_args.recipe_batch": (None, 16)}
# Every row: frames cross to the GPU as uint8 and are normalised there (issue 57, item 10).
ON_DEVICE = {"data.init_args.normalize_on_device": (False, True)}
# +MEA rows: the baseline's training videos; one-event videos are no longer bad records (issue 36).
BASELINE_DATA = {"data.init_args.min_events": (2, 1), "data.init_args.on_bad_record": ("skip", "raise")}


def changed(row: str) -> dict[str, tuple[Any, Any]]:
    """The intended differences of `row`'s composed config from its recorded one."""
    return {
        **CLIPPED,
        **RECIPE,
        **ON_DEVICE,
        **(TEMPME_LR if row.startswith("melon_tempme") else {}),
        **(BASELINE_DATA if row.endswith("_mea") else {}),
    }


def resolve(configs: list[str]) -> dict[str, Any]:
    """The complete config `lit-retrieval fit --config A --config B ...` would run with."""
    args = ["fit", *(arg for config in configs for arg in ("--config", config)), "--print_config"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as finished:
        RetrievalCLI(args=args)
    assert finished.value.code in (0, None)
    return yaml.safe_load(out.getvalue())


def composition(row: str) -> list[str]:
    """The config files a row's header names: `# lit-retrieval fit --config A \\` continued on the
    following comment lines while they end with a backslash."""
    lines = (ROOT / "configs" / "melon" / "rows" / f"{row}.yaml").read_text().splitlines()
    command = lines[0]
    for line in lines[1:]:
        if not command.endswith("\\"):
            break
        command = command[:-1] + " " + line.lstrip("# ")
    words = shlex.split(command.lstrip("# "))
    assert words[:2] == ["lit-retrieval", "fit"], command
    return [value for flag, value in zip(words, words[1:]) if flag == "--config"]


def flatten(config: Any, prefix: str = "") -> dict[str, Any]:
    """`{"a": {"b": [x]}}` -> `{"a.b[0]": x}`, for readable differences."""
    if isinstance(config, dict) and config:
        items = [(f"{prefix}.{key}" if prefix else key, value) for key, value in config.items()]
    elif isinstance(config, list) and config:
        items = [(f"{prefix}[{i}]", value) for i, value in enumerate(config)]
    else:
        return {prefix: config}
    return {k: v for key, value in items for k, v in flatten(value, key).items()}


def differences(before: dict[str, Any], after: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """`{key: (before, after)}` for every flattened key whose value differs."""
    flat_before, flat_after = flatten(before), flatten(after)
    keys = set(flat_before) | set(flat_after)
    pairs = {key: (flat_before.get(key, "<absent>"), flat_after.get(key, "<absent>")) for key in keys}
    return {key: pair for key, pair in sorted(pairs.items()) if pair[0] != pair[1]}


def test_the_rows_are_todays_rows():
    rows = sorted(p.stem for p in (ROOT / "configs" / "melon" / "rows").glob("*.yaml"))
    assert len(ROWS) == 19 and rows == ROWS


def test_every_part_is_used_by_a_row():
    parts = {str(p.relative_to(ROOT)) for p in (ROOT / "configs" / "melon").rglob("*.yaml")}
    used = {config for row in ROWS for config in composition(row)}
    assert used == parts


@pytest.mark.parametrize("row", ROWS)
def test_a_composed_row_resolves_to_the_recorded_config(row, monkeypatch):
    monkeypatch.chdir(ROOT)
    composed = resolve(composition(row))
    recorded = resolve([str(FIXTURES / f"{row}.json")])
    assert differences(recorded, composed) == changed(row)


# MELON Tab. 4 compares each baseline with its +MEA row: the two must train and test on the same videos, and
# differ in the MEA loss only. MEA applies to the videos that have a partial query (configs/melon/objectives/mea.yaml).
TAB4 = load_plan(ROOT / "configs" / "plans" / "melon_tab4.yaml")
TAB4_TWINS = [row.name for row in TAB4.rows if TAB4.row(f"{row.name}_mea") is not None]
ONE_EVENT_TRAIN_VIDEO = {"anet": "v_One1Sent2Ab", "didemo": "77@N01_123_ffee"}


@pytest.fixture
def data_roots(tmp_path) -> dict[str, Path]:
    """The ActivityNet and DiDeMo fixtures, each with a one-event training video: DiDeMo's
    `77@N01_123_ffee` has one description; ActivityNet's fixture gets a one-sentence video."""
    anet = tmp_path / "activitynet"
    shutil.copytree(ROOT / "tests" / "fixtures" / "activitynet", anet)
    train = json.loads((anet / "train.json").read_text())
    train["v_One1Sent2Ab"] = {"duration": 30.0, "timestamps": [[0.0, 30.0]], "sentences": ["A dog runs on a beach."]}
    (anet / "train.json").write_text(json.dumps(train))
    return {"anet": anet, "didemo": ROOT / "tests" / "fixtures" / "didemo"}


def plan_row_config(plan: Plan, name: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The fit config `lit-retrieval grid` resolves for the plan's row `name` (its configs and overrides)."""
    row = plan.row(name)
    assert row is not None, name
    return resolved_training_config(
        row.configs, override_args({**row.overrides, **(overrides or {})}), f"{plan.path}: {name}"
    )


def video_ids(config: dict[str, Any]) -> dict[str, list[str]]:
    """The video ids of every split of the config's data module, set up as `fit` sets it up."""
    module, name = config["data"]["class_path"].rsplit(".", 1)
    data = getattr(importlib.import_module(module), name)(**config["data"]["init_args"])
    data.setup()
    return {role: sorted(r.video_id for r in dataset.records) for role, dataset in data.datasets.items()}


@pytest.mark.parametrize("name", TAB4_TWINS)
def test_a_tab4_mea_row_trains_and_tests_on_its_baselines_videos(name, data_roots, monkeypatch):
    monkeypatch.chdir(ROOT)
    root = str(data_roots[name.split("_")[0]])
    paths = {"data.init_args.annotation_dir": root, "data.init_args.video_root": root}
    baseline, mea = plan_row_config(TAB4, name, paths), plan_row_config(TAB4, f"{name}_mea", paths)
    assert baseline["model"]["init_args"]["mea"] is None and mea["model"]["init_args"]["mea"]["weight"] == 0.2
    ids = video_ids(baseline)
    assert video_ids(mea) == ids and set(ids) == {"train", "test"}
    assert ONE_EVENT_TRAIN_VIDEO[name.split("_")[0]] in ids["train"]


@pytest.mark.parametrize("plan", ["melon_tab2.yaml", "melon_tab4.yaml"])
def test_mea_rows_differ_from_their_baselines_in_the_loss_and_the_run_folder_only(plan, monkeypatch):
    monkeypatch.chdir(ROOT)
    table = load_plan(ROOT / "configs" / "plans" / plan)
    twins = [row.name for row in table.rows if table.row(f"{row.name}_mea") is not None]
    assert len(twins) == {"melon_tab2.yaml": 7, "melon_tab4.yaml": 4}[plan]
    for name in twins:
        changed = differences(plan_row_config(table, name), plan_row_config(table, f"{name}_mea"))
        loss = {key for key in changed if key.startswith("model.init_args.mea")}
        folders = {key for key, (a, b) in changed.items() if str(a).startswith("runs/") and str(b).startswith("runs/")}
        assert loss and set(changed) == loss | folders, (name, changed)


@pytest.mark.parametrize("plan", ["melon_tab2.yaml", "melon_tab3.yaml", "melon_tab4.yaml"])
def test_every_plan_row_clips_gradients_to_norm_1(plan, monkeypatch):
    """MELON supp. B.1 keeps each model's defaults for what it does not name; the official training
    loops of CLIP4Clip, X-CLIP, TS2-Net, UCoFiA, UATVR, PAU, TempMe and MeVTR all call
    `clip_grad_norm_(model.parameters(), 1.0)` (docs/melon.md)."""
    monkeypatch.chdir(ROOT)
    table = load_plan(ROOT / "configs" / "plans" / plan)
    for row in table.rows:
        trainer = plan_row_config(table, row.name)["trainer"]
        assert (trainer["gradient_clip_val"], trainer["gradient_clip_algorithm"]) == (1.0, "norm"), row.name
