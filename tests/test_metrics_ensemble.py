"""`lit-retrieval metrics --ensemble`: SALI's score-ensembling control (Sec. 5 (a)), on matrices
whose ranks are worked out by hand."""

import json
import re

import numpy as np
import pytest

from lit_retrieval.cli import main
from lit_retrieval.commands import run_command

A = np.array([[0.9, 0.1, 0.0], [0.8, 0.5, 0.1], [0.0, 0.6, 0.2]], dtype=np.float32)
B = np.array([[0.3, 0.9, 0.0], [0.0, 0.9, 0.0], [0.1, 0.0, 1.0]], dtype=np.float32)
IDS = {"text_ids": ["v0", "v1", "v2"], "video_ids": ["v0", "v1", "v2"], "targets": [0, 1, 2]}


def save(folder, name, scores, ids=IDS):
    np.save(folder / f"{name}.npy", scores)
    if ids is not None:
        (folder / f"{name}_ids.json").write_text(json.dumps(ids))
    return str(folder / f"{name}.npy")


def metrics(capsys, *argv):
    assert run_command("metrics", list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_members_and_their_average_ranked_by_hand(tmp_path, capsys):
    a, b = save(tmp_path, "a", A), save(tmp_path, "b", B)
    # A alone: text 0 ranks v0 first; text 1: 0.8 > 0.5 -> rank 2; text 2: 0.6 > 0.2 -> rank 2
    assert metrics(capsys, a)["t2v/R@1"] == pytest.approx(100 / 3)
    # B alone: text 0: 0.9 > 0.3 -> rank 2; texts 1 and 2 rank 1
    assert metrics(capsys, b)["t2v/R@1"] == pytest.approx(200 / 3)
    # (A + B) / 2 = [[.6 .5 0] [.4 .7 .05] [.05 .3 .6]]: every text and every video ranks its match first
    both = metrics(capsys, "--ensemble", a, b)
    assert both["t2v/R@1"] == 100 and both["v2t/R@1"] == 100 and both["t2v/MnR"] == 1
    # 0.9 A + 0.1 B: text 0 [.84 .18 0] rank 1; text 1 [.72 .54 .09] rank 2; text 2 [.01 .54 .28] rank 2
    skewed = metrics(capsys, "--ensemble", a, b, "--weights", "0.9", "0.1")
    assert (
        skewed["t2v/R@1"] == pytest.approx(100 / 3)
        and skewed["t2v/MnR"] == pytest.approx(5 / 3)
        and skewed["t2v/MdR"] == 2
    )


def test_targets_come_from_the_ids_file(tmp_path, capsys):
    # two queries of v1 and one of v0 against a two-video gallery, as `test` writes them
    ids = {"text_ids": ["v1", "v0", "v1"], "video_ids": ["v0", "v1"], "targets": [1, 0, 1]}
    scores = np.array([[0.2, 0.9], [0.1, 0.3], [0.5, 0.4]], dtype=np.float32)  # ranks 1, 2, 2
    a, b = save(tmp_path, "a", scores, ids), save(tmp_path, "b", scores, ids)
    assert metrics(capsys, a)["t2v/R@1"] == pytest.approx(100 / 3)
    assert metrics(capsys, "--ensemble", a, b)["t2v/R@1"] == pytest.approx(100 / 3)  # same matrix twice


@pytest.mark.parametrize(
    "case,message",
    [
        ("shape", r"b.npy has shape \(3, 2\), .*a.npy has \(3, 3\)"),
        ("video_order", r"video_ids differ between .*a_ids.json and .*b_ids.json \(first at position 0\)"),
        ("no_ids", r"a.npy has an ids file but .*b.npy has none"),
        ("weights", r"--weights has 3 value\(s\) for 2 matrices"),
        ("one", r"--ensemble needs at least two matrices"),
    ],
)
def test_mismatched_members_are_refused(tmp_path, capsys, case, message):
    a = save(tmp_path, "a", A)
    if case == "shape":
        b = save(tmp_path, "b", B[:, :2], {**IDS, "video_ids": ["v0", "v1"]})
    elif case == "video_order":
        b = save(tmp_path, "b", B[:, [1, 0, 2]], {**IDS, "video_ids": ["v1", "v0", "v2"], "targets": [1, 0, 2]})
    else:
        b = save(tmp_path, "b", B, None if case == "no_ids" else IDS)
    argv = {"one": ["--ensemble", a], "weights": ["--ensemble", a, b, "--weights", "1", "1", "1"]}.get(
        case, ["--ensemble", a, b]
    )
    with pytest.raises(SystemExit) as exit_info:  # the CLI: one line on stderr, exit status 2
        main(["metrics", *argv])
    assert exit_info.value.code == 2
    assert re.search(message, capsys.readouterr().err)


def test_an_ids_file_that_does_not_fit_its_matrix_is_refused(tmp_path, capsys):
    a = save(tmp_path, "a", A, {**IDS, "targets": [0, 1]})
    with pytest.raises(SystemExit) as exit_info:
        main(["metrics", a])
    assert exit_info.value.code == 2
    assert "2 targets and 3 video ids do not fit" in capsys.readouterr().err
