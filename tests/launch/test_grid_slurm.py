"""`lit-retrieval grid --slurm` under a REAL Slurm (`tests/launch/local_cluster.sh`, tests marked `slurm`): a
one-row x two-seed plan of a tiny CPU config whose runs train and test on 2 ranks each (srun steps,
DDP over gloo), submitted as ONE array with the project's slurm/grid.sbatch:

- every array task evaluates once (one `test` step over its 2 ranks; the task process alone runs
  it, writes done.json and judges what is left), and `report` equals mean / sample std computed
  here from the runs' own metrics.json files;
- a second `grid --slurm` while the array is queued or running submits nothing (slurm.json +
  squeue), so no run runs twice;
- an array task killed with `scancel` while it trains is run again by the next `grid --slurm`
  (its stale run lock is taken over), and only that one.

The node has 2 CPUs: one task (2 ranks x 1 CPU) runs at a time, behind other tests' jobs.
"""

from __future__ import annotations

import csv
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from helpers.fit_configs import base_trainer, clean_launch_env, clip_fit_config
from lit_retrieval.commands import run_command

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parent.parent  # the environment running the tests; the jobs activate it
WAIT = 900  # seconds a job may take, queueing behind other tests' jobs on 2 CPUs included
METRICS = ["t2v/R@1", "v2t/R@1", "t2v/MnR"]


def queued(job: str) -> list[str]:
    """`JOB_TASK STATE` of the array tasks Slurm still holds."""
    out = subprocess.run(["squeue", "-h", "-r", "-j", job, "-o", "%i %T"], capture_output=True, text=True).stdout
    return out.split("\n")[:-1]


def wait(what: str, done, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"gave up waiting for {what} after {timeout} s"
        time.sleep(1)


def jobs(runs: Path) -> list[str]:
    return [json.loads(line)["job"] for line in (runs / "slurm" / "submissions.jsonl").read_text().splitlines()]


def grid(*args: str) -> int:
    settings = ["ACCOUNT=test", "PARTITION=local", "CPUS_PER_TASK=1", "MEM=6G", "TIME=15", f"VENV={VENV}"]
    return run_command("grid", ["plan.yaml", "--out", "runs", "--slurm", "--set", *settings, *args])


def test_grid_array_with_two_ranks_per_task(slurm_cluster, tmp_path, tiny_clip, corpus, monkeypatch, capsys):
    started = time.monotonic()
    monkeypatch.chdir(tmp_path)
    env = clean_launch_env(str(ROOT / "tests"))  # sbatch exports it to the jobs: this checkout first
    env["PYTHONPATH"] = f"{ROOT}:{env['PYTHONPATH']}"
    for key in [k for k in os.environ if k not in env]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    base = clip_fit_config(
        tiny_clip,
        corpus,
        base_trainer(devices=2, max_epochs=2, train_batches=3),
        data={"min_events": 2, "num_workers": 0},
    )
    Path("base.yaml").write_text(yaml.safe_dump(base))
    plan = {"title": "grid on Slurm", "seeds": [0, 1], "configs": ["base.yaml"], "metrics": METRICS}
    Path("plan.yaml").write_text(yaml.safe_dump({**plan, "rows": [{"name": "meanp", "label": "meanP"}]}))
    runs = Path("runs")

    assert grid() == 0
    script = next((runs / "slurm").glob("grid-*.sbatch")).read_text()
    for line in ("--array=0-1%64", "--nodes=1", "--ntasks-per-node=2", "--gres=none", "--cpus-per-task=1"):
        assert f"#SBATCH {line}\n" in script, line
    [job] = jobs(runs)
    assert len(queued(job)) == 2

    capsys.readouterr()
    assert grid() == 0  # the array is queued or running: nothing is submitted again
    assert "2 queued or running in Slurm" in capsys.readouterr().out and jobs(runs) == [job]

    killed = runs / "meanp" / "seed0"
    wait(
        "task 0 to train",
        lambda: f"{job}_0 RUNNING" in queued(job) and "lit-retrieval fit" in _text(killed / "fit.log"),
    )
    time.sleep(3)
    subprocess.run(["scancel", f"{job}_0"], check=True)
    wait(f"job {job} to end", lambda: not queued(job))
    assert not (killed / "done.json").exists() and (runs / "meanp" / "seed1" / "done.json").is_file()

    assert grid() == 0  # the killed run, and only it, is submitted again
    first, again = jobs(runs)
    assert "#SBATCH --array=0%64\n" in sorted((runs / "slurm").glob("grid-*.sbatch"))[-1].read_text()
    wait(f"job {again} to end", lambda: not queued(again))

    values = {metric: [] for metric in METRICS}
    for seed in (0, 1):
        run = runs / "meanp" / f"seed{seed}"
        out = (runs / "slurm").glob(f"*_{seed}.out")
        assert (run / "done.json").is_file(), [p.read_text()[-2000:] for p in out]
        tests = [line for line in (run / "test.log").read_text().splitlines() if line.startswith("$ ")]
        assert tests == [tests[0]] and tests[0].startswith("$ srun --kill-on-bad-exit=1 lit-retrieval test ")
        assert "MEMBER: 2/2" in (run / "fit.log").read_text()  # both ranks trained (DDP over gloo)
        fits = (run / "fit.log").read_text().count("\n$ srun --kill-on-bad-exit=1 lit-retrieval fit ")
        assert fits == (2 if seed == 0 else 1)
        found = [p for p in run.rglob("metrics.json") if "test" in json.loads(p.read_text())]
        assert len(found) == 1
        for metric in METRICS:
            values[metric].append(json.loads(found[0].read_text())["test"][metric])

    assert run_command("report", [str(runs), "--out", "report"]) == 0
    table = {r["metric"]: r for r in csv.DictReader(Path("report/report.csv").open())}
    for metric in METRICS:
        assert float(table[metric]["mean"]) == pytest.approx(statistics.mean(values[metric]), abs=1e-12)
        assert float(table[metric]["std_ddof1"]) == pytest.approx(statistics.stdev(values[metric]), abs=1e-12)
    print(f"grid under Slurm: jobs {first} (array 0-1) and {again} (array 0), {time.monotonic() - started:.0f} s")


def _text(path: Path) -> str:
    return path.read_text() if path.is_file() else ""
