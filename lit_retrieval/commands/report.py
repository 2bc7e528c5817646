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

from lit_retrieval.grid.plan import load_plan
from lit_retrieval.grid.report import write_report
from lit_retrieval.grid.runs import recorded_plan


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="lit-retrieval report", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", help="runs folder of `lit-retrieval grid`")
    parser.add_argument("--plan", help="the plan (default: the one RUNS/grid.json names)")
    parser.add_argument("--out", required=True, help="report folder: report.md, report.csv, report.png")
    parser.add_argument("--digits", type=int, default=2, help="decimals in the markdown table")
    args = parser.parse_args(argv)
    if args.digits < 0:
        parser.error(f"--digits must be at least 0, got {args.digits}")
    runs_dir = Path(args.runs)
    plan = load_plan(args.plan or recorded_plan(runs_dir))
    text, written = write_report(plan, runs_dir, Path(args.out), args.digits)
    print(text + f"\nwrote {', '.join(str(p) for p in written)}")
    return 0
