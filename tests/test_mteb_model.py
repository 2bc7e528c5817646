"""Our models inside MTEB: `MTEBModel` runs under `mteb.evaluate` on a tiny MTEB retrieval task
built here (corpus, queries, qrels in memory; nothing downloaded), and the recall and precision
MTEB reports equal our own `uvrb` metrics of the same model on the same data; the protocol's
shape (unit rows, cosine similarity, query prompts) and the lossless hand-over of MTEB's video
frames are checked on their own."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml

from lit_retrieval.data.annotations import load_annotations
from lit_retrieval.mteb_model import MTEBModel, write_frames
from lit_retrieval.search.cache import EmbeddingCache
from lit_retrieval.search.loading import ModelSpec
from lit_retrieval.uvrb.runner import evaluate_task
from lit_retrieval.uvrb.tasks import RetrievalTaskSpec
from fit_configs import clip_fit_config
from media import full_decode

mteb = pytest.importorskip("mteb", reason="the `mteb` extra (pip install -e '.[mteb]')")


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture(scope="module")
def text_task(corpus, tmp_path_factory):
    """Ten distinct event descriptions of the synthetic corpus each retrieve another one (the
    first query two: several relevant items), as UVRB task files and as MTEB data."""
    root = tmp_path_factory.mktemp("mteb_task")
    records = load_annotations(corpus / "annotations.json")
    texts = list(dict.fromkeys(e.description for v in records for e in v.events))[:20]  # distinct: no exact ties
    queries = [{"id": f"q{i}", "text": t} for i, t in enumerate(texts[0::2])]
    documents = [{"id": f"d{i}", "text": t} for i, t in enumerate(texts[1::2])]
    qrels = [{"query_id": f"q{i}", "corpus_id": f"d{i}", "score": 1} for i in range(len(queries))]
    qrels.append({"query_id": "q0", "corpus_id": "d1", "score": 1})
    write_jsonl(root / "corpus.jsonl", documents)
    write_jsonl(root / "queries.jsonl", queries)
    write_jsonl(root / "qrels.jsonl", qrels)
    return root, queries, documents, qrels


def tiny_retrieval_task(queries, documents, qrels):
    """An MTEB `AbsTaskRetrieval` over in-memory data (the layout of mteb's own mock tasks)."""
    from datasets import Dataset
    from mteb.abstasks.retrieval import AbsTaskRetrieval
    from mteb.abstasks.retrieval_dataset_loaders import RetrievalSplitData
    from mteb.abstasks.task_metadata import TaskMetadata

    relevant: dict[str, dict[str, int]] = {}
    for row in qrels:
        relevant.setdefault(row["query_id"], {})[row["corpus_id"]] = row["score"]

    class TinyRetrieval(AbsTaskRetrieval):
        metadata = TaskMetadata(
            type="Retrieval",
            name="LitRetrievalTinyT2T",
            main_score="ndcg_at_10",
            description="Event descriptions of the synthetic test corpus retrieving each other.",
            reference="https://example.org/lit-retrieval",
            dataset={"path": "NA", "revision": "NA"},
            category="t2t",
            eval_splits=["test"],
            eval_langs=["eng-Latn"],
            date=("2026-01-01", "2026-01-01"),
            dialect=["Written"],
            domains=[],
            task_subtypes=[],
            license="cc-by-4.0",
            annotations_creators="derived",
            modalities=["text"],
            sample_creation="found",
            bibtex_citation="",
            prompt={"query": "Find the next event."},
        )

        def load_data(self, num_proc=None, **kwargs) -> None:
            split = RetrievalSplitData(
                queries=Dataset.from_list(queries),
                corpus=Dataset.from_list(documents),
                relevant_docs=relevant,
                top_ranked=None,
            )
            self.dataset = {"default": {"test": split}}
            self.data_loaded = True

    return TinyRetrieval()


@pytest.fixture(scope="module")
def meanp_config(tiny_clip, corpus, tmp_path_factory):
    path = tmp_path_factory.mktemp("mteb_model") / "meanp.yaml"
    path.write_text(yaml.safe_dump(clip_fit_config(tiny_clip, corpus, {"logger": False})))
    return path


@pytest.mark.parametrize("kind", ["dual encoder", "GVE"])
def test_mteb_scores_equal_our_uvrb_metrics(kind, meanp_config, tiny_qwen, text_task):
    """A dual encoder's config (its checkpoint loads as `index` and `uvrb` load it) and a GVE
    model directory; GVE embeds the queries with the task's prompt, as `uvrb` with the same prompt."""
    root, queries, documents, qrels = text_task
    spec = ModelSpec(config=str(meanp_config)) if kind == "dual encoder" else ModelSpec(model=str(tiny_qwen))
    model = MTEBModel.from_spec(spec, name=f"test/{kind}", batch_size=3)
    result = mteb.evaluate(model, tiny_retrieval_task(queries, documents, qrels), cache=None, show_progress_bar=False)
    scores = result.task_results[0].scores["test"][0]
    task = RetrievalTaskSpec("tiny", str(root), prompt="Find the next event.")
    ours = evaluate_task(model.embedder, task, EmbeddingCache(None), memory_mb=1)
    assert 0 < ours["R@1"] < 1  # a ranking that can be got wrong
    # MTEB rounds its scores to 5 decimals; both count a query's relevant items within k
    for k in (1, 5, 10):
        assert scores[f"recall_at_{k}"] == pytest.approx(ours[f"R@{k}"], abs=1e-5), k
    assert scores["precision_at_1"] == pytest.approx(ours["P@1"], abs=1e-5)


def test_encode_gives_unit_rows_and_query_prompts(meanp_config, text_task):
    from mteb.types import PromptType

    _, queries, documents, qrels = text_task
    task = tiny_retrieval_task(queries, documents, qrels)
    seen = []

    class Recording:
        fingerprint, modalities = "recording", {"T"}

        def embed(self, items, instruction=None, batch_size=8):
            seen.append(instruction)
            return torch.nn.functional.normalize(torch.tensor([[len(i.text), 1.0] for i in items]), dim=-1)

    model = MTEBModel(Recording(), "test/recording")
    batches = [{"text": ["ab", "abcd"]}, {"text": ["a"]}]
    rows = model.encode(
        batches, task_metadata=task.metadata, hf_split="test", hf_subset="default", prompt_type=PromptType.query
    )
    model.encode(
        batches[:1], task_metadata=task.metadata, hf_split="test", hf_subset="default", prompt_type=PromptType.document
    )
    assert rows.shape == (3, 2) and np.allclose(np.linalg.norm(rows, axis=1), 1)
    assert seen == ["Find the next event.", "Find the next event.", None]
    similarity = model.similarity(rows, rows[:1])
    assert similarity.shape == (3, 1) and similarity[0, 0] == pytest.approx(1.0)
    assert model.similarity_pairwise(rows, rows).tolist() == pytest.approx([1.0, 1.0, 1.0])
    assert model.mteb_model_meta.name == "test/recording" and model.mteb_model_meta.revision == "recording"


def test_video_frames_reach_the_embedder_unchanged(tmp_path):
    """MTEB hands `[T, C, H, W]` uint8 frames; the file they are written to decodes to them exactly."""
    frames = torch.from_numpy(np.random.default_rng(0).integers(0, 256, (5, 3, 32, 48), dtype=np.uint8))
    path = write_frames(frames, tmp_path / "clip.mp4")
    times, decoded, _, _, _ = full_decode(path)
    assert (
        times.tolist() == [0, 1, 2, 3, 4]
        and decoded.shape == (5, 32, 48, 3)
        and np.array_equal(decoded, frames.permute(0, 2, 3, 1).numpy())
    )
