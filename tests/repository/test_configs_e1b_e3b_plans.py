"""E1b and E3b (docs/experiments.md, issue 55) as `lit-retrieval grid` resolves their rows: each row differs from
its partner only in the factor the design names, and both train on the corpus fixed before the run."""

from __future__ import annotations

from pathlib import Path

import pytest

from lit_retrieval.grid.plan import load_plan
from lit_retrieval.grid.runs import row_config

ROOT = Path(__file__).resolve().parents[2]
PLANS = ROOT / "configs" / "plans"


@pytest.fixture(scope="module")
def at_root():
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(ROOT)  # the configs name their paths from the repository root
        yield


def configs(plan) -> dict[str, dict]:
    return {
        row.name: row_config(plan, next(r for r in plan.runs() if r.row is row), Path("runs/x"), {}, {})
        for row in plan.rows
    }


def flat(tree, prefix: str = "") -> dict[str, object]:
    if isinstance(tree, dict):
        return {k: v for key, value in tree.items() for k, v in flat(value, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): tree}


def differences(a: dict, b: dict) -> set[str]:
    fa, fb = flat(a), flat(b)
    return {k for k in fa.keys() | fb.keys() if fa.get(k) != fb.get(k) and not str(fa.get(k, "")).startswith("runs/")}


def test_e1b_rows_differ_in_positions_or_mea_weight_only(at_root):
    plan = load_plan(PLANS / "melon_long_queries.yaml")
    rows = configs(plan)
    for config in rows.values():
        data = config["data"]["init_args"]
        assert data["annotation"] == "data/synthetic_long/annotations.json"
        assert data["synthetic"]["events_per_video"] == [6, 8] and data["synthetic"]["train_fraction"] == 0.5
    model = {name: config["model"]["init_args"] for name, config in rows.items()}
    assert model["meanp_248"]["mea"] is None and model["meanp_77"]["mea"] is None
    assert [model[n]["mea"]["weight"] for n in ("mea02_248", "mea10_248")] == [0.2, 1.0]
    assert {(model[n]["mea"]["drop"], model[n]["mea"]["num_partial"]) for n in ("mea02_248", "mea10_248")} == {(2, 3)}
    assert differences(rows["meanp_248"], rows["meanp_77"]) == {"model.init_args.encoder.init_args.max_text_len"}
    for name in ("mea02_248", "mea10_248"):
        assert {k.split(".")[2] for k in differences(rows["meanp_248"], rows[name])} == {"mea"}
    comparison = next(c for c in plan.comparisons if c.name == "positions_long_queries")
    assert comparison.tokens == (78, None) and (comparison.a, comparison.b) == ("meanp_248", "meanp_77")


def test_e3b_rows_are_e3s_on_a_new_corpus_with_three_deciding_recalls(at_root):
    e3, e3b = load_plan(PLANS / "sali_control.yaml"), load_plan(PLANS / "sali_control_b.yaml")
    old, new = configs(e3), configs(e3b)
    assert list(old) == list(new)
    corpus = {"data.init_args.annotation", "data.init_args.shots.cache_dir"}
    for name in old:
        changed = differences(old[name], new[name])
        assert {k for k in changed if not k.startswith("data.init_args.synthetic")} == corpus, (name, changed)
        assert new[name]["data"]["init_args"]["annotation"] == "data/synthetic_rel_b/annotations.json"
        assert (
            new[name]["data"]["init_args"]["synthetic"]["seed"] != old[name]["data"]["init_args"]["synthetic"]["seed"]
        )
    assert [(c.k, c.queries, c.a, c.b) for c in e3b.comparisons] == [
        (k, "rel_multi", "sali_max", "meanp_longer") for k in (1, 5, 10)
    ]
