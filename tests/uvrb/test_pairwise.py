"""UVRB with pairwise heads: every non-indexable head of the zoo scores a tiny task through its
cached representations and `score_blocks`, and the metrics equal a brute-force loop that scores
each (query, item) pair alone with the head's own forward; video -> text tasks score the
transposed pairs; tasks a head cannot pair are skipped with the reason."""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pytest
import torch

from lit_retrieval.commands import run_command
from lit_retrieval.data.annotations import load_annotations
from lit_retrieval.data.media.shots import frame_shot_index
from lit_retrieval.data.media.normalize import NormalizeFrames
from lit_retrieval.errors import ConfigError
from lit_retrieval.data.media.video import SamplingSpec, sample_video
from lit_retrieval.models.encoders import CLIPEncoder
from lit_retrieval.models.heads import (
    PAUHead,
    SALIHead,
    TightTransfHead,
    TS2NetHead,
    UATVRHead,
    UCoFiAHead,
    XCLIPHead,
)
from lit_retrieval.modules import DualEncoderRetrieval, SALIRetrieval
from lit_retrieval.search.cache import EmbeddingCache
from lit_retrieval.search.embedders import HeadItemEncoder
from lit_retrieval.uvrb.runner import evaluate_task
from lit_retrieval.uvrb.tasks import RetrievalTaskSpec, load_retrieval_task
from helpers.fit_configs import clip_fit_config

FRAMES, SIZE = 4, 32
PAIRWISE: dict[str, Callable] = {
    "tightTransf": lambda: TightTransfHead(layers=1, dropout=0.0),
    "xclip": lambda: XCLIPHead(max_words=80, max_frames=8, temporal_layers=1),
    "ts2net": lambda: TS2NetHead(select=2, samples=16, temporal_layers=1, max_frames=8),
    "ucofia": lambda: UCoFiAHead(select=2, samples=16, temporal_layers=1, max_frames=8, max_words=80, sk_norm_bank=4),
    "uatvr": lambda: UATVRHead(layers=1, max_frames=12, max_words=80, samples=3),
    "pau": lambda: PAUHead(prototypes=4, layers=1, max_frames=8),
    "sali": lambda: SALIHead(),
}
TINY_MB = 64 / 2**20  # 64 bytes: one or two query rows per block, one pair per head block


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture(scope="module")
def tasks(corpus, tmp_path_factory):
    """Text -> video (`MSRVTT`: each of 5 videos' first two events), the same pairs as video ->
    text (`V2T`) and text -> text (`T2T`), in the documented task layout."""
    root = tmp_path_factory.mktemp("uvrb_pairwise")
    videos = [v for v in load_annotations(corpus / "annotations.json") if v.split == "test"][:5]
    texts = [(f"{v.video_id}-{k}", e.description, v.video_id) for v in videos for k, e in enumerate(v.events[:2])]
    items = [{"id": v.video_id, "video": str(corpus / v.path)} for v in videos]
    captions = [{"id": t, "text": d} for t, d, _ in texts]
    layouts = {
        "MSRVTT": (items, captions, [{"query_id": t, "corpus_id": v} for t, _, v in texts]),
        "V2T": (captions, items, [{"query_id": v, "corpus_id": t} for t, _, v in texts]),
        "T2T": (captions, captions, [{"query_id": t, "corpus_id": t} for t, _, _ in texts]),
    }
    for name, (corpus_rows, query_rows, qrels) in layouts.items():
        (root / name).mkdir()
        write_jsonl(root / name / "corpus.jsonl", corpus_rows)
        write_jsonl(root / name / "queries.jsonl", query_rows)
        write_jsonl(root / name / "qrels.jsonl", qrels)
    return root


def two_shots(paths: list[str]) -> list[list[tuple[float, float]]]:
    """Every video cut into two shots at 1 s (SALI's head needs each frame's shot)."""
    return [[(0.0, 1.0), (1.0, 1e9)] for _ in paths]


def module_with(name: str, tiny_clip) -> DualEncoderRetrieval:
    torch.manual_seed(0)
    kind = SALIRetrieval if name == "sali" else DualEncoderRetrieval
    return kind(CLIPEncoder(pretrained=str(tiny_clip)), PAIRWISE[name]()).eval()


@torch.no_grad()
def brute_force_scores(module, text_queries: bool, data, shots) -> torch.Tensor:
    """`[queries, corpus]`: every (text, video) pair scored alone with the head's `score` of the
    module's own text and video forward (frames sampled and normalised as the data module does)."""

    def text(item):
        return module.query_reps([[item.text]])

    def video(item):
        sample = sample_video(item.video, SamplingSpec(FRAMES, SIZE))
        batch = {"frames": NormalizeFrames()(sample.frames)[None], "frame_mask": torch.from_numpy(sample.mask)[None]}
        if shots is not None:
            batch["frame_shots"] = torch.from_numpy(frame_shot_index(sample.times, shots([item.video])[0]))[None]
        return module.encode_videos(batch)

    side_q, side_c = (text, video) if text_queries else (video, text)
    corpus = [side_c(c) for c in data.corpus]
    pair = (lambda q, c: module.head.score(q, c)) if text_queries else (lambda q, c: module.head.score(c, q))
    return torch.tensor([[float(pair(rep, c)) for c in corpus] for rep in map(side_q, data.queries)])


def reference_metrics(scores: torch.Tensor, relevant: list[list[int]]) -> dict[str, float]:
    """A ranked list per query: each relevant item's rank counts every item scored above it
    (other relevant ones too); R@k averages the share of relevant items within k, MnR the best rank."""
    ranks = [[1 + int((row > row[j]).sum()) for j in rel] for row, rel in zip(scores, relevant)]
    out = {f"R@{k}": float(np.mean([np.mean([r <= k for r in rs]) for rs in ranks])) for k in (1, 5, 10)}
    return out | {"MnR": float(np.mean([min(rs) for rs in ranks]))}


@pytest.mark.parametrize("name", list(PAIRWISE))
def test_pairwise_head_metrics_equal_pair_by_pair_scoring(name, tiny_clip, tasks, tmp_path):
    module = module_with(name, tiny_clip)
    shots = two_shots if name == "sali" else None
    encoder = HeadItemEncoder(module, name, FRAMES, SIZE, shots=shots, shot_key="two")
    cache = EmbeddingCache(tmp_path / "cache")
    spec = RetrievalTaskSpec("MSRVTT", str(tasks / "MSRVTT"))
    got = evaluate_task(encoder, spec, cache, batch_size=3, memory_mb=TINY_MB)
    data = load_retrieval_task(spec)
    expected = reference_metrics(brute_force_scores(module, True, data, shots), data.relevant)
    assert got["queries"] == 10 and got["corpus"] == 5 and got["score"] == got["R@1"]
    assert 1 < expected["MnR"] and 0 < expected["R@1"] < 1  # a ranking that can be got wrong
    assert {k: got[k] for k in expected} == pytest.approx(expected)
    assert ("note" in got) == (name == "ucofia")  # SK-norm's training-query bank does not exist here
    again = evaluate_task(encoder, spec, cache, batch_size=3, memory_mb=TINY_MB)
    assert (cache.hits, cache.misses) == (2, 2) and again == got  # representations cached, dtypes kept


def test_video_to_text_scores_the_transposed_pairs_and_other_tasks_are_skipped(tiny_clip, tasks):
    module = module_with("xclip", tiny_clip)
    encoder = HeadItemEncoder(module, "xclip", FRAMES, SIZE)
    spec = RetrievalTaskSpec("V2T", str(tasks / "V2T"))
    got = evaluate_task(encoder, spec, EmbeddingCache(None), batch_size=4, memory_mb=TINY_MB)
    data = load_retrieval_task(spec)
    assert [len(r) for r in data.relevant] == [2] * 5  # two captions per video
    expected = reference_metrics(brute_force_scores(module, False, data, None), data.relevant)
    assert {k: got[k] for k in expected} == pytest.approx(expected) and expected["R@1"] < 1
    skipped = evaluate_task(encoder, RetrievalTaskSpec("T2T", str(tasks / "T2T")), EmbeddingCache(None))
    assert skipped["skipped"] == "XCLIPHead scores texts against videos, not T queries against T items"


def test_a_head_without_its_test_time_fit_is_refused(tiny_clip, tasks):
    torch.manual_seed(0)
    module = DualEncoderRetrieval(CLIPEncoder(pretrained=str(tiny_clip)), PAUHead(prototypes=4, layers=1, rerank="fit"))
    encoder = HeadItemEncoder(module, "pau-fit", FRAMES, SIZE)
    with pytest.raises(ConfigError, match="PAUHead: PAU rerank: fit needs a validation run first"):
        evaluate_task(encoder, RetrievalTaskSpec("MSRVTT", str(tasks / "MSRVTT")), EmbeddingCache(None))


def test_uvrb_command_runs_a_pairwise_head_config(tmp_path, tiny_clip, corpus, tasks, capsys):
    import yaml

    config = clip_fit_config(
        tiny_clip,
        corpus,
        {"logger": False},
        model={"head": {"class_path": "lit_retrieval.models.heads.XCLIPHead", "init_args": {"temporal_layers": 1}}},
        data={"num_frames": FRAMES, "image_size": SIZE},
    )
    path = tmp_path / "xclip.yaml"
    path.write_text(yaml.safe_dump(config))
    (tmp_path / "tasks.yaml").write_text(f"root: {tasks}\ntasks: [{{name: MSRVTT}}, {{name: T2T}}]\n")
    args = ["--config", str(path), "--tasks", str(tmp_path / "tasks.yaml"), "--out", str(tmp_path / "out")]
    assert run_command("uvrb", args) == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["datasets"]["MSRVTT"]["queries"] == 10 and "skipped" in results["datasets"]["T2T"]
    assert len(list((tmp_path / "out" / "cache").glob("MSRVTT-*.npz"))) == 2  # X-CLIP's dicts of tensors
