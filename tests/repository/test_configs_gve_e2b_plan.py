"""E2b (docs/experiments.md, issue 55) as `lit-retrieval grid` resolves it: the base trains every weight once on a
corpus of its own, and every LoRA row of configs/plans/gve_e2b.yaml starts from the checkpoint the base plan's run
writes, on E2's suite."""

from __future__ import annotations

from pathlib import Path

import pytest

from lit_retrieval.grid.plan import load_plan
from lit_retrieval.grid.runs import relocate, row_config

ROOT = Path(__file__).resolve().parents[2]
BASE = load_plan(ROOT / "configs" / "plans" / "gve_e2b_base.yaml")
ROWS = load_plan(ROOT / "configs" / "plans" / "gve_e2b.yaml")
E2 = load_plan(ROOT / "configs" / "plans" / "gve_curriculum_negatives.yaml")


def run_config(plan, run, runs_dir: str) -> dict:
    """The config.yaml `grid --out runs_dir` writes for `run`."""
    return relocate(row_config(plan, run, Path(runs_dir), {}, {}), run.folder(runs_dir), run.seed, plan.seed_keys)


@pytest.fixture(scope="module")
def at_root():
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(ROOT)  # the configs name their paths from the repository root
        yield


@pytest.fixture(scope="module")
def base(at_root):
    (run,) = BASE.runs()
    return run, run_config(BASE, run, "runs/gve_e2b_base")


def test_the_base_trains_every_weight_on_a_corpus_of_its_own(base):
    _, config = base
    embedder, data = config["model"]["init_args"]["embedder"], config["data"]["init_args"]
    assert embedder["lora"] is None and embedder["full_training"] is True and embedder["base_checkpoint"] is None
    assert (data["sampling"], data["hard_negatives"], data["steps_per_epoch"]) == ("uniform", False, 40)
    assert config["trainer"]["max_epochs"] == 10
    paths = {task["path"] for task in data["tasks"]}
    assert len(paths) == 5 and all(p.startswith("data/gve_e2b_base/tasks/train/") for p in paths)
    assert BASE.uvrb_tasks == "data/gve_e2b_base/tasks/eval/tasks.yaml" != E2.uvrb_tasks


def test_every_lora_row_starts_from_the_checkpoint_the_base_run_writes(base, at_root):
    run, config = base
    checkpoint = next(c for c in config["trainer"]["callbacks"] if c["class_path"].endswith("ModelCheckpoint"))
    written = Path(checkpoint["init_args"]["dirpath"]) / "last.ckpt"
    assert written == run.folder("runs/gve_e2b_base") / "checkpoints" / "last.ckpt"
    assert [r.name for r in ROWS.rows] == [r.name for r in E2.rows] and ROWS.comparisons == E2.comparisons
    for row_run in ROWS.runs():
        rows = run_config(ROWS, row_run, "runs/gve_e2b")
        e2 = run_config(E2, next(r for r in E2.runs() if (r.row.name, r.seed) == (row_run.row.name, row_run.seed)), "x")
        embedder = rows["model"]["init_args"]["embedder"]
        assert Path(embedder["base_checkpoint"]) == written and embedder["model_path"] == "runs/tiny_qwen_e2b"
        assert embedder["lora"] == e2["model"]["init_args"]["embedder"]["lora"] and not embedder["full_training"]
        assert rows["data"] == e2["data"] and ROWS.uvrb_tasks == E2.uvrb_tasks
