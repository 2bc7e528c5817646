"""The paired comparison (`lit_retrieval/metrics/paired.py`, `lit-retrieval compare`) against
outside references: p-values enumerated by hand, scipy's exact binomial test (one run per side:
the sign-flip test of -1/0/1 differences is the two-sided sign test), the add-one Monte Carlo
p-value worked out for an extreme case, and the normal approximation of the bootstrap interval;
the command on score files whose ranks are read off by hand."""

import json

import numpy as np
import pytest
from scipy.stats import binomtest

from lit_retrieval.cli import main
from lit_retrieval.commands import run_command
from lit_retrieval.metrics.paired import paired_comparison


def test_four_queries_enumerated_by_hand():
    # A hits queries 0-2, B only query 2: differences [1, 1, 0, 0]; the 4 sign vectors of the two
    # nonzero ones give sums 2, 0, 0, -2, so |sum| >= 2 in 2 of 4: p = 0.5
    result = paired_comparison(np.array([[1.0, 1, 1, 0]]), np.array([[0.0, 0, 1, 0]]))
    assert (result.mean_a, result.mean_b, result.difference) == (0.75, 0.25, 0.5)
    assert result.exact and result.p_value == 0.5


def test_runs_are_averaged_per_query_before_the_difference():
    # A's two runs hit query 0 once: 0.5; B never: differences [0.5, 0]; both signs of 0.5 are as
    # extreme as the observation: p = 1
    result = paired_comparison(np.array([[1.0, 0], [0, 0]]), np.array([[0.0, 0]]))
    assert result.difference == 0.25 and result.p_value == 1.0


@pytest.mark.parametrize("seed", range(6))
def test_one_run_per_side_is_scipys_exact_sign_test(seed):
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, 2, 40).astype(float), rng.integers(0, 2, 40).astype(float)
    b[13:] = a[13:]  # at most 13 discordant queries: 2^13 sign vectors are enumerated
    wins, discordant = int(np.sum(a > b)), int(np.sum(a != b))
    result = paired_comparison(a[None], b[None])
    assert result.exact
    expected = binomtest(wins, discordant, 0.5).pvalue if discordant else 1.0
    assert result.p_value == pytest.approx(expected, rel=1e-12)


def test_random_flips_give_the_add_one_p_value():
    # 30 queries A hits and B misses: of 2^30 sign vectors only 2 are as extreme, so 1,000 random
    # flips find none (chance 1.9e-6) and p = (0 + 1) / (1000 + 1)
    result = paired_comparison(np.ones((1, 30)), np.zeros((1, 30)), permutations=1000)
    assert not result.exact and result.p_value == 1 / 1001


def test_random_flips_estimate_the_exact_binomial_p_value():
    a = np.zeros(60)
    a[:26], b = 1, np.zeros(60)
    b[26:40] = 1  # 40 discordant queries, 26 won by A
    expected = binomtest(26, 40, 0.5).pvalue  # 0.0807
    result = paired_comparison(a[None], b[None], permutations=20_000, seed=3)
    assert not result.exact
    assert abs(result.p_value - expected) < 4 * np.sqrt(expected * (1 - expected) / 20_000)


def test_bootstrap_interval_matches_the_normal_approximation():
    rng = np.random.default_rng(0)
    a, b = (rng.random(400) < 0.6).astype(float), (rng.random(400) < 0.45).astype(float)
    result = paired_comparison(a[None], b[None], resamples=20_000, seed=1)
    d = a - b
    half = 1.96 * d.std() / np.sqrt(len(d))
    assert result.ci95 == pytest.approx((d.mean() - half, d.mean() + half), abs=0.1 * half)
    constant = paired_comparison(np.ones((1, 5)), np.zeros((1, 5)))
    assert constant.ci95 == (1.0, 1.0)


IDS = {"text_ids": ["q0", "q1", "q2", "q3"], "video_ids": ["v0", "v1", "v2", "v3"], "targets": [0, 1, 2, 3]}


def save(folder, name, scores, ids=IDS):
    np.save(folder / f"{name}.npy", np.asarray(scores, dtype=np.float32))
    (folder / f"{name}_ids.json").write_text(json.dumps(ids))
    return str(folder / f"{name}.npy")


def test_the_command_on_score_files_ranked_by_hand(tmp_path, capsys):
    # A ranks the target first for queries 0-2 (query 3's target scores 0.1 < 0.9); B only for query 2
    a = save(tmp_path, "a", np.eye(4) + np.array([[0, 0, 0, 0]] * 3 + [[0.9, 0, 0, -0.9]]))
    b = save(tmp_path, "b", np.array([[0, 1, 0.5, 0], [1, 0, 0.5, 0], [0, 0, 1, 0], [1, 0, 0, 0.5]]))
    assert run_command("compare", [a, "--against", b]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["metric"] == "t2v/R@1" and out["runs"] == [1, 1] and out["queries"] == 4
    assert (out["a"], out["b"], out["difference"], out["p_value"]) == (75.0, 25.0, 50.0, 0.5)
    # R@2 (A given twice: two runs): query 3 is second in A; B ranks queries 0 and 1 third: 100 vs 50
    assert run_command("compare", [a, a, "--against", b, "--k", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["a"], out["b"], out["runs"]) == (100.0, 50.0, [2, 1])


def test_matrices_of_other_queries_are_one_line_naming_both_files(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("LIT_RETRIEVAL_DEBUG", raising=False)
    a = save(tmp_path, "a", np.eye(4))
    b = save(tmp_path, "b", np.eye(4), {**IDS, "video_ids": ["v1", "v0", "v2", "v3"]})
    with pytest.raises(SystemExit) as finished:
        main(["compare", a, "--against", b])
    err = capsys.readouterr().err.strip()
    assert finished.value.code == 2 and "\n" not in err and "Traceback" not in err
    assert err == f"lit-retrieval compare: video_ids differ between {a[:-4]}_ids.json and {b[:-4]}_ids.json " + (
        "(first at position 0)"
    )
