"""A grid's state files as a careless user or a crash leaves them (issues 24 and 28): `report` over a
damaged grid.json, done.json or metrics file, and a plan that is not UTF-8, ends in one line
(`lit-retrieval report: PATH: reason`, exit 2), never a traceback; `grid` trusts a done.json only
while what it names exists, and runs a run folder in one process at a time (its lock)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from lit_retrieval.cli import main
from lit_retrieval.commands import run_command
from lit_retrieval.grid.runs import RunLock, status
from lit_retrieval.launch.queue import SlurmQueue
from lit_retrieval.locking import OutputLocked


@pytest.fixture
def finished(tmp_path: Path) -> Path:
    """A runs folder of a one-row, two-seed plan whose runs finished with known metrics."""
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"seeds": [0, 1], "metrics": ["t2v/R@1"], "rows": [{"name": "a", "configs": []}]}))
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "grid.json").write_text(json.dumps({"plan": str(plan)}))
    for seed, value in ((0, 40.0), (1, 44.0)):
        run = runs / "a" / f"seed{seed}"
        (run / "logs").mkdir(parents=True)
        (run / "logs" / "metrics.json").write_text(json.dumps({"test": {"t2v/R@1": value}}))
        (run / "done.json").write_text(json.dumps({"metrics": "logs/metrics.json"}))
    return runs


def report_error(runs: Path, capsys) -> str:
    """The one stderr line of `lit-retrieval report RUNS` (exit status 2)."""
    with pytest.raises(SystemExit) as exit_:
        main(["report", str(runs), "--out", str(runs.parent / "report")])
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_report_of_whole_runs_is_mean_and_sample_std(finished, capsys):
    assert run_command("report", [str(finished), "--out", str(finished.parent / "report")]) == 0
    assert "| a | 2/2 | 42.00 ± 2.83 |" in (finished.parent / "report" / "report.md").read_text()


@pytest.mark.parametrize(
    ("file", "content", "reason"),
    [
        ("grid.json", "", "empty grid.json"),
        ("grid.json", '{"plan": "pl', "grid.json is not valid JSON"),
        ("grid.json", "[1, 2]", "grid.json must be a JSON object, got a list"),
        ("grid.json", '{"title": "x"}', r"grid.json names no plan"),
        ("a/seed1/done.json", "", "empty done.json"),
        ("a/seed1/done.json", '{"metrics": "logs/metr', "done.json is not valid JSON"),
        ("a/seed1/done.json", '["logs/metrics.json"]', "done.json must be a JSON object, got a list"),
        ("a/seed1/done.json", "{}", "names no metrics file"),
        ("a/seed1/done.json", '{"metrics": "logs/gone.json"}', "names metrics logs/gone.json that is gone"),
        ("a/seed1/logs/metrics.json", "", "empty metrics file"),
        ("a/seed1/logs/metrics.json", '{"test": {"t2v/R@1": 4', "metrics file is not valid JSON"),
        ("a/seed1/logs/metrics.json", "[]", "metrics file must be a JSON object, got a list"),
        ("a/seed1/logs/metrics.json", '{"test": [44.0]}', "'test' must be a JSON object of metrics"),
        ("a/seed1/logs/metrics.json", b"\xff\xfe{}", "metrics file is not UTF-8"),
    ],
)
def test_damaged_state_files_are_one_line_errors_naming_the_file(finished, capsys, file, content, reason):
    path = finished / file
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    line = report_error(finished, capsys)
    assert line.startswith(f"lit-retrieval report: {path}: ") and reason in line.split(f"{path}: ", 1)[1]
    assert not (finished.parent / "report").exists()


def test_a_plan_that_is_not_utf8_is_one_line(finished, capsys):
    plan = Path(json.loads((finished / "grid.json").read_text())["plan"])
    plan.write_bytes(b"seeds: [0]\nrows: [{name: caf\xe9}]\n")
    assert report_error(finished, capsys) == f"lit-retrieval report: {plan}: the plan is not UTF-8 text (byte 28)"


def test_a_done_json_is_trusted_only_while_its_metrics_and_checkpoint_exist(finished):
    run = finished / "a" / "seed0"
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    (run / "done.json").write_text(json.dumps({"metrics": "logs/metrics.json", "checkpoint": "checkpoints/last.ckpt"}))
    assert status(run) == "done"
    (run / "checkpoints" / "last.ckpt").unlink()
    assert status(run) == "pending"
    (run / "done.json").write_text(json.dumps({"metrics": "logs/metrics.json"}))
    assert status(run) == "done"
    (run / "logs" / "metrics.json").unlink()
    assert status(run) == "pending"
    (run / "done.json").write_text('{"metr')
    assert status(run) == "pending"


def test_one_process_runs_a_run_folder_at_a_time(finished, capsys):
    """A second writer of a run folder (another `grid --task`, a `--local` run) is refused in one line
    while the first holds the folder; nothing of the run is touched."""
    plan = json.loads((finished / "grid.json").read_text())["plan"]
    run = finished / "a" / "seed1"
    (run / "done.json").unlink()
    (run / "run.json").write_text(json.dumps({"fit": ["fit", "--config", "missing.yaml"], "evaluate": ["test"]}))
    before = sorted(p.name for p in run.iterdir())
    with RunLock(run):
        with pytest.raises(SystemExit) as exit_:
            main(["grid", plan, "--out", str(finished), "--task", "1"])
        assert exit_.value.code == 2
        line = capsys.readouterr().err.strip()
        assert line.startswith(f"lit-retrieval grid: {run}: being written by another process") and "\n" not in line
        with pytest.raises(OutputLocked):
            RunLock(run).acquire()
    assert sorted(p.name for p in run.iterdir() if p.name != ".run.lock.guard") == before


def test_a_requeued_array_task_takes_over_its_own_earlier_lock(finished, monkeypatch, tmp_path):
    """Slurm requeues an array task (maybe on another node); its earlier attempt's lock, held in
    the name of the same JOB_TASK, must not keep it out. The lock of a task that squeue still lists
    does; that of a task Slurm no longer holds (cancelled on another node) does not."""
    run = finished / "a" / "seed0"
    squeue = tmp_path / "bin" / "squeue"
    squeue.parent.mkdir()
    squeue.write_text("#!/bin/bash\necho 41_0; echo 41_1\n")
    squeue.chmod(0o755)
    monkeypatch.setenv("PATH", f"{squeue.parent}:{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "41")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "0")
    holder = {"host": "node-elsewhere", "pid": 1, "command": "lit-retrieval grid ...", "slurm": "41_0"}
    (run / ".run.lock").write_text(json.dumps(holder))
    with RunLock(run, SlurmQueue()) as lock:
        assert lock.holder["slurm"] == "41_0"
    (run / ".run.lock").write_text(json.dumps({**holder, "slurm": "41_1"}))
    with pytest.raises(OutputLocked, match="node-elsewhere"):
        RunLock(run, SlurmQueue()).acquire()
    squeue.write_text("#!/bin/bash\necho 41_0\n")  # task 1 was cancelled
    with RunLock(run, SlurmQueue()) as lock:
        assert lock.holder["slurm"] == "41_0"
