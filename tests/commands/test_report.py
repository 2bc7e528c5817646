"""`lit-retrieval report` option errors are one line naming the option, exit 2 (issue 56, item 5: `--digits -1`
was a ValueError traceback from the table's format)."""

from __future__ import annotations

import pytest

from lit_retrieval.cli import main


def test_negative_digits_are_refused_before_anything_is_read(tmp_path, capsys):
    with pytest.raises(SystemExit) as finished:
        main(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "report"), "--digits", "-1"])
    assert finished.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("lit-retrieval report: ") and "--digits must be at least 0, got -1" in last
    assert not (tmp_path / "report").exists()
