"""Rows that `evaluate` another row's checkpoint (SALI Tab. 3: the operator is switched at inference on
the trained model, Sec. 3): no fit of their own, their test options applied to the trained weights,
and under Slurm their array waits for the training array."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from helpers.fit_configs import base_trainer, clip_fit_config, run_grid_here
from lit_retrieval.commands import run_command
from lit_retrieval.errors import UsageError
from lit_retrieval.grid.plan import load_plan
from helpers.fake_slurm import fake_slurm

ROOT = Path(__file__).resolve().parents[2]


def write_plan(folder: Path, rows: list[dict], seeds: list[int] = (0,)) -> Path:
    path = folder / "plan.yaml"
    plan = {"title": "evaluates", "seeds": list(seeds), "configs": ["base.yaml"], "metrics": ["t2v/R@1"], "rows": rows}
    path.write_text(yaml.safe_dump(plan))
    return path


TRAINED = {"name": "meanp", "label": "meanP"}
PESSIMISTIC = {
    "name": "meanp_pessimistic",
    "evaluates": "meanp",
    "test_overrides": {"model.init_args.evaluation.ties": "pessimistic"},
}


@pytest.fixture(scope="module")
def work(tmp_path_factory, tiny_clip, corpus):
    folder = tmp_path_factory.mktemp("evaluates")
    base = clip_fit_config(tiny_clip, corpus, base_trainer(devices=1, max_epochs=1, train_batches=2))
    (folder / "base.yaml").write_text(yaml.safe_dump(base))
    write_plan(folder, [TRAINED, PESSIMISTIC])
    return folder


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([PESSIMISTIC, TRAINED], r"rows\[0\] \(meanp_pessimistic\): 'evaluates' must name an earlier row that trains"),
        ([TRAINED, {**PESSIMISTIC, "configs": ["x.yaml"]}], r"trains nothing; drop \['configs'\]"),
        ([TRAINED, {**PESSIMISTIC, "seeds": [0, 5]}], r"seeds \[0, 5\] not all trained by 'meanp'"),
        ([TRAINED, PESSIMISTIC, {"name": "again", "evaluates": "meanp_pessimistic"}], "an earlier row that trains"),
    ],
)
def test_plan_errors_for_evaluating_rows(tmp_path, rows, message):
    with pytest.raises(UsageError, match=message):
        load_plan(write_plan(tmp_path, rows))


def test_an_evaluating_row_tests_the_trained_rows_checkpoint_with_its_own_options(work, tmp_path):
    local = tmp_path / "local"
    shutil.copytree(work, local)
    assert run_grid_here(local, ["plan.yaml", "--out", "runs", "--local"]) == 0
    trained, evaluating = local / "runs" / "meanp" / "seed0", local / "runs" / "meanp_pessimistic" / "seed0"
    steps = json.loads((evaluating / "run.json").read_text())
    assert steps["fit"] is None and Path(steps["source"]) == Path("runs/meanp/seed0")
    assert not list(evaluating.rglob("*.ckpt")) and not (evaluating / "fit.log").exists()  # nothing trained here
    done = json.loads((evaluating / "done.json").read_text())
    assert (evaluating / done["checkpoint"]).resolve() == (trained / "checkpoints" / "last.ckpt").resolve()
    tested = yaml.safe_load((evaluating / "logs" / "test" / "config.yaml").read_text())
    assert tested["model"]["init_args"]["evaluation"]["ties"] == "pessimistic"
    trained_test = yaml.safe_load((trained / "logs" / "test" / "config.yaml").read_text())
    assert (trained_test["model"]["init_args"]["evaluation"] or {}).get("ties") != "pessimistic"
    assert "test" in json.loads((evaluating / done["metrics"]).read_text())


def test_an_evaluating_row_before_its_training_fails_and_is_listed_again(work, tmp_path, monkeypatch):
    """Under Slurm the dependency orders the arrays; a task that starts anyway (its training failed) fails."""
    monkeypatch.chdir(work)
    write_plan(tmp_path, [TRAINED, PESSIMISTIC])
    assert run_command("grid", ["plan.yaml", "--out", str(tmp_path / "runs"), "--dry-run"]) == 0
    shutil.copy(work / "base.yaml", tmp_path / "base.yaml")
    monkeypatch.chdir(tmp_path)
    from lit_retrieval.grid.runs import execute, prepare

    plan = load_plan(tmp_path / "plan.yaml")
    run = plan.runs()[1]
    prepare(plan, run, Path("runs"), {}, {})
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    assert execute(run.folder(Path("runs"))) == 1
    failed = json.loads((run.folder(Path("runs")) / "failed.json").read_text())
    assert "is not fitted yet" in failed["step"]
    assert failed["slurm_job"] == "77"  # how grid.sbatch finds the task's run folder (issue 56)


def test_slurm_submits_the_evaluating_rows_after_the_training_array(work, tmp_path, monkeypatch):
    copy = tmp_path / "work"
    shutil.copytree(work, copy)
    monkeypatch.chdir(copy)
    monkeypatch.setenv("PATH", fake_slurm(tmp_path)["PATH"])
    assert run_command("grid", ["plan.yaml", "--out", "runs", "--slurm", "--set", "ACCOUNT=a", "PARTITION=p"]) == 0
    calls = (tmp_path / "sbatch.log").read_text().splitlines()
    assert len(calls) == 2
    training, evaluating = (Path(call.split()[-1]).read_text() for call in calls)
    assert "#SBATCH --array=0%64\n" in training and "--dependency" not in calls[0]
    assert "#SBATCH --array=1%64\n" in evaluating and calls[1].split()[0] == "--dependency=afterany:777"


def test_sali_tab3_trains_once_per_training_setting_and_seed(monkeypatch):
    """Each training setting of SALI Tab. 3 (max, max+pen, OT, OT+pen) is one trained row; every
    other row tests one of them under its inference overlays only."""
    monkeypatch.chdir(ROOT)
    plan = load_plan(ROOT / "configs" / "plans" / "sali_tab3.yaml")
    rows = {row.name: row for row in plan.rows}
    trained = {name: row for name, row in rows.items() if row.trains and name != "cm_clip4clip"}
    settings = [tuple(row.configs) + tuple(sorted(row.overrides.items(), key=str)) for row in trained.values()]
    assert len(trained) == 4 and len(set(settings)) == 4
    expected = {  # (train, infer) -> the training setting it is tested on, as Tab. 3's rows read
        "max__max": "max__max",
        "max_pen__max": "max_pen__max",
        "max_pen__max_pen": "max_pen__max",
        "ot__ot": "ot__ot",
        "ot__max": "ot__ot",
        "ot_pen__ot": "ot_pen__ot",
        "ot_pen__max": "ot_pen__ot",
        "ot_pen__ot_pen": "ot_pen__ot",
    }
    assert {name: row.evaluates or name for name, row in rows.items() if name != "cm_clip4clip"} == expected
    for name, row in rows.items():
        if name == "cm_clip4clip":
            continue
        infer = name.split("__")[1]
        overlays = {Path(c).stem for c in row.test_configs}
        want = {"infer_ot" if infer.startswith("ot") else "infer_max"} | ({"infer_pen"} if "pen" in infer else set())
        assert overlays == want, name
        assert row.seeds == plan.seeds
