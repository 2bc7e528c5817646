"""`lit-retrieval report`: a grid's runs as a table of mean ± std over seeds, beside the paper.

    lit-retrieval report runs/melon_tab2 --out reports/melon_tab2 [--plan configs/plans/melon_tab2.yaml]

Writes REPORT_DIR/report.md (measured table; measured vs published where the plan names the
paper's numbers), report.csv (one line per row x metric with every seed's value) and report.png
(bar chart with ± std error bars), and with the plan's `comparisons` their paired tests (a table in
report.md, comparisons.csv: sign-flip p-value, Holm's correction, bootstrap interval). The std is
the sample standard deviation (ddof = 1). Rows with fewer finished seeds than planned are marked
`incomplete`. (`lit-retrieval uvrb report` is a
different command: UVRB's ability table of one results.json.)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lit_retrieval.errors import InputError, UsageError
from lit_retrieval.grid.plan import load_plan
from lit_retrieval.grid.report import (
    collect,
    compare_rows,
    comparisons_markdown,
    markdown,
    plot,
    write_comparisons_csv,
    write_csv,
)
from lit_retrieval.grid.runs import read_object


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="lit-retrieval report", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", help="runs folder of `lit-retrieval grid`")
    parser.add_argument("--plan", help="the plan (default: the one RUNS/grid.json names)")
    parser.add_argument("--out", required=True, help="report folder: report.md, report.csv, report.png")
    parser.add_argument("--digits", type=int, default=2, help="decimals in the markdown table")
    args = parser.parse_args(argv)
    runs_dir = Path(args.runs)
    plan_path = args.plan
    if plan_path is None:
        record = runs_dir / "grid.json"
        if not record.is_file():
            raise UsageError(str(runs_dir), "no grid.json here (not a `lit-retrieval grid` runs folder); pass --plan")
        plan_path = read_object(record, "grid.json").get("plan")
        if not isinstance(plan_path, str) or not plan_path:
            raise UsageError(str(record), "grid.json names no plan ('plan'); pass --plan")
    plan = load_plan(plan_path)
    try:
        rows = collect(plan, runs_dir)
    except KeyError as err:
        raise UsageError(str(runs_dir), err.args[0]) from None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(plan, rows, args.digits)
    written = [out / "report.md", out / "report.csv", out / "report.png"]
    if plan.comparisons:
        try:
            compared = compare_rows(plan, runs_dir)
        except ValueError as err:  # the score files' own checks name the file
            raise err if isinstance(err, UsageError) else InputError(str(err)) from None
        text += comparisons_markdown(compared, args.digits)
        write_comparisons_csv(compared, out / "comparisons.csv")
        written.append(out / "comparisons.csv")
    (out / "report.md").write_text(text)
    write_csv(rows, plan.metrics, out / "report.csv")
    plot(plan, rows, out / "report.png")
    print(text + f"\nwrote {', '.join(str(p) for p in written)}")
    return 0
