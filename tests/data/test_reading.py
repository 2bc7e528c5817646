"""`read_csv` with a delimiter of the caller's (TSV), and `number_or_text`: numbers written as text."""

from __future__ import annotations

import math
import re

import pytest

from lit_retrieval.data.reading import read_csv
from lit_retrieval.data.records import AnnotationError, number_or_text


def test_read_csv_reads_a_tab_separated_file_and_names_the_columns_found(tmp_path):
    path = tmp_path / "captions.tsv"
    path.write_text("video\tcaption\tduration\na.mp4\ta dog, running\t2.0\n")
    assert read_csv(path, ("video", "caption"), delimiter="\t") == [
        {"video": "a.mp4", "caption": "a dog, running", "duration": "2.0"}
    ]
    expected = "missing column(s) ['video'] (columns found: ['video\\tcaption\\tduration'])"
    with pytest.raises(AnnotationError, match=re.escape(expected)):
        read_csv(path, ("video",))  # read with the default comma: one long column


@pytest.mark.parametrize(("value", "expected"), [("2.0", 2.0), (" 3 ", 3.0), ("1e1", 10.0), (4, 4.0), (0.5, 0.5)])
def test_number_or_text_takes_numbers_and_their_text(value, expected):
    assert number_or_text(value, "t.csv", "row 1", "duration") == expected


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("two", "duration 'two' is not a number"),
        ("nan", "duration 'nan' is not a finite number"),
        ("inf", "duration 'inf' is not a finite number"),
        ("", "duration '' is not a number"),
        (math.inf, "duration must be a finite number"),
        (True, "duration must be a finite number"),
        (None, "duration must be a finite number"),
    ],
)
def test_number_or_text_refuses_what_is_no_finite_number(value, reason):
    with pytest.raises(AnnotationError, match=rf"t.csv: record 'row 1': {reason}"):
        number_or_text(value, "t.csv", "row 1", "duration")
