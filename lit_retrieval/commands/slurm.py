"""`lit-retrieval slurm`: render an sbatch template of `slurm/` with your account, partition,
nodes, GPUs, time and config. A template path that names no file is the shipped template of that file
name (`lit_retrieval.shipped`), so the command below also runs outside a checkout.

    lit-retrieval slurm slurm/fit.sbatch --set CONFIG=configs/gve/train.yaml ACCOUNT=proj PARTITION=a100 \
        RUN_DIR=/scratch/runs/gve3b NODES=4 GPUS=8 --out gve3b.sbatch && sbatch gve3b.sbatch

A template declares its variables in `#@ NAME[=default]` lines (no default: required) and uses
them as `{{NAME}}`. A value given with --set is used verbatim (`TIME=2-00` is two days, `ACCOUNT=123-45`
an account name). Slurm opens a job's `#SBATCH --output` / `--error` files before the script runs,
so a missing folder kills the job with no log; rendering makes those folders (`log_folders`), so
`sbatch` runs the script as printed. A default may refer to other variables; a default that combines them with integer
arithmetic (digits, + - *, e.g. `LAST_SHARD={{SHARDS}} - 1`) is computed by `integer_expression`
(a parser for integers and + - *, never `eval`), and needs those variables to be integers.
"""

from __future__ import annotations

import argparse
import re
import stat
import sys
from pathlib import Path

from lit_retrieval.shipped import template_text

DECLARATION = re.compile(r"^#@\s+([A-Z][A-Z0-9_]*)(?:=([^#]*))?(?:\s+#.*)?$")
PLACEHOLDER = re.compile(r"\{\{([A-Z][A-Z0-9_]*)\}\}")
# `#SBATCH --output=PATH`, `--error PATH`, `-o PATH`, `-e PATH` (Slurm's forms of the two options)
LOG_OPTION = re.compile(r"^#SBATCH\s+(?:--(?:output|error)[=\s]|-[oe]\s*)(\S+)")
CHDIR_OPTION = re.compile(r"^#SBATCH\s+(?:--chdir[=\s]|-D\s*)(\S+)")
ARITHMETIC = re.compile(r"^[0-9+\-* ]+$")
TOKEN = re.compile(r"\s*(?:(\d{1,18})|([+\-*]))")
MAX_TOKENS = 64


def template_variables(text: str) -> dict[str, str | None]:
    """Declared variables and their defaults (None: required)."""
    found = {}
    for line in text.splitlines():
        match = DECLARATION.match(line.strip())
        if match:
            found[match.group(1)] = None if match.group(2) is None else match.group(2).strip()
    return found


def integer_expression(text: str) -> int:
    """The value of `text`, integers joined by + - * (`*` binds tighter; a leading - negates), e.g.
    `16 - 1` -> 15. Anything else is a `ValueError`. Hand-written because it is small and bounded
    (at most 64 numbers and operators of at most 18 digits each), where `eval` is neither."""
    tokens, position = [], 0
    while position < len(text.rstrip()):
        match = TOKEN.match(text, position)
        if not match:
            raise ValueError(f"not an integer expression (digits and + - * only): {text!r}")
        tokens.append(int(match.group(1)) if match.group(1) else match.group(2))
        position = match.end()
    if not tokens or len(tokens) > MAX_TOKENS:
        raise ValueError(f"not an integer expression of at most {MAX_TOKENS} terms: {text!r}")
    total, product, sign, expect_number = 0, None, 1, True
    for token in [*tokens, "+"]:
        if expect_number:
            if token == "-":
                sign = -sign
                continue
            if not isinstance(token, int):
                raise ValueError(f"not an integer expression (an operator where a number belongs): {text!r}")
            product = sign * token if product is None else product * sign * token
            sign, expect_number = 1, False
        elif token == "*":
            expect_number = True
        else:
            total += product
            product, sign, expect_number = None, -1 if token == "-" else 1, True
    if product is not None or sign != 1:
        raise ValueError(f"not an integer expression (it ends with an operator): {text!r}")
    return total


def _is_arithmetic(default: str) -> bool:
    """A default that computes from other variables: placeholders joined by digits and + - *."""
    numbers = PLACEHOLDER.sub("0", default)
    return bool(PLACEHOLDER.search(default)) and bool(ARITHMETIC.match(numbers)) and any(op in numbers for op in "+-*")


def render_template(text: str, values: dict[str, str]) -> str:
    """`text` with its variables replaced: `values` verbatim, the defaults of the others (which may
    refer to further variables, and are computed when `_is_arithmetic`)."""
    declared = template_variables(text)
    unknown = set(values) - set(declared)
    if unknown:
        raise ValueError(f"unknown variable(s) {sorted(unknown)}; this template takes {sorted(declared)}")
    missing = [k for k, v in declared.items() if v is None and k not in values]
    if missing:
        raise ValueError(f"missing required variable(s) {missing} (set them with --set NAME=VALUE)")
    resolved: dict[str, str] = dict(values)

    def value(name: str, chain: tuple[str, ...]) -> str:
        if name in resolved:
            return resolved[name]
        if name not in declared or name in chain:
            raise ValueError(f"variable {chain[0]} refers to an undeclared or circular variable: {name}")
        default = str(declared[name])
        text = PLACEHOLDER.sub(lambda m: value(m.group(1), (*chain, name)), default)
        if _is_arithmetic(default):
            try:
                text = str(integer_expression(text))
            except ValueError as err:
                raise ValueError(f"variable {name} (default {default!r}) needs integers: {err}") from None
        resolved[name] = text
        return text

    for name in declared:
        value(name, ())
    body = [line for line in text.splitlines() if not DECLARATION.match(line.strip())]
    used = {m.group(1) for line in body for m in PLACEHOLDER.finditer(line)}
    undeclared = used - set(resolved)
    if undeclared:
        raise ValueError(f"the template uses undeclared variable(s) {sorted(undeclared)}")
    return "\n".join(PLACEHOLDER.sub(lambda m: resolved[m.group(1)], line) for line in body) + "\n"


def log_folders(script: str, submit_dir: Path) -> list[Path]:
    """The folders of a job script's `--output` / `--error` files, relative paths taken from its
    `--chdir` or else `submit_dir` (where sbatch runs), as Slurm opens them. A folder whose name holds
    a Slurm filename pattern (`%j`, `%x`, ...) is left out: it is known only when the job starts."""
    lines = [line.strip() for line in script.splitlines()]
    chdir = next((Path(m.group(1)) for line in lines if (m := CHDIR_OPTION.match(line))), None)
    base = submit_dir / chdir if chdir is not None else submit_dir
    folders = []
    for line in lines:
        match = LOG_OPTION.match(line)
        folder = Path(match.group(1)).parent if match else None
        if folder is not None and "%" not in str(folder) and (base / folder) not in folders:
            folders.append(base / folder)
    return folders


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="lit-retrieval slurm", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("template", help="an sbatch template, e.g. slurm/fit.sbatch (shipped: fit, eval, grid, array)")
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
    for folder in log_folders(script, Path.cwd()):
        folder.mkdir(parents=True, exist_ok=True)
    if args.out:
        out = Path(args.out)
        out.write_text(script)
        out.chmod(out.stat().st_mode | stat.S_IXUSR)
        print(f"wrote {out}")
    else:
        sys.stdout.write(script)
    return 0
