"""`lit-retrieval synth` refuses a corpus it cannot write as asked: an event dealt into more videos than there
are (issue 56, item 5: `--num-videos 3 --occurrences 10 10` wrote events into 2-3 videos; `--occurrences 1
2000000000` tried to allocate 13 GiB), as one line naming the option, exit 2, before any work."""

from __future__ import annotations

import pytest

from lit_retrieval.cli import main


@pytest.mark.parametrize("occurrences", [["10", "10"], ["1", "2000000000"], ["3", "4"]])
def test_occurrences_above_the_number_of_videos_are_refused(occurrences, tmp_path, capsys):
    with pytest.raises(SystemExit) as finished:
        main(["synth", "--out", str(tmp_path / "c"), "--num-videos", "3", "--occurrences", *occurrences])
    assert finished.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("lit-retrieval synth: ") and "--occurrences" in last and "--num-videos (3)" in last
    assert not (tmp_path / "c").exists()
