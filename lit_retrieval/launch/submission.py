"""A grid's runs submitted to Slurm as job arrays, and the runs a submitted array still holds.

`array_groups` groups a plan's pending runs by what they ask Slurm for (`Resources`: one array per
group); `submit_arrays` renders `grid.sbatch` for each group into `RUNS_DIR/slurm/` and submits it with
`sbatch`, the arrays of rows that `evaluate` a trained row after the training arrays (Slurm's
`afterany`). A submitted run is recognised by `slurm.json` in its folder (the array job id and task id
that `sbatch` answered) and by `squeue --array` still listing that `JOB_TASK` for this user, so a
second `grid --slurm` leaves queued, running and requeued runs alone (`submitted_and_queued`).
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from lit_retrieval.errors import InputError, UsageError
from lit_retrieval.grid.plan import Plan, Run
from lit_retrieval.grid.runs import RUN_FILE, execute, read_object, row_config, write_atomic
from lit_retrieval.launch.queue import SlurmQueue
from lit_retrieval.launch.resources import Resources, resources
from lit_retrieval.launch.templates import render_template, shipped_templates, template_variables, write_job_script

SUBMISSION = "slurm.json"
SBATCH = "sbatch"  # the submitting program (`grid --sbatch` names another, e.g. a test's fake)
SUBMITTED = re.compile(r"Submitted batch job (\d+)")


def grid_template() -> str:
    """The text of the shipped `grid.sbatch`, one array task per run."""
    return shipped_templates()["grid.sbatch"].read_text()


def array_spec(indices: list[int]) -> str:
    """Task ids as Slurm's --array list, consecutive ids as ranges: [0, 1, 2, 5] -> '0-2,5'."""
    parts, start = [], indices[0]
    for prev, cur in zip(indices, [*indices[1:], None]):
        if cur != prev + 1:
            parts.append(f"{start}-{prev}" if prev > start else f"{prev}")
            start = cur
    return ",".join(parts)


def array_groups(
    plan: Plan, runs: list[Run], runs_dir: Path, extra: dict, values: dict[str, str], resolved: dict
) -> dict[Resources, list[Run]]:
    """The runs grouped by what they ask Slurm for (one array per group); a row's config that leaves
    devices or nodes open gets the value it will run with (written into its config.yaml)."""
    default_gpus = int(template_variables(grid_template())["GPUS"] or 1)
    groups: dict[Resources, list[Run]] = {}
    for run_ in runs:
        config = row_config(plan, run_, runs_dir, extra, resolved)
        group, fill = resources(config, values, default_gpus, f"{plan.path}: row {run_.row.name!r}")
        if config is not None and fill:
            config.setdefault("trainer", {}).update(fill)
        groups.setdefault(group, []).append(run_)
    return groups


def submit_arrays(plan: Plan, runs_dir: Path, groups: dict[Resources, list[Run]], queued: dict[int, str], **kw) -> int:
    """The training runs' arrays, then those of the rows that `evaluate` them, which wait for the
    training jobs just submitted or still queued (a task whose trained run then failed fails too,
    and a later `grid` submits it again). `kw`: `submit_array`'s settings. The worst exit status."""
    codes, training_jobs = [], {task.split("_")[0] for task in queued.values()}
    for evaluating in (False, True):
        for group, members in groups.items():
            chosen = [r for r in members if (r.row.evaluates is not None) == evaluating]
            if chosen:
                after = sorted(training_jobs) if evaluating else []
                code, job = submit_array(plan, runs_dir, chosen, group=group, after=after, **kw)
                codes.append(code)
                if job and not evaluating:
                    training_jobs.add(job)
    return max(codes, default=0)


def submit_array(
    plan: Plan,
    runs_dir: Path,
    pending: list[Run],
    values: dict[str, str],
    sbatch: str,
    max_parallel: int,
    group: Resources,
    after: list[str],
) -> tuple[int, str | None]:
    """One array job of the `pending` runs, which all ask for `group`, started once the jobs `after`
    have ended (Slurm's `afterany`); slurm.json in each run folder. (exit status, job id)."""
    settings = {
        **group.variables(),
        **values,
        "PLAN": str(plan.path.resolve()),
        "RUNS_DIR": str(runs_dir.resolve()),
        "ARRAY": f"{array_spec([r.index for r in pending])}%{max_parallel}",
    }
    try:
        script = render_template(grid_template(), settings)
    except ValueError as err:
        raise UsageError("grid.sbatch", str(err)) from None
    (runs_dir / "slurm").mkdir(parents=True, exist_ok=True)
    stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{group.nodes}x{group.tasks_per_node}"
    job = runs_dir / "slurm" / f"grid-{stamp}{'-after' if after else ''}.sbatch"
    write_job_script(script, job)
    dependency = [f"--dependency=afterany:{':'.join(after)}"] if after else []
    done = subprocess.run([sbatch, *dependency, str(job)], capture_output=True, text=True)
    if done.returncode:
        print(f"lit-retrieval grid: {sbatch} {job} failed ({done.returncode}): {done.stderr.strip()}", file=sys.stderr)
        return 1, None
    match = SUBMITTED.search(done.stdout)
    job_id = match.group(1) if match else None
    for run_ in pending:
        record_submission(run_.folder(runs_dir), job_id, run_.index, job)
    with (runs_dir / "slurm" / "submissions.jsonl").open("a") as log:
        log.write(json.dumps({"job": job_id, "script": str(job), "array": settings["ARRAY"], "time": time.time()}))
        log.write("\n")
    waits = f", after job(s) {', '.join(after)}" if after else ""
    print(f"submitted {len(pending)} task(s) ({settings['ARRAY']}) as job {job_id or '?'}{waits}: {job}")
    return 0, job_id


def record_submission(folder: Path, job: str | None, task: int, script: Path) -> None:
    """slurm.json: the array task now submitted for the run in `folder`."""
    record = {"job": job, "task": task, "script": str(script), "time": time.time()}
    write_atomic(folder / SUBMISSION, json.dumps(record))


def submitted_and_queued(folders: dict[int, Path], squeue: str = "squeue") -> dict[int, str]:
    """{run index: JOBID_TASK} of the runs whose submitted array task Slurm still holds. squeue is
    asked only when some run has a submission record; an unreadable record counts as none."""
    records = {}
    for index, folder in folders.items():
        if (folder / SUBMISSION).is_file():
            try:
                record = read_object(folder / SUBMISSION, SUBMISSION)
            except InputError:
                continue
            if record.get("job"):
                records[index] = f"{record['job']}_{record.get('task', index)}"
    if not records:
        return {}
    queued = SlurmQueue(squeue).held_tasks()
    return {index: task for index, task in records.items() if task in queued}


def run_array_task(plan: Plan, runs: list[Run], task: int, runs_dir: Path, launcher: str) -> int:
    """One array task of `grid.sbatch` (`grid --task N`): the run prepared for task N, its steps started
    through `launcher` (`srun ...`); Slurm's requeue signal is for that fit, not this process."""
    if not 0 <= task < len(runs):
        raise UsageError(str(plan.path), f"task {task} out of range: the plan has {len(runs)} runs")
    signal.signal(signal.SIGUSR1, lambda *_: None)
    folder = runs[task].folder(runs_dir)
    if not (folder / RUN_FILE).exists():
        raise UsageError(
            str(folder), "not prepared: `lit-retrieval grid PLAN --out RUNS_DIR --slurm` writes it before submitting"
        )
    return execute(folder, shlex.split(launcher), SlurmQueue())
