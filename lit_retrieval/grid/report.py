"""Seed statistics of a grid's runs: mean and sample standard deviation (ddof = 1, Bessel's
correction; `statistics.stdev`) per row and metric over the seeds that finished, the number of
seeds found against the number planned, and the paper's published numbers with the difference.

A row with fewer finished seeds than planned is marked `incomplete` in every table (its mean is
over the seeds found, and the seed count says how many); a row with one seed has no std (blank).

A plan's `comparisons` are paired tests of two rows on the same test queries
(`lit_retrieval.metrics.paired_scores`: every finished seed's score matrix a side, the sign-flip
p-value and the bootstrap interval), their p-values Holm-corrected together.
"""

from __future__ import annotations

import csv
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from lit_retrieval.errors import InputError, UsageError
from lit_retrieval.grid.plan import Comparison, Plan, load_published
from lit_retrieval.grid.runs import DONE, read_done, run_metrics


@dataclass(frozen=True)
class Cell:
    """One row x metric: the values of the finished seeds (in seed order) and their statistics."""

    values: list[float]

    @property
    def mean(self) -> float:
        return statistics.mean(self.values) if self.values else math.nan

    @property
    def std(self) -> float:
        return statistics.stdev(self.values) if len(self.values) > 1 else math.nan


@dataclass(frozen=True)
class RowResult:
    name: str
    label: str
    seeds_found: list[int]
    seeds_planned: list[int]
    cells: dict[str, Cell]
    published: dict[str, float]

    @property
    def complete(self) -> bool:
        return set(self.seeds_found) == set(self.seeds_planned)


def collect(plan: Plan, runs_dir: Path) -> list[RowResult]:
    """Every plan row's finished runs (those with a done.json) under `runs_dir`; a metric a run lacks is
    a `KeyError` naming it, and a done.json or metrics file that cannot be trusted (damaged, or naming
    a file that is gone) a `UsageError` naming it: `lit-retrieval grid` repairs such a run."""
    published = load_published(plan.published) if plan.published else {}
    results = []
    for row in plan.rows:
        found = [s for s in row.seeds if (Path(runs_dir) / row.name / f"seed{s}" / DONE).exists()]
        per_seed = [run_metrics(Path(runs_dir) / row.name / f"seed{s}") for s in found]
        cells = {}
        for metric in plan.metrics:
            missing = [s for s, m in zip(found, per_seed) if metric not in m]
            if missing:
                raise KeyError(f"{runs_dir}/{row.name}: seed(s) {missing} have no metric {metric!r}")
            cells[metric] = Cell([m[metric] for m in per_seed])
        results.append(RowResult(row.name, row.label, found, list(row.seeds), cells, published.get(row.name, {})))
    return results


@dataclass(frozen=True)
class ComparisonResult:
    """A plan comparison's paired test (`PairedResult.as_dict`, percentage points) and Holm's p-value."""

    comparison: Comparison
    runs: tuple[int, int]
    complete: bool
    result: dict | None  # None: not run (a row without a finished seed: `missing` names it)
    holm_p: float = math.nan
    missing: str = ""


def score_matrices(plan: Plan, runs_dir: Path, name: str) -> tuple[list[Path], bool]:
    """The file each finished seed of row `name` compares, beside its metrics file: the test score
    matrix, or uvrb's per_query.json in an `evaluate: uvrb` plan; and whether every planned seed
    finished. A run without one is a `UsageError` naming it."""
    from lit_retrieval.metrics.score_files import SCORES_FILE
    from lit_retrieval.metrics.paired_tasks import PER_QUERY_FILE

    row = plan.row(name)
    assert row is not None
    folders = [Path(runs_dir) / name / f"seed{s}" for s in row.seeds]
    found = [f for f in folders if (f / DONE).exists()]
    paths = []
    for folder in found:
        metrics = folder / read_done(folder)["metrics"]
        if plan.evaluate == "uvrb":
            path, cause = metrics.parent / PER_QUERY_FILE, "written by `uvrb` since the paired comparisons"
        else:
            path, cause = (
                metrics.parent / SCORES_FILE,
                "the plan's comparisons need model.init_args.evaluation.save_scores",
            )
        if not path.is_file():
            raise UsageError(str(path), f"missing: {cause}")
        paths.append(path)
    return paths, len(found) == len(folders)


def compare_rows(plan: Plan, runs_dir: Path) -> list[ComparisonResult]:
    """Every comparison whose two rows have a finished seed each, Holm-corrected over those run."""
    from lit_retrieval.metrics.paired_scores import TokenRange, compare_score_files, holm
    from lit_retrieval.metrics.paired_tasks import compare_per_query_files

    results = []
    for comparison in plan.comparisons:
        (a, a_done), (b, b_done) = (score_matrices(plan, runs_dir, n) for n in (comparison.a, comparison.b))
        if not (a and b):
            missing = ", ".join(n for n, files in ((comparison.a, a), (comparison.b, b)) if not files)
            results.append(ComparisonResult(comparison, (len(a), len(b)), False, None, missing=missing))
        elif plan.evaluate == "uvrb":
            paired = {**compare_per_query_files(a, b, comparison.tasks).as_dict(), "measure": "task mean"}
            results.append(ComparisonResult(comparison, (len(a), len(b)), a_done and b_done, paired))
        else:
            tokens = None if comparison.tokens is None else TokenRange(*comparison.tokens)
            paired = compare_score_files(a, b, comparison.k, tokens=tokens, queries=comparison.queries)
            results.append(ComparisonResult(comparison, (len(a), len(b)), a_done and b_done, paired.as_dict()))
    # Holm over the plan's comparisons: one not run counts as p = 1, the order that gives the run ones the
    # largest multipliers (m, m - 1, ...), so their corrected p-values hold whatever the missing ones would be
    adjusted = holm([1.0 if r.result is None else r.result["p_value"] for r in results])
    return [
        ComparisonResult(r.comparison, r.runs, r.complete, r.result, math.nan if r.result is None else p, r.missing)
        for r, p in zip(results, adjusted)
    ]


def comparisons_markdown(results: list[ComparisonResult], digits: int = 2) -> str:
    """The comparisons as a table: R@k of each side, A − B with its 95 % interval, p and Holm's p."""
    lines = [
        "",
        "## Paired comparisons (test queries)",
        "",
        "Per query, the R@k hit (a uvrb plan: its task's metric, weighted so that the mean is the mean over "
        "tasks) averaged over a row's seeds, A − B; two-sided sign-flip p-value and 95 % "
        f"bootstrap interval over the queries; Holm's correction over the plan's {len(results)} comparisons, "
        "each not run counted as p = 1 (docs/experiments.md).",
        "",
        "| comparison | A | B | queries | runs | A | B | A − B [95 % CI] | p | p (Holm) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        c, v = r.comparison, r.result
        if v is None:
            lines.append(f"| {c.label} | {c.a} | {c.b} | not run: no finished seed of {r.missing} | | | | | | |")
            continue
        sliced = [] if c.tokens is None else [f"{c.tokens[0] or 0}-{c.tokens[1] or ''} tokens"]
        sliced += [] if c.queries == "all" else [c.queries]
        sliced += [] if c.tasks is None else [", ".join(c.tasks)]
        measure = v.get("measure", f"R@{c.k}")
        queries = f"{v['queries']}" + (f" ({', '.join(sliced)})" if sliced else "")
        runs = f"{r.runs[0]}/{r.runs[1]}" + ("" if r.complete else " incomplete")
        low, high = v["ci95"]
        lines.append(
            f"| {c.label} | {c.a} | {c.b} | {queries} | {runs} | {measure} {v['a']:.{digits}f} | {v['b']:.{digits}f} | "
            f"{v['difference']:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}] | {v['p_value']:.4g} | "
            f"{r.holm_p:.4g} |"
        )
    return "\n".join(lines) + "\n"


def write_comparisons_csv(results: list[ComparisonResult], path: Path) -> None:
    """One line per comparison with every figure of its test."""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["comparison", "a", "b", "k", "tokens_low", "tokens_high", "subset", "queries", "runs_a", "runs_b"]
            + ["complete"]
            + ["r_at_k_a", "r_at_k_b", "difference", "ci95_low", "ci95_high", "p_value", "p_holm", "test"]
        )
        for r in results:
            c, v = r.comparison, r.result
            low, high = c.tokens or (None, None)
            head = [c.name, c.a, c.b, c.k, "" if low is None else low, "" if high is None else high]
            head += [c.queries if c.tasks is None else "+".join(c.tasks)]
            if v is None:  # not run: the runs found, no figures
                writer.writerow([*head, "", r.runs[0], r.runs[1], r.complete, *[""] * 7, "not run"])
                continue
            writer.writerow(
                head
                + [v["queries"], r.runs[0], r.runs[1], r.complete, repr(v["a"]), repr(v["b"]), repr(v["difference"])]
                + [repr(v["ci95"][0]), repr(v["ci95"][1]), repr(v["p_value"]), repr(r.holm_p), v["test"]]
            )


def _number(value: float, digits: int) -> str:
    return "" if math.isnan(value) else f"{value:.{digits}f}"


def _seeds(row: RowResult) -> str:
    return f"{len(row.seeds_found)}/{len(row.seeds_planned)}" + ("" if row.complete else " incomplete")


def markdown(plan: Plan, rows: list[RowResult], digits: int = 2) -> str:
    """The measured table (mean ± std, seeds found) and, where published numbers exist, measured vs
    paper with measured − paper."""
    lines = [
        f"# {plan.title}",
        "",
        f"Mean ± sample standard deviation (ddof = 1) over the seeds (plan: {plan.seeds}); "
        "`incomplete`: fewer seeds finished than planned (mean over those found).",
        "",
    ]
    lines += ["| row | seeds | " + " | ".join(plan.metrics) + " |", "|---|---|" + "---|" * len(plan.metrics)]
    for row in rows:
        cells = []
        for metric in plan.metrics:
            cell = row.cells[metric]
            cells.append(
                ""
                if not cell.values
                else _number(cell.mean, digits) + (f" ± {_number(cell.std, digits)}" if cell.values[1:] else "")
            )
        lines.append(f"| {row.label} | {_seeds(row)} | " + " | ".join(cells) + " |")
    if any(row.published for row in rows):
        lines += [
            "",
            f"## Measured vs published ({plan.source or plan.published})",
            "",
            "Each cell: measured mean / paper (measured − paper).",
            "",
        ]
        lines += ["| row | seeds | " + " | ".join(plan.metrics) + " |", "|---|---|" + "---|" * len(plan.metrics)]
        for row in rows:
            cells = []
            for metric in plan.metrics:
                mean, paper = row.cells[metric].mean, row.published.get(metric)
                if paper is None:
                    cells.append(_number(mean, digits))
                elif math.isnan(mean):
                    cells.append(f"– / {paper:g}")
                else:
                    cells.append(f"{mean:.{digits}f} / {paper:g} ({mean - paper:+.{digits}f})")
            lines.append(f"| {row.label} | {_seeds(row)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_csv(rows: list[RowResult], metrics: list[str], path: Path) -> None:
    """One line per row x metric: seeds, mean, std, every seed's value, published and difference."""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [
                "row",
                "label",
                "metric",
                "seeds_found",
                "seeds_planned",
                "complete",
                "mean",
                "std_ddof1",
                "values",
                "published",
                "difference",
            ]
        )
        for row in rows:
            for metric in metrics:
                cell, paper = row.cells[metric], row.published.get(metric)
                difference = "" if paper is None or not cell.values else repr(cell.mean - paper)
                writer.writerow(
                    [
                        row.name,
                        row.label,
                        metric,
                        len(row.seeds_found),
                        len(row.seeds_planned),
                        row.complete,
                        "" if not cell.values else repr(cell.mean),
                        "" if math.isnan(cell.std) else repr(cell.std),
                        " ".join(repr(v) for v in cell.values),
                        "" if paper is None else paper,
                        difference,
                    ]
                )


def plot(plan: Plan, rows: list[RowResult], path: Path) -> None:
    """One panel per metric: a bar per row (mean, error bar ± std; hatched if incomplete) and the
    published number as a black marker."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    count = len(plan.metrics)
    cols = min(count, 3)
    fig, axes = plt.subplots(
        (count + cols - 1) // cols,
        cols,
        figsize=(1.2 + 0.55 * len(rows) * cols + 2 * cols, 3.6 * ((count + cols - 1) // cols)),
        squeeze=False,
    )
    positions = list(range(len(rows)))
    for ax, metric in zip(axes.flat, plan.metrics):
        means = [row.cells[metric].mean for row in rows]
        stds = [0.0 if math.isnan(row.cells[metric].std) else row.cells[metric].std for row in rows]
        bars = ax.bar(positions, [0.0 if math.isnan(m) else m for m in means], yerr=stds, capsize=3, color="tab:blue")
        for bar, row in zip(bars, rows):
            if not row.complete:
                bar.set_hatch("//")
        paper = [(i, row.published[metric]) for i, row in enumerate(rows) if metric in row.published]
        if paper:
            ax.scatter(
                [i for i, _ in paper], [v for _, v in paper], color="black", marker="_", s=300, zorder=3, label="paper"
            )
            ax.legend(loc="lower right", fontsize=7)
        ax.set_title(metric)
        ax.set_xticks(positions, [row.label for row in rows], rotation=45, ha="right", fontsize=7)
    for ax in list(axes.flat)[count:]:
        ax.axis("off")
    fig.suptitle(f"{plan.title} (mean ± std over seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(plan: Plan, runs_dir: Path, out: Path, digits: int) -> tuple[str, list[Path]]:
    """`lit-retrieval report`'s files in `out`: report.md (the table; with the plan's `comparisons`
    their paired tests), report.csv, report.png and comparisons.csv. (report.md's text, files written)."""
    try:
        rows = collect(plan, runs_dir)
    except KeyError as err:
        raise UsageError(str(runs_dir), err.args[0]) from None
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(plan, rows, digits)
    written = [out / "report.md", out / "report.csv", out / "report.png"]
    if plan.comparisons:
        try:
            compared = compare_rows(plan, runs_dir)
        except ValueError as err:  # the score files' own checks name the file
            raise err if isinstance(err, UsageError) else InputError(str(err)) from None
        text += comparisons_markdown(compared, digits)
        write_comparisons_csv(compared, out / "comparisons.csv")
        written.append(out / "comparisons.csv")
    (out / "report.md").write_text(text)
    write_csv(rows, plan.metrics, out / "report.csv")
    plot(plan, rows, out / "report.png")
    return text, written
