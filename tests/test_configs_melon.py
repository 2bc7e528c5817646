"""MELON rows composed from parts resolve to the configs the 19 per-row files used to give.

Each row file under `configs/melon/rows/` names its composition on its first lines (the command a
user runs). For every row, the composition and the row's recorded config from before the split
are parsed with the real `RetrievalCLI` parser and the two resolved configs must be equal;
defaults come from the same parser on both sides, so a changed default elsewhere does not break
the comparison. The record `tests/fixtures/melon_resolved/<row>.json` holds the values the parser
resolved from the old single file `configs/melon/<row>.yaml` (as of commit 01f26ac), restricted to
the keys (and list items) that file set; when it was written, parsing the record alone gave the
same complete config as parsing the old file. The evaluation options have since moved, by name
only, under `model.init_args.evaluation` in the records too. The only intended difference is listed in
`CHANGED` (the TempMe rows' learning rate, MELON supp. B.1).
"""

from __future__ import annotations

import contextlib
import io
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from lit_retrieval.retrieval_cli import RetrievalCLI

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "melon_resolved"
ROWS = sorted(p.stem for p in FIXTURES.glob("*.json"))
# row -> {key: (recorded, composed)}: the intended changes since the per-row files.
# TempMe's adapters and frame positions: TempMe's own 6e-4 -> MELON supp. B.1's 1e-4 for every
# module but Long-CLIP (issue 16, item 10).
TEMPME_LR = {"model.init_args.optim.head_lr": (6.0e-4, 1.0e-4)}
CHANGED: dict[str, dict[str, tuple[Any, Any]]] = {"melon_tempme": TEMPME_LR, "melon_tempme_mea": TEMPME_LR}


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
    assert differences(recorded, composed) == CHANGED.get(row, {})
