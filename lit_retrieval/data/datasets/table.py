"""`TableDataModule`: a user's own videos and captions as a table (CSV, TSV, JSON Lines, Parquet), one
row per caption. The layout, the columns and their defaults, the rules and the bad rows are in
`lit_retrieval.data.formats.table`; docs/datasets.md has a quick start on the synthetic corpus's table.
"""

from __future__ import annotations

import posixpath
from pathlib import Path

from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.batching.datamodule import VideoTextDataModule
from lit_retrieval.data.formats.table import SEPARATORS, TableColumns, TableFormat, TableParser, table_format
from lit_retrieval.data.media.video import video_duration
from lit_retrieval.data.records import VideoRecord
from lit_retrieval.errors import ConfigError


class TableDataModule(VideoTextDataModule):
    """A table of (video, caption[, start, end][, duration][, split]) rows.

    Args:
        table: the table file, or `{split: file}` for one table per split (each row takes its file's
            split; a split column is not read).
        video_column, caption_column, start_column, end_column, duration_column, split_column: the
            column of each field (`None`: the first present of the common names, `formats.table`).
        format: `csv`, `tsv`, `jsonl` or `parquet` (default: from the extension).
        separator: the CSV/TSV field separator (default `,` for CSV, a tab for TSV).
        video_root: where relative video paths start (default: the table's folder; with one table per
            split, the folder that holds them all, and each table's paths start from its own folder).
        val_split: the validation split's name (`val`; a table without such rows has no validation).
        **kwargs: the common options of `VideoTextDataModule`.
    """

    def __init__(
        self,
        table: str | dict[str, str],
        video_column: str | None = None,
        caption_column: str | None = None,
        start_column: str | None = None,
        end_column: str | None = None,
        duration_column: str | None = None,
        split_column: str | None = None,
        format: TableFormat | None = None,
        separator: str | None = None,
        val_split: str | None = "val",
        **kwargs,
    ) -> None:
        super().__init__(val_split=val_split, **kwargs)
        self.tables = {None: Path(table)} if isinstance(table, str) else {s: Path(p) for s, p in table.items()}
        if not self.tables:
            raise ConfigError("data.table: give a table file or {split: file}")
        if format is not None and format not in ("csv", "tsv", "jsonl", "parquet"):
            raise ConfigError(f"data.format must be csv, tsv, jsonl or parquet, got {format!r}")
        if separator is not None and len(separator) != 1:
            raise ConfigError(f"data.separator must be one character, got {separator!r}")
        if format is None:
            for path in self.tables.values():
                table_format(path)  # an unknown extension is refused when the config is parsed
        if separator is not None and (format or table_format(next(iter(self.tables.values())))) not in SEPARATORS:
            raise ConfigError("data.separator applies to CSV and TSV tables only")
        self.columns = TableColumns(
            video_column, caption_column, start_column, end_column, duration_column, split_column
        )
        self.format = format
        self.separator = separator
        self._row_of: dict[tuple[str, str], str] = {}  # (video path, split) -> the table and row first naming it

    @property
    def source(self) -> str:
        return ", ".join(str(p) for p in self.tables.values())

    def default_video_root(self) -> Path:
        folders = [str(p.parent.resolve()) for p in self.tables.values()]
        return Path(posixpath.commonpath(folders)) if len(folders) > 1 else Path(folders[0])

    def parser(self) -> TableParser:
        splits = {s for s in self.splits.values() if s is not None}
        root = self.video_root or self.default_video_root()
        return TableParser(self.columns, splits, root, self.on_bad_video, video_duration, self.format, self.separator)

    def load_records(self, collector: RecordCollector) -> list[VideoRecord]:
        parser = self.parser()
        records = []
        self._row_of.clear()
        for split, path in self.tables.items():
            prefix = ""
            if split is not None and self.video_root is None:
                prefix = posixpath.relpath(str(path.parent.resolve()), str(self.default_video_root()))
                prefix = "" if prefix == "." else prefix
            found = parser.load(path, collector, split, prefix)
            named = f"{path} " if len(self.tables) > 1 else ""
            for key, row in parser.first_rows.items():
                self._row_of.setdefault(key, f"{named}{row}")
            records += found
        return records

    def setup(self, stage: str | None = None) -> None:
        super().setup(stage)
        if "val" in self.datasets and not len(self.datasets["val"]):
            del self.datasets["val"]  # a table without rows of the val split: no validation

    def overlap_record(self, path: str, split: str) -> str:
        return self._row_of.get((path, split), path)
