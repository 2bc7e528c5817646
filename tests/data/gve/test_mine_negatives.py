"""Hard-negative mining: exact top-k without the positive, and the command end to end against a
brute-force ranking with the same prober."""

from __future__ import annotations

import json

import numpy as np
import torch

from lit_retrieval.data.gve.negatives import hardest_negatives
from lit_retrieval.data.gve.tasks import TaskSpec, read_task
from lit_retrieval.models.gve import GVEEmbedder, InputConfig


def test_mine_returns_top_k_without_positives():
    corpus = np.eye(5, dtype=np.float32)
    queries = np.array([[0.9, 0.5, 0.4, 0.1, 0.0], [0.0, 0.2, 0.1, 0.3, 1.0]], dtype=np.float32)
    assert hardest_negatives(queries, corpus, [{0}, {3}], k=2) == [[1, 2], [4, 1]]
    assert hardest_negatives(queries, corpus, [{0}, {4}], k=10) == [[1, 2, 3, 4], [3, 1, 2, 0]]


def test_mine_negatives_command_matches_brute_force(tmp_path, tiny_qwen, gve_tasks):
    spec = next(s for s in gve_tasks["train"] if s.name == "syn_t2v")
    out = tmp_path / "mined.jsonl"
    from lit_retrieval.commands import run_command

    assert (
        run_command(
            "mine-negatives",
            ["--model", str(tiny_qwen), "--task", spec.path, "--format", "T->V", "--out", str(out), "--k", "2"],
        )
        == 0
    )
    mined = read_task(TaskSpec("mined", str(out), "T->V", num_negatives=2))
    source = read_task(TaskSpec("src", spec.path, "T->V"))
    assert [r.record_id for r in mined] == [r.record_id for r in source]
    assert all(r.positive == s.positive for r, s in zip(mined, source))
    assert all(n.key != r.positive.key for r in mined for n in r.negatives)
    prober = GVEEmbedder(str(tiny_qwen), lora=None, inputs=InputConfig()).eval()
    candidates = list({r.positive.key: r.positive for r in source}.values())
    scores = prober.embed([r.query for r in source[:5]]) @ prober.embed(candidates).t()
    for row, record in zip(scores, mined[:5]):
        ranked = [
            candidates[j]
            for j in torch.argsort(row, descending=True).tolist()
            if candidates[j].key != record.positive.key
        ]
        assert [n.key for n in record.negatives] == [c.key for c in ranked[:2]]
    assert json.loads(out.read_text().splitlines()[0])["negatives"][0]["video"].endswith(".mp4")


def test_a_corpus_of_other_modality_or_bad_json_is_one_line(tmp_path, tiny_qwen, gve_tasks, capsys):
    import pytest

    from lit_retrieval.cli import main

    spec = next(s for s in gve_tasks["train"] if s.name == "syn_t2v")
    for content, reason in (('"a caption"\n', "corpus item is T, the task's targets are V"), ("{\n", "not valid JSON")):
        corpus = tmp_path / "corpus.jsonl"
        corpus.write_text(content)
        argv = ["mine-negatives", "--model", str(tiny_qwen), "--task", spec.path, "--format", "T->V"]
        with pytest.raises(SystemExit) as exit_:
            main([*argv, "--out", str(tmp_path / "out.jsonl"), "--corpus", str(corpus)])
        assert exit_.value.code == 2
        lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("lit-retrieval")]
        assert len(lines) == 1 and f"{corpus}:1: {reason}" in lines[0], lines
