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


@pytest.mark.parametrize(
    "weights,message",
    [
        (["0", "0"], r"--weights are all zero \(\[0.0, 0.0\]\)"),
        (["nan", "1"], r"--weights must be finite"),
        (["inf", "1"], r"--weights must be finite"),
        (["1"], r"--weights has 1 value\(s\) for 2 matrices"),
    ],
)
def test_unusable_weights_are_one_line_errors(tmp_path, capsys, weights, message):
    a, b = save(tmp_path, "a", A), save(tmp_path, "b", B)
    with pytest.raises(SystemExit) as exit_info:
        main(["metrics", "--ensemble", a, b, "--weights", *weights])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1 and err.startswith("lit-retrieval metrics: ")
    assert re.search(message, err) and "Traceback" not in err


# text 0 and 1 relational; their videos have 40 and 10 shots (text 2's 50): Rel-Multi at 34 shots = text 0
RELATIONAL = {**IDS, "relational": [True, True, False], "num_shots": [40, 10, 50], "min_shots": 34}


def test_rel_multi_of_members_and_ensemble_from_the_ids_flags(tmp_path, capsys):
    a, b = save(tmp_path, "a", A, RELATIONAL), save(tmp_path, "b", B, RELATIONAL)
    # ranks (worked above): A 1, 2, 2; B 2, 1, 1; (A + B) / 2: 1, 1, 1
    only_a = metrics(capsys, a)
    assert only_a["rel_multi/n"] == 1 and only_a["rel_multi/t2v/R@1"] == 100
    assert only_a["relational/n"] == 2 and only_a["relational/t2v/R@1"] == 50
    assert only_a["non_relational/t2v/R@1"] == 0 and only_a["rel_multi/min_shots"] == 34
    assert metrics(capsys, b)["rel_multi/t2v/R@1"] == 0  # text 0 ranks v1 (0.9) above v0 (0.3)
    both = metrics(capsys, "--ensemble", a, b)
    assert both["rel_multi/t2v/R@1"] == 100 and both["relational/t2v/R@1"] == 100
    # --min-shots 5 puts text 1 (10 shots) into Rel-Multi too: A ranks it second
    wider = metrics(capsys, a, "--min-shots", "5")
    assert wider["rel_multi/n"] == 2 and wider["rel_multi/t2v/R@1"] == 50
    # min_shots null: the median shot count of the queries' videos (40) -> text 0 only
    median = metrics(capsys, save(tmp_path, "c", A, {**RELATIONAL, "min_shots": None}))
    assert median["rel_multi/min_shots"] == 40 and median["rel_multi/n"] == 1


def test_ids_without_relational_flags_still_score_with_a_note(tmp_path, capsys):
    old = save(tmp_path, "old", A)  # written before `test` saved the flags
    assert run_command("metrics", [old]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["t2v/R@1"] == pytest.approx(100 / 3) and "rel_multi/n" not in json.loads(out.out)
    assert "old_ids.json has no relational flags or shot counts" in out.err and "no Rel-Multi" in out.err
    # relational evaluation off when the file was written: no flags, no note
    off = save(tmp_path, "off", A, {**IDS, "relational": None, "num_shots": None, "min_shots": None})
    assert run_command("metrics", [off]) == 0
    assert capsys.readouterr().err == ""
    # an old member and a new one: the new member's flags
    new = save(tmp_path, "new", B, RELATIONAL)
    assert metrics(capsys, "--ensemble", old, new)["rel_multi/t2v/R@1"] == 100


@pytest.mark.parametrize(
    "broken,message",
    [
        ({"relational": [True, False]}, "must be lists of 3 values"),
        ({"num_shots": None}, "has 'relational' without 'num_shots'"),
        ({"num_shots": [1, -1, 2]}, "counts >= 0"),
        ({"relational": [1, 0, 0]}, "true/false"),
        ({"min_shots": "34"}, "'min_shots' must be a count"),
    ],
)
def test_broken_relational_entries_are_one_line_errors(tmp_path, capsys, broken, message):
    a = save(tmp_path, "a", A, {**RELATIONAL, **broken})
    with pytest.raises(SystemExit) as exit_info:
        main(["metrics", a])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "a_ids.json" in err and message in err
