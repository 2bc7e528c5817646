"""The project's readers of annotation and input files: strict UTF-8 text, strict JSON (no repeated
keys, no NaN), JSON lines and CSV with a header; every failure is an `AnnotationError` naming the
file and, where there is one, the record or line."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lit_retrieval.data.records import AnnotationError


def read_text(path: str | Path) -> str:
    """The text of an annotation file, decoded as strict UTF-8 (a byte-order mark is allowed); a
    missing, unreadable or non-UTF-8 file is an `AnnotationError`."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise AnnotationError(str(path), "-", "annotation file not found") from None
    except OSError as err:
        raise AnnotationError(str(path), "-", f"cannot read the file ({err.strerror or err})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise AnnotationError(
            str(path), "-", f"not UTF-8 text (byte {err.start}: {data[err.start : err.start + 4]!r})"
        ) from None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def loads_strict(text: str, constants: bool = False) -> Any:
    """`json.loads` under the strict reading every parser uses: a repeated key in one object
    (`json` would silently keep the last) and NaN/Infinity (unless `constants`, for a caller that
    names the offending value itself) are `ValueError`s, as is nesting too deep to parse."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=None if constants else _no_constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def parse_json(text: str, source: str, record: str = "-", constants: bool = False) -> Any:
    """`loads_strict(text)`; invalid JSON is an `AnnotationError` naming `source` and `record`."""
    try:
        return loads_strict(text, constants)
    except ValueError as err:  # json.JSONDecodeError included
        raise AnnotationError(source, record, f"not valid JSON ({err})") from None


def read_json(path: str | Path) -> Any:
    """The parsed JSON of an annotation file (strict UTF-8, `parse_json`'s rules); a missing,
    non-UTF-8 or unparsable file is an `AnnotationError`."""
    return parse_json(read_text(path), str(path))


def read_json_lines(path: str | Path, record: str = "line") -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) of every non-blank line of a JSONL file (`parse_json`'s rules)."""
    for number, line in enumerate(read_text(path).splitlines(), start=1):
        if line.strip():
            yield number, parse_json(line, str(path), f"{record} {number}")


def read_csv(path: str | Path, required: tuple[str, ...], delimiter: str = ",") -> list[dict[str, str]]:
    """Rows of a CSV file with a header (strict UTF-8), fields separated by `delimiter` (`"\\t"` for
    TSV). A missing file or column (the message lists the columns found, so a wrong delimiter shows
    as one long column), a row with fewer or more fields than the header, or unreadable CSV is an
    `AnnotationError` naming the line."""
    source = str(path)
    reader = csv.DictReader(io.StringIO(read_text(path), newline=""), delimiter=delimiter)
    try:
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise AnnotationError(
                source, "-", f"missing column(s) {missing} (columns found: {list(reader.fieldnames or [])})"
            )
        rows = []
        for row in reader:
            if None in row:
                raise AnnotationError(
                    source, f"line {reader.line_num}", f"more fields than the header's {len(reader.fieldnames)}"
                )
            if any(row[c] is None for c in reader.fieldnames):
                raise AnnotationError(
                    source, f"line {reader.line_num}", f"fewer fields than the header's {len(reader.fieldnames)}"
                )
            rows.append(row)
        return rows
    except csv.Error as err:
        raise AnnotationError(source, f"line {reader.line_num}", f"not valid CSV ({err})") from None


def first_existing(root: Path, stem: str, exts: tuple[str, ...]) -> str | None:
    """`stem + ext` for the first of `exts` whose file exists under `root` (a release's videos come
    in several containers), else None."""
    return next((f"{stem}{ext}" for ext in exts if (root / f"{stem}{ext}").exists()), None)
