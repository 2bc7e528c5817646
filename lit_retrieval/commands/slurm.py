"""`lit-retrieval slurm`: render an sbatch template of `slurm/` with your account, partition,
nodes, GPUs, time and config.

    lit-retrieval slurm slurm/fit.sbatch --set CONFIG=configs/gve/train.yaml ACCOUNT=proj PARTITION=a100 \
        RUN_DIR=/scratch/runs/gve3b NODES=4 GPUS=8 --out gve3b.sbatch && sbatch gve3b.sbatch

A template declares its variables in `#@ NAME[=default]` lines (no default: required) and uses
them as `{{NAME}}`. A default may refer to other variables; one that is then plain integer
arithmetic (digits, + - *) is computed, e.g. `LAST_SHARD={{SHARDS}} - 1`.
"""

from __future__ import annotations

import argparse
import re
import stat
import sys
from pathlib import Path

DECLARATION = re.compile(r"^#@\s+([A-Z][A-Z0-9_]*)(?:=([^#]*))?(?:\s+#.*)?$")
PLACEHOLDER = re.compile(r"\{\{([A-Z][A-Z0-9_]*)\}\}")
ARITHMETIC = re.compile(r"^[0-9+\-* ]+$")


def template_variables(text: str) -> dict[str, str | None]:
    """Declared variables and their defaults (None: required)."""
    found = {}
    for line in text.splitlines():
        match = DECLARATION.match(line.strip())
        if match:
            found[match.group(1)] = None if match.group(2) is None else match.group(2).strip()
    return found


def render_template(text: str, values: dict[str, str]) -> str:
    declared = template_variables(text)
    unknown = set(values) - set(declared)
    if unknown:
        raise ValueError(f"unknown variable(s) {sorted(unknown)}; this template takes {sorted(declared)}")
    missing = [k for k, v in declared.items() if v is None and k not in values]
    if missing:
        raise ValueError(f"missing required variable(s) {missing} (set them with --set NAME=VALUE)")
    resolved = {k: values.get(k, v) for k, v in declared.items()}
    for _ in range(len(resolved)):  # defaults may refer to other variables
        resolved = {k: PLACEHOLDER.sub(lambda m: resolved[m.group(1)], v) for k, v in resolved.items()}
    for key, value in resolved.items():
        if PLACEHOLDER.search(value):
            raise ValueError(f"variable {key} refers to an undeclared or circular variable: {value!r}")
        if ARITHMETIC.match(value) and any(op in value for op in "+-*"):
            resolved[key] = str(eval(value, {"__builtins__": {}}))  # digits and + - * only
    body = [line for line in text.splitlines() if not DECLARATION.match(line.strip())]
    used = {m.group(1) for line in body for m in PLACEHOLDER.finditer(line)}
    undeclared = used - set(resolved)
    if undeclared:
        raise ValueError(f"the template uses undeclared variable(s) {sorted(undeclared)}")
    return "\n".join(PLACEHOLDER.sub(lambda m: resolved[m.group(1)], line) for line in body) + "\n"


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="lit-retrieval slurm", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("template", help="an sbatch template, e.g. slurm/fit.sbatch")
    parser.add_argument("--set", nargs="*", default=[], metavar="NAME=VALUE", help="template variables")
    parser.add_argument("--out", help="write the job script here (default: print it)")
    args = parser.parse_args(argv)
    values = {}
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set takes NAME=VALUE, got {item!r}")
        values[name] = value
    try:
        script = render_template(Path(args.template).read_text(), values)
    except ValueError as err:
        parser.error(f"{args.template}: {err}")
    if args.out:
        out = Path(args.out)
        out.write_text(script)
        out.chmod(out.stat().st_mode | stat.S_IXUSR)
        print(f"wrote {out}")
    else:
        sys.stdout.write(script)
    return 0
