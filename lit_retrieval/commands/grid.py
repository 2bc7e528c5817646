"""`lit-retrieval grid`: run a plan (a paper table: rows x seeds) locally or as one Slurm job array.

    lit-retrieval grid configs/plans/melon_tab2.yaml --out runs/melon_tab2 --dry-run
    lit-retrieval grid configs/plans/melon_tab2.yaml --out runs/melon_tab2 --slurm --set ACCOUNT=proj PARTITION=a100 \
        --override model.init_args.encoder.init_args.pretrained=/models/longclip-B.pt
    lit-retrieval grid configs/plans/synthetic_mea.yaml --out runs/synthetic_mea --local
    lit-retrieval report runs/melon_tab2 --out reports/melon_tab2

Each row x seed runs in RUNS_DIR/<row>/seed<k>/ with its resolved config (config.yaml); re-running
the command skips finished runs (done.json) and runs or submits only the missing and failed ones.
`--local` runs them one after another here; `--slurm` renders slurm/grid.sbatch with one array task
per unfinished run (requeue on SIGUSR1 included) and submits it with `sbatch`. Nodes, ranks and GPUs
come from each run's config (trainer.num_nodes, devices, accelerator); --set may fill what a config
leaves open, never contradict it (refused). Runs whose array task Slurm still holds (slurm.json +
squeue) are left alone, and one process at a time runs a run folder (its .run.lock).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from lit_retrieval.commands.slurm import render_template, template_variables
from lit_retrieval.errors import UsageError
from lit_retrieval.grid.plan import Plan, Run, load_plan
from lit_retrieval.grid.runs import execute, prepare, row_config, status, write_atomic
from lit_retrieval.grid.slurm import Resources, record_submission, resources, submitted_and_queued
from lit_retrieval.locking import OutputLocked
from lit_retrieval.progress import Progress, add_progress_arguments, configure_from
from lit_retrieval.shipped import shipped_templates

TEMPLATE = shipped_templates()["grid.sbatch"]  # slurm/grid.sbatch, shipped as package data
SUBMITTED = re.compile(r"Submitted batch job (\d+)")


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(flag, f"expected KEY=VALUE, got {item!r}")
        pairs[key] = value
    return pairs


def _array_spec(indices: list[int]) -> str:
    """Task ids as Slurm's --array list, consecutive ids as ranges: [0, 1, 2, 5] -> '0-2,5'."""
    parts, start = [], indices[0]
    for prev, cur in zip(indices, [*indices[1:], None]):
        if cur != prev + 1:
            parts.append(f"{start}-{prev}" if prev > start else f"{prev}")
            start = cur
    return ",".join(parts)


def _record(runs_dir: Path, plan: Plan) -> None:
    """RUNS_DIR/grid.json names the plan, so `report RUNS_DIR` finds its rows, seeds and metrics."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    record = {"plan": str(plan.path.resolve()), "title": plan.title}
    write_atomic(runs_dir / "grid.json", json.dumps(record, indent=2))


def _submit(
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
        "ARRAY": f"{_array_spec([r.index for r in pending])}%{max_parallel}",
    }
    try:
        script = render_template(TEMPLATE.read_text(), settings)
    except ValueError as err:
        raise UsageError(str(TEMPLATE), str(err)) from None
    (runs_dir / "slurm").mkdir(parents=True, exist_ok=True)
    stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{group.nodes}x{group.tasks_per_node}"
    job = runs_dir / "slurm" / f"grid-{stamp}{'-after' if after else ''}.sbatch"
    job.write_text(script)
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


def _submit_all(plan: Plan, runs_dir: Path, groups: dict[Resources, list[Run]], queued: dict[int, str], **kw) -> int:
    """The training runs' arrays, then those of the rows that `evaluate` them, which wait for the
    training jobs just submitted or still queued (a task whose trained run then failed fails too,
    and a later `grid` submits it again)."""
    codes, training_jobs = [], {task.split("_")[0] for task in queued.values()}
    for evaluating in (False, True):
        for group, members in groups.items():
            chosen = [r for r in members if (r.row.evaluates is not None) == evaluating]
            if chosen:
                code, job = _submit(
                    plan, runs_dir, chosen, group=group, after=sorted(training_jobs) if evaluating else [], **kw
                )
                codes.append(code)
                if job and not evaluating:
                    training_jobs.add(job)
    return max(codes, default=0)


def _slurm_groups(
    plan: Plan, runs: list[Run], runs_dir: Path, extra: dict, values: dict[str, str], resolved: dict
) -> dict[Resources, list[Run]]:
    """The runs grouped by what they ask Slurm for (one array per group); a row's config that leaves
    devices or nodes open gets the value it will run with (written into its config.yaml)."""
    default_gpus = int(template_variables(TEMPLATE.read_text())["GPUS"] or 1)
    groups: dict[Resources, list[Run]] = {}
    for run_ in runs:
        config = row_config(plan, run_, runs_dir, extra, resolved)
        group, fill = resources(config, values, default_gpus, f"{plan.path}: row {run_.row.name!r}")
        if config is not None and fill:
            config.setdefault("trainer", {}).update(fill)
        groups.setdefault(group, []).append(run_)
    return groups


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="lit-retrieval grid", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("plan", help="plan YAML (configs/plans/*.yaml)")
    parser.add_argument("--out", required=True, help="runs folder: RUNS_DIR/<row>/seed<k>/")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--local", action="store_true", help="run here, one run after another (default)")
    where.add_argument("--slurm", action="store_true", help="submit one Slurm job array (slurm/grid.sbatch)")
    where.add_argument("--task", type=int, help=argparse.SUPPRESS)  # one array task (what grid.sbatch runs)
    parser.add_argument("--launcher", default="", help=argparse.SUPPRESS)  # --task: starts fit/test (srun ...)
    parser.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="NAME=VALUE",
        help="slurm/grid.sbatch variables (ACCOUNT, PARTITION, GPUS, TIME, ...)",
    )
    parser.add_argument(
        "--override",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="config keys for every row, e.g. model.init_args.encoder.init_args.pretrained=/models/longclip-B.pt",
    )
    parser.add_argument("--max-parallel", type=int, default=64, help="--slurm: array tasks running at once")
    parser.add_argument(
        "--dry-run", action="store_true", help="resolve every row's configs and list the runs; write and run nothing"
    )
    parser.add_argument("--sbatch", default="sbatch", help=argparse.SUPPRESS)
    add_progress_arguments(parser)
    args = parser.parse_args(argv)
    configure_from(args)
    plan = load_plan(args.plan)
    runs_dir = Path(args.out)
    extra = {k: yaml.safe_load(v) for k, v in _pairs(args.override, "--override").items()}
    values = _pairs(args.set, "--set")
    runs = plan.runs()
    if args.task is not None:
        if not 0 <= args.task < len(runs):
            raise UsageError(args.plan, f"task {args.task} out of range: the plan has {len(runs)} runs")
        signal.signal(signal.SIGUSR1, lambda *_: None)  # Slurm's requeue signal is for the fit below, not this process
        folder = runs[args.task].folder(runs_dir)
        if not (folder / "run.json").exists():
            raise UsageError(
                str(folder),
                "not prepared: `lit-retrieval grid PLAN --out RUNS_DIR --slurm` writes it before submitting",
            )
        return execute(folder, shlex.split(args.launcher))
    queued = submitted_and_queued({r.index: r.folder(runs_dir) for r in runs}) if not args.dry_run else {}
    pending = [r for r in runs if status(r.folder(runs_dir)) != "done" and r.index not in queued]
    print(
        f"{plan.title}: {len(runs)} runs ({len(plan.rows)} rows, seeds {plan.seeds}), "
        f"{sum(status(r.folder(runs_dir)) == 'done' for r in runs)} finished"
        + (f", {len(queued)} queued or running in Slurm (left alone: {sorted(set(queued.values()))})" if queued else "")
    )
    resolved: dict = {}
    groups = _slurm_groups(plan, pending, runs_dir, extra, values, resolved) if args.slurm else {}
    for run_ in runs:
        steps = prepare(plan, run_, runs_dir, extra, resolved, write=not args.dry_run and run_ in pending)
        state = "queued or running in Slurm" if run_.index in queued else status(run_.folder(runs_dir))
        if args.dry_run:
            shown = " && ".join(f"lit-retrieval {' '.join(s)}" for s in (steps["fit"], steps["evaluate"]) if s)
            print(f"[{run_.index}] {run_.row.name} seed {run_.seed}: {state}\n    {shown}")
    if args.dry_run or not pending:
        return 0
    _record(runs_dir, plan)
    if args.slurm:
        return _submit_all(
            plan, runs_dir, groups, queued, values=values, sbatch=args.sbatch, max_parallel=args.max_parallel
        )
    failures = 0
    counts = {"failed": 0, "left_alone": 0}
    with Progress("grid", len(runs), "runs", completed=len(runs) - len(pending), counts=counts, heartbeat=True) as bar:
        for run_ in pending:
            print(f"[{run_.index}] {run_.row.name} seed {run_.seed} ...", flush=True)
            try:
                code = execute(run_.folder(runs_dir))
            except OutputLocked as locked:
                print(f"[{run_.index}] {run_.row.name} seed {run_.seed}: left alone, {locked}", flush=True)
                bar.advance(left_alone=1)
                continue
            print(
                f"[{run_.index}] {run_.row.name} seed {run_.seed}: {'done' if code == 0 else f'failed ({code})'}",
                flush=True,
            )
            failures += code != 0
            bar.advance(failed=int(code != 0))
    return 1 if failures else 0
