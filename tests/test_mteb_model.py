"""Our models inside MTEB: `MTEBModel` runs under `mteb.evaluate` on a tiny MTEB retrieval task
built here (corpus, queries, qrels in memory; nothing downloaded), and the recall and precision
MTEB reports equal our own `uvrb` metrics of the same model on the same data; a text -> video task
over real mp4s (mteb hands torchcodec `VideoDecoder`s) gives the nDCG, recall and MRR we compute by
hand from our own embeddings of the frames mteb's rule takes; the protocol's shape (unit rows,
cosine similarity, query prompts, modalities) and the lossless hand-over of MTEB's video frames are
checked on their own."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch
import yaml

from lit_retrieval.data.annotations import load_annotations
from lit_retrieval.data.items import MediaItem
from lit_retrieval.errors import InputError
from lit_retrieval.mteb_model import MTEBModel, query_instruction, write_frames
from lit_retrieval.search.cache import EmbeddingCache
from lit_retrieval.search.loading import ModelSpec
from lit_retrieval.uvrb.runner import evaluate_task
from lit_retrieval.uvrb.tasks import RetrievalTaskSpec
from helpers.fit_configs import clip_fit_config
from helpers.media import full_decode, torchcodec_or_skip, write_noise_video, write_timed_video

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


def tiny_retrieval_task(queries, documents, qrels, videos: bool = False):
    """An MTEB `AbsTaskRetrieval` over in-memory data (the layout of mteb's own mock tasks); with
    `videos`, a text -> video task whose documents are `{"id", "video": path}` rows, cast to
    `datasets.Video` (decoded to torchcodec `VideoDecoder`s, as mteb's video mock tasks do)."""
    from datasets import Dataset
    from mteb.abstasks.retrieval import AbsTaskRetrieval
    from mteb.abstasks.retrieval_dataset_loaders import RetrievalSplitData
    from mteb.abstasks.task_metadata import TaskMetadata

    relevant: dict[str, dict[str, int]] = {}
    for row in qrels:
        relevant.setdefault(row["query_id"], {})[row["corpus_id"]] = row["score"]

    class TinyRetrieval(AbsTaskRetrieval):
        metadata = TaskMetadata(
            type="Any2AnyRetrieval" if videos else "Retrieval",
            name="LitRetrievalTinyT2V" if videos else "LitRetrievalTinyT2T",
            main_score="ndcg_at_10",
            description="Descriptions retrieving test videos."
            if videos
            else "Event descriptions retrieving each other.",
            reference="https://example.org/lit-retrieval",
            dataset={"path": "NA", "revision": "NA"},
            category="t2v" if videos else "t2t",
            eval_splits=["test"],
            eval_langs=["eng-Latn"],
            date=("2026-01-01", "2026-01-01"),
            dialect=["Written"],
            domains=[],
            task_subtypes=[],
            license="cc-by-4.0",
            annotations_creators="derived",
            modalities=["text", "video"] if videos else ["text"],
            sample_creation="found",
            bibtex_citation="",
            prompt={"query": "Find the video." if videos else "Find the next event."},
        )

        def load_data(self, num_proc=None, **kwargs) -> None:
            corpus = Dataset.from_list(documents)
            if videos:
                from datasets import Video

                corpus = corpus.cast_column("video", Video())
            split = RetrievalSplitData(
                queries=Dataset.from_list(queries),
                corpus=corpus,
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
    times, decoded, keys, _, _ = full_decode(path)
    assert (
        times.tolist() == [0, 1, 2, 3, 4]
        and decoded.shape == (5, 32, 48, 3)
        and np.array_equal(decoded, frames.permute(0, 2, 3, 1).numpy())
        and keys.all()  # every frame a key frame: `keyframe` sampling takes what `exact` takes
    )


def test_the_model_declares_its_embedders_modalities(meanp_config, tiny_qwen):
    """mteb refuses a task whose modalities the model lacks: GVE takes text, images and videos, a
    dual encoder text and videos."""
    dual = MTEBModel.from_spec(ModelSpec(config=str(meanp_config)))
    gve = MTEBModel.from_spec(ModelSpec(model=str(tiny_qwen)))
    assert dual.mteb_model_meta.modalities == ["text", "video"]
    assert gve.mteb_model_meta.modalities == ["text", "image", "video"]


# ---- a text -> video task over real mp4s -----------------------------------------------------------


@pytest.fixture(scope="module")
def video_task(tmp_path_factory):
    """Six videos written with PyAV (MPEG-4 noise of 1.5 to 4 s at 8 fps, H.264 with B-frames at 25 fps,
    a VFR H.264 clip; distinct content), five text queries, binary and graded relevance (q0 has two
    relevant videos, one graded 2). Needs torchcodec and FFmpeg's libraries (datasets decodes the
    Video column with torchcodec): skipped without them, failed under CI."""
    torchcodec_or_skip()
    root = tmp_path_factory.mktemp("mteb_videos")
    paths = [write_noise_video(root / f"noise {i}.mp4", 1.5 + 0.5 * i, fps=8, seed=i) for i in range(4)]
    paths.append(write_timed_video(root / "bframes.mp4", [40 * k for k in range(60)], gop=12, bframes=2, size=48))
    paths.append(write_timed_video(root / "vfr.mp4", [0, 33, 133, 533, 633, 1033, 3533, 3566, 3666], gop=3, size=48))
    texts = ["a storm of coloured dots", "grey static", "a sliding gradient", "dots again", "a slow fade"]
    queries = [{"id": f"q{i}", "text": t} for i, t in enumerate(texts)]
    documents = [{"id": f"d{i}", "video": str(p)} for i, p in enumerate(paths)]
    qrels = [{"query_id": f"q{i}", "corpus_id": f"d{i}", "score": 1} for i in range(len(queries))]
    qrels.append({"query_id": "q0", "corpus_id": "d5", "score": 2})
    return queries, documents, qrels


def mteb_frame_indices(count: int, wanted: int) -> list[int]:
    """mteb's fixed-count rule, written out: round(linspace(0, count - 1, wanted)), or each frame
    repeated in place when the video has fewer."""
    if count < wanted:
        return [i * count // wanted for i in range(wanted)]
    return np.round(np.linspace(0, count - 1, wanted)).astype(int).tolist()


def by_hand(qrels, queries, documents, query_vectors, document_vectors, k: int) -> dict[str, float]:
    """nDCG@k (gain = grade, log2 discount, ideal from the judged grades: trec_eval's), recall@k and
    MRR@k of a brute-force ranking of every document by dot product, averaged over the queries."""
    grades: dict[str, dict[str, int]] = {}
    for row in qrels:
        grades.setdefault(row["query_id"], {})[row["corpus_id"]] = row["score"]
    scores = query_vectors @ document_vectors.T
    ndcg, recall, mrr = [], [], []
    for q, query in enumerate(queries):
        order = np.argsort(-scores[q], kind="stable")[:k]
        ranked = [documents[d]["id"] for d in order]
        relevant = grades[query["id"]]
        dcg = sum(relevant.get(doc, 0) / math.log2(rank + 2) for rank, doc in enumerate(ranked))
        ideal = sum(g / math.log2(rank + 2) for rank, g in enumerate(sorted(relevant.values(), reverse=True)[:k]))
        ndcg.append(dcg / ideal)
        recall.append(sum(doc in relevant for doc in ranked) / len(relevant))
        mrr.append(next((1 / (rank + 1) for rank, doc in enumerate(ranked) if doc in relevant), 0.0))
    return {f"ndcg_at_{k}": np.mean(ndcg), f"recall_at_{k}": np.mean(recall), f"mrr_at_{k}": np.mean(mrr)}


@pytest.mark.parametrize(("kind", "frames"), [("dual encoder", 2), ("GVE", 4)])
def test_mteb_video_retrieval_scores_equal_our_own_ranking(kind, frames, meanp_config, tiny_qwen, video_task, tmp_path):
    """mteb.evaluate on the text -> video task: mteb hands `VideoDecoder`s; our model takes the N
    frames its embedder embeds (the dual encoder's 2 `num_frames`; GVE at 4 test-time frames) at
    mteb's indices. The same frames decoded here with PyAV, embedded by our embedder, ranked by brute
    force: the embeddings and mteb's nDCG, recall and MRR at 1, 3 and 5 equal ours."""
    queries, documents, qrels = video_task
    if kind == "dual encoder":
        spec = ModelSpec(config=str(meanp_config))
    else:
        spec = ModelSpec(model=str(tiny_qwen), frames=frames, frame_tokens=16)
    seen: dict[str, np.ndarray] = {}

    class Recorded(MTEBModel):  # what mteb received from `encode`, by prompt type
        def encode(self, inputs, **kwargs):
            rows = super().encode(inputs, **kwargs)
            seen[str(getattr(kwargs.get("prompt_type"), "value", kwargs.get("prompt_type")))] = rows
            return rows

    model = Recorded.from_spec(spec, name=f"test/{kind}", batch_size=4)
    task = tiny_retrieval_task(queries, documents, qrels, videos=True)
    result = mteb.evaluate(model, task, cache=None, show_progress_bar=False)
    scores = result.task_results[0].scores["test"][0]

    embedder = model.embedder
    query_vectors = embedder.embed([MediaItem(text=q["text"]) for q in queries], query_instruction(task.metadata))
    items = []
    for number, document in enumerate(documents):
        _, decoded, _, _, _ = full_decode(document["video"])
        chosen = decoded[mteb_frame_indices(len(decoded), frames)]
        path = write_frames(torch.from_numpy(chosen).permute(0, 3, 1, 2), tmp_path / f"{number}.mp4")
        items.append(MediaItem(video=path))
    document_vectors = embedder.embed(items).numpy()
    np.testing.assert_allclose(seen["query"], query_vectors.numpy(), atol=1e-5)
    np.testing.assert_allclose(seen["document"], document_vectors, atol=1e-5)
    ours = {}
    for k in (1, 3, 5):
        ours.update(by_hand(qrels, queries, documents, query_vectors.numpy(), document_vectors, k))
    assert 0 < ours["recall_at_1"] < 1 and 0 < ours["ndcg_at_5"] < 1  # a ranking that can be got wrong
    for name, value in ours.items():  # MTEB rounds its scores to 5 decimals
        assert scores[name] == pytest.approx(value, abs=1e-5), name


def test_decoders_of_either_layout_give_mtebs_frames(video_task):
    """`datasets.Video` may be set to decode NHWC; either way the model takes `[T, C, H, W]` frames at
    mteb's indices (an embedder naming only `num_frames`: that many)."""
    from torchcodec.decoders import VideoDecoder

    class Three:
        fingerprint, modalities, num_frames = "three", {"T", "V"}, 3

    path = video_task[1][0]["video"]
    model = MTEBModel(Three(), "test/three")
    _, decoded, _, _, _ = full_decode(path)
    expected = torch.from_numpy(decoded[mteb_frame_indices(len(decoded), 3)]).permute(0, 3, 1, 2)
    assert torch.equal(model.video_frames(VideoDecoder(path)), expected)
    assert torch.equal(model.video_frames(VideoDecoder(path, dimension_order="NHWC")), expected)


def test_mteb_builds_the_model_from_its_meta_and_the_meta_fills_a_leaderboard_entry(meanp_config):
    """mteb's own `ModelMeta.load_model` (what `mteb.get_model` calls for a registered model) builds the
    model through the meta's `loader`; the meta's parameter count, width and framework are the model's."""
    model = MTEBModel.from_spec(ModelSpec(config=str(meanp_config)), name="me/meanp")
    meta = model.mteb_model_meta
    module = model.embedder.module
    assert meta.n_parameters == sum(p.numel() for p in module.parameters())
    rows = model.embedder.embed([MediaItem(text="a red disc"), MediaItem(text="grey static")])
    assert meta.embed_dim == rows.shape[1] and "PyTorch" in meta.framework and "Transformers" in meta.framework
    rebuilt = meta.load_model(device="cpu")
    assert isinstance(rebuilt, MTEBModel) and rebuilt.name == "me/meanp"
    assert rebuilt.mteb_model_meta.revision == meta.revision
    again = rebuilt.embedder.embed([MediaItem(text="a red disc"), MediaItem(text="grey static")])
    torch.testing.assert_close(again, rows)
    stale = meta.model_copy(update={"revision": "another"})
    with pytest.raises(ValueError, match="revision another is not this model's"):
        stale.load_model()


@pytest.mark.parametrize("shape", [(3, 32, 32), (0, 3, 32, 32), (2, 32, 32, 3)])
def test_video_inputs_that_are_not_frames_say_what_they_were(shape):
    """Issue 56, item 5: a 3-D tensor was a bare `permute` RuntimeError, a zero-frame video a "file not found"
    about an internal temp file; now one message with the input's shape and what is expected."""
    model = MTEBModel.__new__(MTEBModel)  # the frames check needs no embedder
    with pytest.raises(InputError, match=re.escape(f"a tensor of shape {shape}; expected [T, 3, H, W]")):
        model.video_frames(np.zeros(shape, dtype=np.uint8))
    assert model.video_frames(np.zeros((1, 3, 4, 4), dtype=np.uint8)).shape == (1, 3, 4, 4)
