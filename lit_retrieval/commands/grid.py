"""`lit-retrieval grid`: run a plan (a paper table: rows x seeds) locally or as one Slurm job array.

    lit-retrieval grid configs/plans/melon_tab2.yaml --out runs/melon_tab2 --dry-run
    lit-retrieval grid configs/plans/melon_tab2.yaml --out runs/melon_tab2 --slurm --set ACCOUNT=proj PARTITION=a100 \
        --override model.init_args.encoder.init_args.pretrained=/models/longclip-B.pt
    lit-retrieval grid configs/plans/melon_tab2.yaml --out runs/melon_tab2 --rows clip4clip clip4clip_mea \
        --config configs/strategy/deepspeed_zero2.yaml --slurm --set ACCOUNT=proj PARTITION=a100
    lit-retrieval grid configs/plans/synthetic_mea.yaml --out runs/synthetic_mea --local
    lit-retrieval report runs/melon_tab2 --out reports/melon_tab2

Each row x seed runs in RUNS_DIR/<row>/seed<k>/ with its resolved config (config.yaml); re-running
the command skips finished runs (done.json) and runs or submits only the missing and failed ones.
`--local` runs them one after another here; `--slurm` renders the shipped grid.sbatch with one array
task per unfinished run (requeue on SIGUSR1 included) and submits it with `sbatch`
(`lit_retrieval.launch.submission`). Nodes, ranks and GPUs come from each run's config
(trainer.num_nodes, devices, accelerator); --set may fill what a config leaves open, never
contradict it (refused). Runs whose array task Slurm still holds (slurm.json + squeue) are left
alone, and one process at a time runs a run folder (its .run.lock).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import yaml

from lit_retrieval.errors import UsageError
from lit_retrieval.grid.plan import Plan, Run, load_plan
from lit_retrieval.grid.runs import prepare, record_plan, run_locally, status
from lit_retrieval.launch.queue import SlurmQueue
from lit_retrieval.launch.submission import SBATCH, array_groups, run_array_task, submit_arrays, submitted_and_queued
from lit_retrieval.progress import add_progress_arguments, configure_from


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(flag, f"expected KEY=VALUE, got {item!r}")
        pairs[key] = value
    return pairs


def selected_runs(plan: Plan, runs: list[Run], names: list[str]) -> list[Run]:
    """The runs of the rows `names` and of the rows they evaluate (a row that tests another row's checkpoint
    needs that row trained), in the plan's order; an unknown name is a `UsageError` listing the plan's rows."""
    unknown = [n for n in names if plan.row(n) is None]
    if unknown:
        raise UsageError(
            "--rows", f"{plan.path} has no row {unknown} (its rows: {', '.join(r.name for r in plan.rows)})"
        )
    wanted = set(names) | {plan.row(n).evaluates for n in names if plan.row(n).evaluates}
    return [r for r in runs if r.row.name in wanted]


def with_configs(plan: Plan, configs: list[str]) -> Plan:
    """`plan` with `configs` given to every training row after its own files (rows that evaluate a `model`
    directory or another row train nothing); a missing file is a `UsageError`."""
    missing = [c for c in configs if not Path(c).is_file()]
    if missing:
        raise UsageError("--config", f"no such file: {', '.join(missing)} (paths are relative to {Path.cwd()})")
    if not configs:
        return plan
    rows = [dataclasses.replace(r, configs=[*r.configs, *configs]) if r.trains else r for r in plan.rows]
    return dataclasses.replace(plan, rows=rows)


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="lit-retrieval grid", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("plan", help="plan YAML (configs/plans/*.yaml)")
    parser.add_argument("--out", required=True, help="runs folder: RUNS_DIR/<row>/seed<k>/")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--local", action="store_true", help="run here, one run after another (default)")
    where.add_argument("--slurm", action="store_true", help="submit one Slurm job array (grid.sbatch)")
    where.add_argument("--task", type=int, help=argparse.SUPPRESS)  # one array task (what grid.sbatch runs)
    parser.add_argument("--launcher", default="", help=argparse.SUPPRESS)  # --task: starts fit/test (srun ...)
    parser.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="NAME=VALUE",
        help="grid.sbatch variables (ACCOUNT, PARTITION, GPUS, TIME, ...)",
    )
    parser.add_argument(
        "--override",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="config keys for every row, e.g. model.init_args.encoder.init_args.pretrained=/models/longclip-B.pt",
    )
    parser.add_argument(
        "--rows",
        nargs="+",
        metavar="NAME",
        help="run only these rows of the plan (and the rows they evaluate); task ids stay the plan's",
    )
    parser.add_argument(
        "--config",
        nargs="+",
        default=[],
        metavar="FILE",
        help="config files given to every training row after its own, e.g. configs/strategy/deepspeed_zero2.yaml",
    )
    parser.add_argument("--max-parallel", type=int, default=64, help="--slurm: array tasks running at once")
    parser.add_argument(
        "--dry-run", action="store_true", help="resolve every row's configs and list the runs; write and run nothing"
    )
    parser.add_argument("--sbatch", default=SBATCH, help=argparse.SUPPRESS)
    add_progress_arguments(parser)
    args = parser.parse_args(argv)
    configure_from(args)
    plan = with_configs(load_plan(args.plan), args.config)
    runs_dir = Path(args.out)
    extra = {k: yaml.safe_load(v) for k, v in _pairs(args.override, "--override").items()}
    values = _pairs(args.set, "--set")
    runs = plan.runs()
    if args.task is not None:
        return run_array_task(plan, runs, args.task, runs_dir, args.launcher)
    if args.rows:
        runs = selected_runs(plan, runs, args.rows)
    queued = submitted_and_queued({r.index: r.folder(runs_dir) for r in runs}) if not args.dry_run else {}
    pending = [r for r in runs if status(r.folder(runs_dir)) != "done" and r.index not in queued]
    print(
        f"{plan.title}: {len(runs)} runs ({len({r.row.name for r in runs})} rows, seeds {plan.seeds}), "
        f"{sum(status(r.folder(runs_dir)) == 'done' for r in runs)} finished"
        + (f", {len(queued)} queued or running in Slurm (left alone: {sorted(set(queued.values()))})" if queued else "")
    )
    resolved: dict = {}
    groups = array_groups(plan, pending, runs_dir, extra, values, resolved) if args.slurm else {}
    for run_ in runs:
        steps = prepare(plan, run_, runs_dir, extra, resolved, write=not args.dry_run and run_ in pending)
        state = "queued or running in Slurm" if run_.index in queued else status(run_.folder(runs_dir))
        if args.dry_run:
            shown = " && ".join(f"lit-retrieval {' '.join(s)}" for s in (steps["fit"], steps["evaluate"]) if s)
            print(f"[{run_.index}] {run_.row.name} seed {run_.seed}: {state}\n    {shown}")
    if args.dry_run or not pending:
        return 0
    record_plan(runs_dir, plan)
    if args.slurm:
        return submit_arrays(
            plan, runs_dir, groups, queued, values=values, sbatch=args.sbatch, max_parallel=args.max_parallel
        )
    return run_locally(runs, pending, runs_dir, SlurmQueue())  # a run may be held by an array task
