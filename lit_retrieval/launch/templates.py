"""Slurm job templates: the shipped ones (the repository's `slurm/`, package data through the link
`launch/sbatch`) and the small template language `lit-retrieval slurm` and `grid --slurm` render them with.

A template declares its variables in `#@ NAME[=default]` lines (no default: required) and uses
them as `{{NAME}}`. A value is used verbatim (`TIME=2-00` is two days, `ACCOUNT=123-45` an account
name). A default may refer to other variables; a default that combines them with integer arithmetic
(digits, + - *, e.g. `LAST_SHARD={{SHARDS}} - 1`) is computed by `integer_expression` (a parser for
integers and + - *, never `eval`), and needs those variables to be integers. Slurm opens a job's
`#SBATCH --output` / `--error` files before the script runs, so a missing folder kills the job with
no log; `make_log_folders` makes those folders (`log_folders`), so `sbatch` runs the script as written.
Hand-written rather than Jinja2: the language is these two forms, and a job script must never run
code from a template.
"""

from __future__ import annotations

import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from importlib.resources import files

from lit_retrieval.errors import UsageError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

DECLARATION = re.compile(r"^#@\s+([A-Z][A-Z0-9_]*)(?:=([^#]*))?(?:\s+#.*)?$")
PLACEHOLDER = re.compile(r"\{\{([A-Z][A-Z0-9_]*)\}\}")
# `#SBATCH --output=PATH`, `--error PATH`, `-o PATH`, `-e PATH` (Slurm's forms of the two options)
LOG_OPTION = re.compile(r"^#SBATCH\s+(?:--(?:output|error)[=\s]|-[oe]\s*)(\S+)")
CHDIR_OPTION = re.compile(r"^#SBATCH\s+(?:--chdir[=\s]|-D\s*)(\S+)")
ARITHMETIC = re.compile(r"^[0-9+\-* ]+$")
TOKEN = re.compile(r"\s*(?:(\d{1,18})|([+\-*]))")
MAX_TOKENS = 64
TEMPLATE_SUFFIX = ".sbatch"


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


def shipped_templates() -> dict[str, Traversable]:
    """The shipped Slurm templates by file name (`fit.sbatch`, `eval.sbatch`, `grid.sbatch`, `array.sbatch`)."""
    folder = files("lit_retrieval.launch") / "sbatch"
    return {e.name: e for e in sorted(folder.iterdir(), key=lambda e: e.name) if e.name.endswith(TEMPLATE_SUFFIX)}


def template_text(name: str) -> tuple[str, str]:
    """(where, text) of a Slurm template: the file `name` if it exists, else the shipped template named
    `name` (`fit.sbatch`, or `slurm/fit.sbatch` as earlier releases' docs print it), so the documented
    command works from any folder. A missing file in any other folder is refused: a mistyped path to a
    template of one's own must not render the shipped one instead."""
    path = Path(name)
    if path.is_file():
        try:
            return name, path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as err:
            raise UsageError(name, f"not UTF-8 text (byte {err.start})") from None
    shipped = shipped_templates()
    bare = "/" not in name or Path(name).parent == Path("slurm")  # "./fit.sbatch" names a path of one's own
    if not bare or path.name not in shipped:
        raise UsageError(name, f"no such file, and no shipped template of that name (shipped: {', '.join(shipped)})")
    return f"{path.name} (shipped)", shipped[path.name].read_text()


def make_log_folders(script: str, submit_dir: Path) -> None:
    """Make the folders of a job script's log files, as Slurm opens them for a job submitted from
    `submit_dir` (`log_folders`)."""
    for folder in log_folders(script, submit_dir):
        folder.mkdir(parents=True, exist_ok=True)


def write_job_script(script: str, out: Path) -> None:
    """Write a rendered job script to `out`, executable."""
    out.write_text(script)
    out.chmod(out.stat().st_mode | stat.S_IXUSR)
