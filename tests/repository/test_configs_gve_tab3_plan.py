"""GVE Tab. 3 (configs/plans/gve_tab3.yaml) as the CLI resolves each row: every row mines its hard
negatives at every epoch with Psi_t (GVE Sec. 3.3) and leaves Psi_1 unset, so a fit refuses to start
until `data.init_args.prober_path` is given; the rows without the curriculum keep its diet."""

from __future__ import annotations

import pytest

from lit_retrieval.grid.plan import load_plan
from lit_retrieval.grid.runs import override_args
from lit_retrieval.retrieval_cli import resolved_training_config

PLAN = load_plan("configs/plans/gve_tab3.yaml")


def callback_names(config: dict) -> list[str]:
    return [c["class_path"].rsplit(".", 1)[-1] for c in config["trainer"]["callbacks"]]


@pytest.mark.parametrize("row", PLAN.rows, ids=[r.name for r in PLAN.rows])
def test_every_row_mines_with_psi_t_and_needs_psi_1(row):
    config = resolved_training_config(row.configs, override_args(row.overrides), row.name)
    data = config["data"]["init_args"]
    names = callback_names(config)
    assert data["negative_mining"] == "prober" and "HardNegativeMining" in names
    assert data["prober_path"] is None  # refused at fit start until the plan's --override gives it
    curriculum = not row.name.startswith(("gve_s", "gve_i"))
    assert ("ModalityPyramid" in names) == curriculum
    if curriculum:
        pyramid = next(c for c in config["trainer"]["callbacks"] if c["class_path"].endswith("ModalityPyramid"))
        assert pyramid["init_args"]["size_exponent"] == 1.0  # the base diet n_k / B_k
    else:
        assert data["sampling"] == "equal_passes"  # the same base diet without exp(R_k / sigma)
    assert data["include_synthetic"] == (not row.name.startswith("gve_i"))


def test_the_plan_override_sets_psi_1_for_every_row(tmp_path):
    row = PLAN.row("gve_s_7b")
    config = resolved_training_config(
        row.configs, override_args({"data.init_args.prober_path": str(tmp_path)}), row.name
    )
    assert config["data"]["init_args"]["prober_path"] == str(tmp_path)
