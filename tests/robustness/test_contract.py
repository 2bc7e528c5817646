"""Every bad input of the table (cases.py) ends as one line, `lit-retrieval COMMAND: PATH...: reason`,
with exit status 2 and no traceback: in-process through `cli.main` for every case, and as a real
`lit-retrieval` process for a representative case of each entry point. `--debug` and
`LIT_RETRIEVAL_DEBUG=1` give the traceback instead."""

from __future__ import annotations

import os
import pkgutil
import subprocess
import sys

import pytest

import lit_retrieval.data.datasets
from lit_retrieval.cli import main

from .cases import CASES, Case, by_entry, check, error_line

pytestmark = pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")  # in-process runs pass argv
# dataset modules with no cases, and why: each other module of lit_retrieval/data/datasets/ reads a
# release's files and is the case entry `annotations/<module>`
NO_USER_FILE = {
    "synthetic": "writes its own corpus from a seed, in the canonical format read by `canonical`",
}
DATASETS = sorted(
    m.name for m in pkgutil.iter_modules(lit_retrieval.data.datasets.__path__) if m.name not in NO_USER_FILE
)
ENTRY_POINTS = {
    "media",
    *(f"annotations/{name}" for name in DATASETS),
    "configs",
    "checkpoints",
    "metrics",
    "uvrb report",
    "uvrb",
    "index",
    "search",
    "serve",
    "frame cache",
    "cache-frames",
    "shards",
    "shots",
}


def check_dataset_cases(datasets: list[str], counts: dict[str, int]) -> None:
    """Fail, naming the modules in the first line, when a dataset module has fewer than 4 cases."""
    few = {name: counts.get(f"annotations/{name}", 0) for name in datasets if counts.get(f"annotations/{name}", 0) < 4}
    assert not few, (
        f"dataset module(s) {sorted(few)} have fewer than 4 bad-input cases ({few}): add cases of entry "
        "'annotations/<module>' to tests/robustness/cases.py (docs/extending.md, 'Add a data set')"
    )


def check_entry_points(entry_points: set[str], counts: dict[str, int]) -> None:
    missing, unknown = sorted(entry_points - set(counts)), sorted(set(counts) - entry_points)
    assert not missing and not unknown, f"entry points without cases: {missing}; cases of unknown entries: {unknown}"
    few = {entry: count for entry, count in counts.items() if count < 4}
    assert not few, f"entry points with fewer than 4 cases: {few}"


def test_every_dataset_module_has_cases():
    """A dataset module added to lit_retrieval/data/datasets/ without at least 4 cases fails here."""
    listed = {m.name for m in pkgutil.iter_modules(lit_retrieval.data.datasets.__path__)}
    assert set(NO_USER_FILE) <= listed, "an exempted module no longer exists"
    assert {"canonical", "msrvtt", "msvd", "vatex", "lsmdc", "youcook2", "charades", "table"} <= set(DATASETS)
    check_dataset_cases(DATASETS, by_entry())


def test_every_entry_point_has_cases():
    check_entry_points(ENTRY_POINTS, by_entry())
    assert len({c.id for c in CASES}) == len(CASES)


def test_a_new_dataset_module_without_cases_is_named_in_the_first_line_of_both_failures():
    """What a contributor sees (docs/extending.md, 'Add a data set', step 5): the module's name first."""
    with pytest.raises(AssertionError) as failed:
        check_dataset_cases([*DATASETS, "my_corpus"], by_entry())
    assert "['my_corpus']" in str(failed.value).splitlines()[0]
    with pytest.raises(AssertionError) as failed:
        check_entry_points(ENTRY_POINTS | {"annotations/my_corpus"}, by_entry())
    assert "['annotations/my_corpus']" in str(failed.value).splitlines()[0]


@pytest.mark.parametrize("bad", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_with_exit_status_2(bad: Case, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LIT_RETRIEVAL_DEBUG", raising=False)
    expect = bad.build(tmp_path)
    with pytest.raises(SystemExit) as finished:
        main(list(expect.argv))
    err = capsys.readouterr().err
    assert finished.value.code == 2, err[-3000:]
    check(error_line(err, expect.argv[0]), expect.path, expect.reason)


SUBPROCESS_CASES = [c for c in CASES if c.subprocess]


@pytest.mark.slow  # a fresh interpreter per case (the in-process test above covers every case)
@pytest.mark.parametrize("bad", SUBPROCESS_CASES, ids=[c.id for c in SUBPROCESS_CASES])
def test_lit_retrieval_process_prints_one_line(bad: Case, tmp_path):
    expect = bad.build(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "LIT_RETRIEVAL_DEBUG"}
    out = subprocess.run(
        [sys.executable, "-m", "lit_retrieval", *expect.argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 2, out.stderr[-3000:]
    line = error_line(out.stderr, expect.argv[0])
    check(line, expect.path, expect.reason)
    if expect.argv[0] not in ("fit", "validate", "test", "predict"):  # no library log lines before it
        assert out.stderr.strip() == line


def test_each_entry_point_has_a_process_case():
    assert {c.entry for c in SUBPROCESS_CASES} == {
        "media",
        "configs",
        "metrics",
        "uvrb report",
        "index",
        "search",
        "serve",
        "shots",
    }


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_debug_shows_the_traceback(how, tmp_path, monkeypatch):
    bad = next(c for c in CASES if c.id == "uvrb report:a list")
    expect = bad.build(tmp_path)
    argv = [*expect.argv, "--debug"] if how == "flag" else list(expect.argv)
    if how == "environment":
        monkeypatch.setenv("LIT_RETRIEVAL_DEBUG", "1")
    from lit_retrieval.errors import InputError

    with pytest.raises(InputError, match="expected a JSON object"):
        main(argv)
