"""A plan's `comparisons` (lit_retrieval/grid/plan.py) as `report` tabulates them, on a runs folder
written by hand (done.json, metrics.json and each seed's test score matrix): every figure worked
out by hand from the hits the matrices were built to give; Holm's correction against a worked
example; `compare --min-tokens/--max-tokens` and the plan's refusals."""

import csv
import json

import numpy as np
import pytest
import yaml

from lit_retrieval.commands import run_command
from lit_retrieval.errors import UsageError
from lit_retrieval.grid.plan import load_plan
from lit_retrieval.metrics.paired_scores import holm

# per row and seed, which of the 4 test queries rank their video first
HITS = {"a": [[1, 1, 1, 0], [1, 0, 1, 0]], "b": [[0, 0, 1, 0], [0, 0, 1, 1]]}
TOKENS = [10, 80, 90, 20]  # queries 1 and 2 are over 77 tokens


def matrix(hits: list[int]) -> np.ndarray:
    """Scores whose diagonal (each query's video) is first exactly where `hits` is 1."""
    scores = np.eye(4)
    for query, hit in enumerate(hits):
        if not hit:
            scores[query, (query + 1) % 4] = 2.0
    return scores


def write_runs(root, query_tokens=TOKENS, relational=None):
    ids = {
        **(relational or {}),
        "text_ids": ["v0", "v1", "v2", "v3"],
        "video_ids": ["v0", "v1", "v2", "v3"],
        "targets": [0, 1, 2, 3],
        "num_events": [3, 4, 5, 3],
        "query_tokens": query_tokens,
    }
    for row, seeds in HITS.items():
        for seed, hits in enumerate(seeds):
            run = root / "runs" / row / f"seed{seed}"
            (run / "logs" / "test").mkdir(parents=True)
            np.save(run / "logs" / "test" / "scores.npy", matrix(hits).astype(np.float32))
            (run / "logs" / "test" / "scores_ids.json").write_text(json.dumps(ids))
            metrics = {"test": {"t2v/R@1": 100 * float(np.mean(hits))}}
            (run / "logs" / "test" / "metrics.json").write_text(json.dumps(metrics))
            (run / "done.json").write_text(json.dumps({"metrics": "logs/test/metrics.json", "checkpoint": None}))


def write_plan(root, comparisons):
    plan = {
        "title": "by hand",
        "seeds": [0, 1],
        "metrics": ["t2v/R@1"],
        "rows": [{"name": "a", "configs": []}, {"name": "b", "configs": []}],
        "comparisons": comparisons,
    }
    (root / "plan.yaml").write_text(yaml.safe_dump(plan))
    return root / "plan.yaml"


def test_report_tabulates_each_comparison_worked_by_hand(tmp_path, capsys):
    write_runs(tmp_path)
    plan = write_plan(
        tmp_path,
        [
            {"name": "all", "a": "a", "b": "b"},
            {"name": "long", "a": "a", "b": "b", "tokens": [78, None]},
            {"name": "short", "a": "a", "b": "b", "tokens": [None, 77]},
        ],
    )
    out = tmp_path / "report"
    assert run_command("report", [str(tmp_path / "runs"), "--out", str(out), "--plan", str(plan)]) == 0
    rows = {r["comparison"]: r for r in csv.DictReader((out / "comparisons.csv").open())}
    # hits averaged over the 2 seeds: a [1, .5, 1, 0], b [0, 0, 1, .5]; differences [1, .5, 0, -.5]
    full = rows["all"]
    assert (float(full["r_at_k_a"]), float(full["r_at_k_b"]), float(full["difference"])) == (62.5, 37.5, 25.0)
    # the 8 sign vectors of [1, .5, -.5] sum to 2, 1, 1, 0, 0, -1, -1, -2: |sum| >= 1 in 6 of 8
    assert float(full["p_value"]) == 0.75 and full["queries"] == "4" and full["complete"] == "True"
    long = rows["long"]  # queries 1, 2: a [.5, 1], b [0, 1]; the one nonzero difference flips to itself
    assert (long["queries"], float(long["r_at_k_a"]), float(long["r_at_k_b"])) == ("2", 75.0, 50.0)
    assert float(long["p_value"]) == 1.0 and (long["tokens_low"], long["tokens_high"]) == ("78", "")
    short = rows["short"]  # queries 0, 3: differences [1, -.5]; all 4 sign sums have |sum| >= .5
    assert (short["queries"], float(short["difference"]), float(short["p_value"])) == ("2", 25.0, 1.0)
    # Holm over 0.75, 1, 1: 3 x 0.75 capped at 1, then 1, 1
    assert [float(rows[n]["p_holm"]) for n in ("all", "long", "short")] == [1.0, 1.0, 1.0]
    text = (out / "report.md").read_text()
    assert "## Paired comparisons (test queries)" in text
    assert "| all | a | b | 4 | 2/2 | R@1 62.50 | 37.50 | +25.00 [" in text
    assert "| long | a | b | 2 (78- tokens) | 2/2 |" in text and "comparisons.csv" in capsys.readouterr().out


def test_holm_adjusts_a_worked_example():
    # sorted 0.01, 0.03, 0.04 times 3, 2, 1: 0.03, 0.06, 0.04 -> non-decreasing: 0.03, 0.06, 0.06
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.2]) == pytest.approx([0.5, 0.4]) and holm([0.6, 0.7]) == [1.0, 1.0] and holm([]) == []


def test_compare_slices_by_tokens_and_refuses_files_without_counts(tmp_path, capsys):
    write_runs(tmp_path)
    a = [str(tmp_path / "runs" / "a" / f"seed{s}" / "logs" / "test" / "scores.npy") for s in (0, 1)]
    b = [str(tmp_path / "runs" / "b" / f"seed{s}" / "logs" / "test" / "scores.npy") for s in (0, 1)]
    assert run_command("compare", [*a, "--against", *b, "--min-tokens", "78"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["queries"], out["a"], out["b"], out["tokens"]) == (2, 75.0, 50.0, [78, None])
    assert run_command("compare", [*a, "--against", *b, "--min-tokens", "15", "--max-tokens", "80"]) == 0
    assert json.loads(capsys.readouterr().out)["queries"] == 2  # queries 1 (80) and 3 (20)
    with pytest.raises(UsageError, match=r"no query is in the slice \(100- tokens, all\)"):
        run_command("compare", [*a, "--against", *b, "--min-tokens", "100"])
    old = tmp_path / "old"
    write_runs(old, query_tokens=None)  # written before the counts were saved
    first = old / "runs" / "a" / "seed0" / "logs" / "test" / "scores.npy"
    with pytest.raises(UsageError, match=r"scores_ids.json: has no 'query_tokens'"):
        run_command("compare", [str(first), "--against", str(first), "--max-tokens", "77"])


@pytest.mark.parametrize(
    ("comparison", "message"),
    [
        ({"name": "x", "a": "a", "b": "c"}, r"'b' must name a row \(\['a', 'b'\]\), got 'c'"),
        ({"name": "x", "a": "a", "b": "a"}, "'a' and 'b' are the same row"),
        ({"name": "x", "a": "a", "b": "b", "tokens": [90, 78]}, r"'tokens' \[90, 78\] is empty"),
        ({"name": "x", "a": "a", "b": "b", "k": 0}, "'k' must be an integer >= 1"),
        ({"name": "x", "a": "a", "b": "b", "side": 1}, r"comparisons\[0\] must be a mapping of"),
        ({"name": "x", "a": "a", "b": "b", "queries": "long"}, r"'queries' must be one of \['all', 'relational'"),
    ],
)
def test_a_wrong_comparison_is_refused_naming_the_plan_and_entry(tmp_path, comparison, message):
    plan = write_plan(tmp_path, [comparison])
    with pytest.raises(UsageError, match=message) as refused:
        load_plan(plan)
    assert str(plan) in str(refused.value)


def test_a_comparison_of_runs_without_score_matrices_names_the_missing_file(tmp_path):
    write_runs(tmp_path)
    (tmp_path / "runs" / "b" / "seed1" / "logs" / "test" / "scores.npy").unlink()
    plan = write_plan(tmp_path, [{"name": "all", "a": "a", "b": "b"}])
    with pytest.raises(UsageError, match=r"b/seed1/logs/test/scores.npy: missing: .*save_scores"):
        run_command("report", [str(tmp_path / "runs"), "--out", str(tmp_path / "r"), "--plan", str(plan)])


def test_relational_subsets_follow_salis_rel_multi_rule(tmp_path, capsys):
    # queries 0, 1, 3 relational; their videos have 2, 5, 1, 4 shots; median of all four 3.0: Rel-Multi = {1, 3}
    flags = {"relational": [True, True, False, True], "num_shots": [2, 5, 1, 4], "min_shots": None}
    write_runs(tmp_path, relational=flags)
    plan = write_plan(
        tmp_path,
        [
            {"name": "rel_multi", "a": "a", "b": "b", "queries": "rel_multi"},
            {"name": "non_rel", "a": "a", "b": "b", "queries": "non_relational"},
        ],
    )
    out = tmp_path / "report"
    assert run_command("report", [str(tmp_path / "runs"), "--out", str(out), "--plan", str(plan)]) == 0
    rows = {r["comparison"]: r for r in csv.DictReader((out / "comparisons.csv").open())}
    # Rel-Multi, queries 1 and 3: a [.5, 0], b [0, .5]; non-relational, query 2: a 1, b 1
    assert (rows["rel_multi"]["queries"], float(rows["rel_multi"]["r_at_k_a"])) == ("2", 25.0)
    assert (float(rows["rel_multi"]["r_at_k_b"]), float(rows["rel_multi"]["p_value"])) == (25.0, 1.0)
    assert (rows["non_rel"]["queries"], float(rows["non_rel"]["difference"])) == ("1", 0.0)
    assert "| rel_multi | a | b | 2 (rel_multi) |" in (out / "report.md").read_text()
    capsys.readouterr()
    a = str(tmp_path / "runs" / "a" / "seed0" / "logs" / "test" / "scores.npy")
    flags["min_shots"] = 5  # a fixed threshold: query 1 alone
    (tmp_path / "runs" / "a" / "seed0" / "logs" / "test" / "scores_ids.json").write_text(
        json.dumps(
            {
                **json.loads((tmp_path / "runs" / "a" / "seed0" / "logs" / "test" / "scores_ids.json").read_text()),
                **flags,
            }
        )
    )
    assert run_command("compare", [a, "--against", a, "--queries", "rel_multi"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["queries"], out["queries_subset"]) == (1, "rel_multi")
    write_runs(tmp_path / "plain")
    plain = str(tmp_path / "plain" / "runs" / "a" / "seed0" / "logs" / "test" / "scores.npy")
    with pytest.raises(UsageError, match="has no 'relational' flags"):
        run_command("compare", [plain, "--against", plain, "--queries", "relational"])


def test_comparisons_of_a_row_without_a_finished_seed_are_listed_as_not_run_and_still_counted_by_holm(tmp_path):
    """Issue 56, item 5: such comparisons vanished from report.md and Holm ran over the 1 comparison left. Now
    they are listed as not run, and Holm's m is the plan's 3, the missing p-values counted as 1 (the order
    that gives the run ones the largest multipliers): a vs b's p 0.75 (worked above) becomes min(1, 3 x 0.75)."""
    write_runs(tmp_path)
    plan = yaml.safe_load(write_plan(tmp_path, []).read_text())
    plan["rows"].append({"name": "c", "configs": []})
    plan["comparisons"] = [
        {"name": "ab", "a": "a", "b": "b"},
        {"name": "ac", "a": "a", "b": "c"},
        {"name": "cb", "a": "c", "b": "b"},
    ]
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
    out = tmp_path / "report"
    assert (
        run_command("report", [str(tmp_path / "runs"), "--out", str(out), "--plan", str(tmp_path / "plan.yaml")]) == 0
    )
    rows = {r["comparison"]: r for r in csv.DictReader((out / "comparisons.csv").open())}
    assert list(rows) == ["ab", "ac", "cb"]
    assert float(rows["ab"]["p_value"]) == 0.75 and float(rows["ab"]["p_holm"]) == 1.0
    assert rows["ac"]["test"] == rows["cb"]["test"] == "not run" and rows["ac"]["p_value"] == ""
    text = (out / "report.md").read_text()
    assert "Holm's correction over the plan's 3 comparisons" in text
    assert "| ac | a | c | not run: no finished seed of c |" in text
    assert "| cb | c | b | not run: no finished seed of c |" in text
    assert holm([0.75, 1.0, 1.0]) == [1.0, 1.0, 1.0] and holm([0.01, 1.0, 1.0])[0] == pytest.approx(0.03)
