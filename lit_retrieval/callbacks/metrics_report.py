"""Writes evaluation metrics to `metrics.json` in the run directory and prints them as a table."""

from __future__ import annotations

import json
from pathlib import Path

import lightning as L
from rich.console import Console
from rich.table import Table

COLUMNS = ("R@1", "R@5", "R@10", "Rsum", "MdR", "MnR")


def metrics_table(results: dict[str, float], title: str = "retrieval") -> Table:
    """A rich table with one row per key prefix (`t2v`, `v2t`, `order/reversed/t2v`, ...) and the
    usual columns; a cell the results do not hold stays blank (e.g. Avg-Event R@5). Videos the
    evaluation skipped as undecodable (`skipped_videos`) are counted in the caption."""
    table = Table(title=title)
    table.add_column("direction")
    for column in COLUMNS:
        table.add_column(column, justify="right")
    prefixes = sorted(
        {k.rsplit("/", 1)[0] for k in results if "/" in k and k.rsplit("/", 1)[1] in COLUMNS}, key=_row_order
    )
    for prefix in prefixes:
        cells = (results.get(f"{prefix}/{c}") for c in COLUMNS)
        table.add_row(prefix, *("" if v is None else f"{v:.2f}" for v in cells))
    skipped = int(results.get("skipped_videos", 0))
    if skipped:
        table.caption = f"{skipped} video{'s' if skipped > 1 else ''} skipped as undecodable (not in the gallery)"
    return table


def _row_order(prefix: str) -> tuple[int, str]:
    """The standard directions first, then the analyses in alphabetical order."""
    return (0 if "/" not in prefix else 1, prefix)


class MetricsReport(L.Callback):
    """After `validate`/`test` (and per-epoch validation), merge the module's `eval_results` into
    `<run dir>/metrics.json` (keyed by stage) and print the table on rank 0."""

    def __init__(self, filename: str = "metrics.json", print_table: bool = True) -> None:
        self.filename = filename
        self.print_table = print_table

    def run_dir(self, trainer: L.Trainer) -> Path:
        return Path(trainer.log_dir or trainer.default_root_dir)

    def _report(self, trainer: L.Trainer, module: L.LightningModule, stage: str) -> None:
        if trainer.sanity_checking:
            return
        run_dir = self.run_dir(trainer)  # `log_dir` is a broadcast under DDP: every rank must ask
        results = getattr(module, "eval_results", {}).get(stage)
        if not results or not trainer.is_global_zero:
            return
        path = run_dir / self.filename
        path.parent.mkdir(parents=True, exist_ok=True)
        existing = json.loads(path.read_text()) if path.exists() else {}
        existing[stage] = {**results, "epoch": trainer.current_epoch, "global_step": trainer.global_step}
        path.write_text(json.dumps(existing, indent=2))
        if self.print_table:
            Console().print(metrics_table(results, title=f"{stage} metrics ({path})"))

    def on_validation_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._report(trainer, module, "val")

    def on_test_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._report(trainer, module, "test")
