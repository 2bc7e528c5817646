"""`lit-retrieval report`: a grid's runs as a table of mean ± std over seeds, beside the paper.

    lit-retrieval report runs/melon_tab2 --out reports/melon_tab2 [--plan configs/plans/melon_tab2.yaml]

Writes REPORT_DIR/report.md (measured table; measured vs published where the plan names the
paper's numbers), report.csv (one line per row x metric with every seed's value) and report.png
(bar chart with ± std error bars). The std is the sample standard deviation (ddof = 1). Rows with
fewer finished seeds than planned are marked `incomplete`. (`lit-retrieval uvrb report` is a
different command: UVRB's ability table of one results.json.)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lit_retrieval.errors import UsageError
from lit_retrieval.grid.plan import load_plan
from lit_retrieval.grid.report import collect, markdown, plot, write_csv
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
    (out / "report.md").write_text(text)
    write_csv(rows, plan.metrics, out / "report.csv")
    plot(plan, rows, out / "report.png")
    print(text + f"\nwrote {out / 'report.md'}, {out / 'report.csv'}, {out / 'report.png'}")
    return 0
