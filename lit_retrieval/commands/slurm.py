"""`lit-retrieval slurm`: render a Slurm template with your account, partition, nodes, GPUs, time and
config. A template that names no file is the shipped template of that file name (`fit.sbatch`,
`eval.sbatch`, `grid.sbatch`, `array.sbatch`; `lit_retrieval.launch.templates`), so the command below
runs from any folder; copy one from the repository's `slurm/` to change it.

    lit-retrieval slurm fit.sbatch --set CONFIG=configs/gve/train.yaml ACCOUNT=proj PARTITION=a100 \\
        RUN_DIR=/scratch/runs/gve3b NODES=4 GPUS=8 --out gve3b.sbatch && sbatch gve3b.sbatch

A template declares its variables in `#@ NAME[=default]` lines (no default: required) and uses them as
`{{NAME}}`; a --set value is used verbatim. Rendering makes the folders of the job's log files, which
Slurm opens before the script runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lit_retrieval.launch.templates import make_log_folders, render_template, template_text, write_job_script


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="lit-retrieval slurm", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("template", help="a template file, or a shipped one by name: fit, eval, grid, array.sbatch")
    parser.add_argument("--set", nargs="*", default=[], metavar="NAME=VALUE", help="template variables")
    parser.add_argument("--out", help="write the job script here (default: print it)")
    args = parser.parse_args(argv)
    values = {}
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set takes NAME=VALUE, got {item!r}")
        values[name] = value
    where, text = template_text(args.template)
    try:
        script = render_template(text, values)
    except ValueError as err:
        parser.error(f"{where}: {err}")
    make_log_folders(script, Path.cwd())
    if args.out:
        write_job_script(script, Path(args.out))
        print(f"wrote {args.out}")
    else:
        sys.stdout.write(script)
    return 0
