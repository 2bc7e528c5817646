import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from torchmetrics.retrieval import RetrievalRecall

from lit_retrieval.metrics import RetrievalMetrics, retrieval_metrics, text_to_video_ranks, video_to_text_ranks


def brute_rank(row: np.ndarray, positives: set[int], ties: str) -> float:
    """Rank of the best positive in one row by explicit counting."""
    best = max(row[p] for p in positives)
    greater = sum(1 for j, s in enumerate(row) if s > best and j not in positives)
    equal = sum(1 for j, s in enumerate(row) if s == best and j not in positives)
    return 1 + greater + {"optimistic": 0, "pessimistic": equal, "average": equal / 2}[ties]


def random_scores(rng, texts, videos):
    """Negative values and many ties (scores rounded to a coarse grid)."""
    return np.round(rng.normal(size=(texts, videos)), 1)


@pytest.mark.parametrize("ties", ["optimistic", "pessimistic", "average"])
def test_ranks_match_brute_force_with_several_captions(ties):
    rng = np.random.default_rng(0)
    for _ in range(5):
        scores = random_scores(rng, 40, 15)
        targets = rng.integers(0, 15, 40)
        t2v = text_to_video_ranks(torch.from_numpy(scores), torch.from_numpy(targets), ties, chunk=7)
        assert t2v.tolist() == [brute_rank(scores[i], {targets[i]}, ties) for i in range(40)]
        v2t = video_to_text_ranks(torch.from_numpy(scores), torch.from_numpy(targets), ties, chunk=7)
        with_captions = sorted(set(targets.tolist()))
        expected = [brute_rank(scores[:, v], {i for i in range(40) if targets[i] == v}, ties) for v in with_captions]
        assert v2t.tolist() == expected


def test_summary_values_against_numpy():
    rng = np.random.default_rng(1)
    scores = random_scores(rng, 50, 50)
    out = retrieval_metrics(torch.from_numpy(scores))
    ranks = np.array([brute_rank(scores[i], {i}, "optimistic") for i in range(50)])
    assert out["t2v/R@1"] == pytest.approx(100 * np.mean(ranks <= 1))
    assert out["t2v/R@5"] == pytest.approx(100 * np.mean(ranks <= 5))
    assert out["t2v/MdR"] == pytest.approx(np.median(ranks))
    assert out["t2v/MnR"] == pytest.approx(ranks.mean())
    assert out["t2v/Rsum"] == pytest.approx(out["t2v/R@1"] + out["t2v/R@5"] + out["t2v/R@10"])
    ranks_v = np.array([brute_rank(scores[:, i], {i}, "optimistic") for i in range(50)])
    assert out["v2t/MnR"] == pytest.approx(ranks_v.mean())


def test_agrees_with_torchmetrics_on_positive_scores():
    rng = np.random.default_rng(2)
    scores = torch.from_numpy(rng.random((30, 30)))  # distinct, positive: torchmetrics is exact here
    target = torch.eye(30, dtype=torch.bool)
    indexes = torch.arange(30).unsqueeze(1).expand(30, 30)
    for k in (1, 5, 10):
        reference = RetrievalRecall(top_k=k)(scores.flatten(), target.flatten(), indexes=indexes.flatten())
        assert retrieval_metrics(scores)[f"t2v/R@{k}"] == pytest.approx(100 * float(reference))


def test_negative_scores_are_not_misses():
    scores = torch.tensor([[-0.1, -0.9], [-0.8, -0.2]])
    assert retrieval_metrics(scores)["t2v/R@1"] == 100.0


def test_metric_class_accumulates_and_drops_duplicate_rows():
    rng = np.random.default_rng(3)
    scores = torch.from_numpy(random_scores(rng, 20, 20))
    metric = RetrievalMetrics()
    metric.update(scores[:12], torch.arange(12), torch.arange(12))
    metric.update(scores[8:], torch.arange(8, 20), torch.arange(8, 20))  # rows 8..11 twice
    assert metric.compute() == retrieval_metrics(scores)


def test_bad_inputs_are_clear_errors():
    with pytest.raises(ValueError, match="needs text-to-video targets"):
        retrieval_metrics(torch.zeros(3, 4))
    with pytest.raises(ValueError, match="NaN"):
        retrieval_metrics(torch.tensor([[float("nan")]]))
    with pytest.raises(ValueError, match="index the 2 video columns"):
        retrieval_metrics(torch.zeros(2, 2), torch.tensor([0, 5]))


def test_metrics_command_prints_json(tmp_path):
    rng = np.random.default_rng(4)
    scores = random_scores(rng, 12, 6)
    targets = rng.integers(0, 6, 12)
    np.save(tmp_path / "sim.npy", scores)
    np.save(tmp_path / "idx.npy", targets)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "lit_retrieval",
            "metrics",
            str(tmp_path / "sim.npy"),
            "--text-video",
            str(tmp_path / "idx.npy"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout) == pytest.approx(
        retrieval_metrics(torch.from_numpy(scores), torch.from_numpy(targets))
    )
    bad = subprocess.run(
        [sys.executable, "-m", "lit_retrieval", "metrics", str(tmp_path / "nope.npy")], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "nope.npy" in bad.stderr


def test_group_max_differs_from_strict_by_hand():
    """Captions a1 (video 0) and b1, b2, b3 (video 1). Video 0's column: a1 0.5, b1 0.6, b2 0.7, b3 0.1.
    Strict: two captions of video 1 beat a1, rank 3. CLIP4Clip's group maximum: video 1's group
    scores video 0 by max(0.6, 0.7, 0.1) = 0.7 > 0.5, one group above, rank 2. Video 1 (best
    caption b1 at 0.9 against a1's 0.2) is first under both."""
    scores = torch.tensor([[0.5, 0.2], [0.6, 0.9], [0.7, 0.3], [0.1, 0.8]])
    targets = torch.tensor([0, 1, 1, 1])
    assert video_to_text_ranks(scores, targets).tolist() == [3.0, 1.0]
    assert video_to_text_ranks(scores, targets, rule="group_max").tolist() == [2.0, 1.0]
    strict, group = retrieval_metrics(scores, targets), retrieval_metrics(scores, targets, v2t_rule="group_max")
    assert strict["v2t/MnR"] == 2.0 and group["v2t_group_max/MnR"] == 1.5
    assert "v2t/MnR" not in group and strict["t2v/MnR"] == group["t2v/MnR"]  # T2V: one query per caption


def clip4clip_v2t_ranks(scores: np.ndarray, targets: np.ndarray) -> list[float]:
    """CLIP4Clip (metrics.py) re-derived: captions grouped per video into a [videos, max captions,
    videos] tensor padded with -inf, the max over the captions (`tensor_video_to_text_sim`), its
    transpose ranked row by row with the positive on the diagonal (`compute_metrics`)."""
    videos = scores.shape[1]
    groups = [[i for i in range(len(targets)) if targets[i] == v] for v in range(videos)]
    longest = max(len(g) for g in groups)
    padded = np.full((videos, longest, videos), -np.inf)
    for v, group in enumerate(groups):
        for c, i in enumerate(group):
            padded[v, c] = scores[i]
    group_by_video = padded.max(axis=1).T  # [video, group]
    ranks = []
    for v in range(videos):
        ranks.append(1.0 + sum(1 for g in range(videos) if g != v and group_by_video[v, g] > group_by_video[v, v]))
    return ranks


@pytest.mark.parametrize("chunk", [2, 7, 4096])  # groups of about five rows split over up to three blocks
def test_group_max_matches_clip4clip_reference(chunk):
    rng = np.random.default_rng(3)
    for _ in range(5):
        scores = rng.random((60, 12))  # distinct: CLIP4Clip breaks ties by sort order
        targets = np.concatenate([np.arange(12), rng.integers(0, 12, 48)])
        got = video_to_text_ranks(torch.from_numpy(scores), torch.from_numpy(targets), chunk=chunk, rule="group_max")
        assert got.tolist() == clip4clip_v2t_ranks(scores, targets)


@pytest.mark.parametrize("ties", ["optimistic", "pessimistic", "average"])
def test_group_max_ties_count_tied_groups(ties):
    """Video 0's best caption 0.5 is tied by video 1's group (max 0.5) and beaten by video 2's (0.6)."""
    scores = torch.tensor([[0.5, 0.0, 0.0], [0.5, 0.9, 0.0], [0.4, 0.0, 0.9], [0.6, 0.0, 0.8], [0.5, 0.1, 0.1]])
    targets = torch.tensor([0, 1, 2, 2, 1])
    first = video_to_text_ranks(scores, targets, ties, chunk=2, rule="group_max")[0].item()
    assert first == {"optimistic": 2.0, "pessimistic": 3.0, "average": 2.5}[ties]
