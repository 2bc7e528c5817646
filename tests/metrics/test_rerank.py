"""Retrieve-then-rerank (lit_retrieval/metrics/rerank.py): a hand-worked list, and exactly full
pairwise scoring when K covers the gallery, for a head with a pair form and one without."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from lit_retrieval.data import MultiEventDataModule
from lit_retrieval.metrics.ranking import text_to_video_ranks
from lit_retrieval.metrics.analyses import AnalysesConfig
from lit_retrieval.metrics.rerank import RerankConfig, rerank_ranks
from lit_retrieval.metrics.rescoring import DualSoftmax, RescoreConfig
from lit_retrieval.models.encoders import CLIPEncoder
from lit_retrieval.models.heads import MeanPHead
from lit_retrieval.models.heads.base import SimilarityHead
from lit_retrieval.models.heads.tight import TightTransfHead
from lit_retrieval.modules import DualEncoderRetrieval
from lit_retrieval.modules.evaluation import EvaluationConfig
from lit_retrieval.modules.reranking import candidate_scorer
from helpers.evaluation_runs import eval_trainer


def test_rerank_by_hand():
    """Retriever scores 0.9, 0.8, 0.1, 0.5; pairwise scores 0.1, 0.7, 0.9, 0.3; K = 2. The list is
    the candidates {0, 1} by pairwise score (1, 0), then the rest by retriever score (3, 2): video 2,
    the pairwise best, stays last because the retriever missed it."""
    gallery = torch.tensor([[0.9], [0.8], [0.1], [0.5]])
    queries = torch.ones(4, 1)
    pairwise = torch.tensor([0.1, 0.7, 0.9, 0.3])
    result = rerank_ranks(queries, gallery, torch.arange(4), lambda rows, cands: pairwise[cands], k=2)
    assert result.ranks.tolist() == [2.0, 1.0, 4.0, 3.0]
    assert result.inside.tolist() == [True, True, False, False]
    metrics = result.metrics()
    assert metrics["rerank/recall_ceiling"] == 50.0 and metrics["rerank/t2v/R@1"] == 25.0
    assert metrics["rerank/t2v/MnR"] == 2.5


class NegativeDistance(SimilarityHead):
    """A pairwise head without a pair form of its own: -|t - v|^2."""

    def encode_text(self, text):
        return text

    def encode_video(self, video):
        return video

    def score(self, text_rep, video_rep):
        return -(torch.cdist(text_rep, video_rep) ** 2)


def tight_head(width: int) -> TightTransfHead:
    torch.manual_seed(0)
    head = TightTransfHead(layers=1, max_frames=4, dropout=0.0, init_from_text=False)
    head.bind(SimpleNamespace(embed_dim=width, text_blocks=lambda: None))
    return head.eval()


@pytest.mark.parametrize("head_name", ["tight", "distance"])
def test_rerank_with_k_covering_the_gallery_is_full_scoring(head_name):
    generator = torch.Generator().manual_seed(1)
    num_text, num_video, width = 9, 7, 16
    text = torch.randn(num_text, width, generator=generator)
    if head_name == "tight":
        head = tight_head(width)
        gallery = {"frames": torch.randn(num_video, 4, width, generator=generator), "mask": torch.ones(num_video, 4)}
    else:
        head, gallery = NegativeDistance(), torch.randn(num_video, width, generator=generator)
    targets = torch.randint(0, num_video, (num_text,), generator=generator)
    retriever_text = torch.randn(num_text, 5, generator=generator)
    retriever_gallery = torch.randn(num_video, 5, generator=generator)
    with torch.no_grad():
        full = head.score(text, gallery)
        expected = text_to_video_ranks(full, targets)
        for budget in (1, 2**30):  # one pair per call, or all at once
            scorer = candidate_scorer(head, text, gallery, budget)
            result = rerank_ranks(retriever_text, retriever_gallery, targets, scorer, k=num_video, query_rows=4)
            assert torch.equal(result.ranks, expected)
            assert result.metrics()["rerank/recall_ceiling"] == 100.0
        # K = 3: candidates keep their pairwise order, the rest their retriever rank
        result = rerank_ranks(
            retriever_text, retriever_gallery, targets, candidate_scorer(head, text, gallery, 2**30), 3
        )
        retriever = retriever_text @ retriever_gallery.t()
        for i in range(num_text):
            top = retriever[i].argsort(descending=True)[:3].tolist()
            if targets[i] in top:
                assert result.ranks[i] == 1 + sum(full[i, j] > full[i, targets[i]] for j in top)
            else:
                assert result.ranks[i] == 1 + sum(retriever[i] > retriever[i, targets[i]])


def test_rerank_refuses_k_below_one():
    with pytest.raises(ValueError, match="rerank k must be >= 1"):
        rerank_ranks(torch.ones(1, 1), torch.ones(1, 1), torch.zeros(1), lambda r, c: c.float(), k=0)


def rerank_test(
    root, corpus, tiny_clip, rerank: RerankConfig
) -> tuple[DualEncoderRetrieval, MultiEventDataModule, dict]:
    """`test` of an untrained tightTransf model with `rerank`: the module, data and test metrics."""
    torch.manual_seed(0)
    evaluation = EvaluationConfig(rerank=rerank, query_rows=5)
    module = DualEncoderRetrieval(
        CLIPEncoder(pretrained=str(tiny_clip)), TightTransfHead(layers=1, max_frames=3), evaluation=evaluation
    )
    data = MultiEventDataModule(
        annotation=str(corpus / "annotations.json"), num_frames=3, image_size=32, batch_size=4, num_workers=0
    )
    eval_trainer(root).test(module, data, verbose=False)
    return module, data, json.loads((root / "metrics.json").read_text())["test"]


def test_test_stage_reranks_as_full_scoring_when_k_covers_the_gallery(tmp_path, corpus, tiny_clip):
    """With K covering the gallery the re-ranked T2V metrics are the full scoring's, beside it or
    (`full_scoring: false`) without it."""
    _, _, metrics = rerank_test(tmp_path / "beside", corpus, tiny_clip, RerankConfig(k=100))
    full = {key: value for key, value in metrics.items() if key.startswith("t2v/")}
    assert metrics["rerank/recall_ceiling"] == 100.0 and len(full) == 6
    assert {key: metrics[f"rerank/{key}"] for key in full} == full
    _, _, alone = rerank_test(tmp_path / "alone", corpus, tiny_clip, RerankConfig(k=100, full_scoring=False))
    assert not any(key.startswith(("t2v/", "v2t/")) for key in alone)
    assert {key: alone[f"rerank/{key}"] for key in full} == full


def test_rerank_without_full_scoring_refuses_what_needs_the_matrix():
    with pytest.raises(ValueError, match="no test score matrix for evaluation.save_scores, evaluation.rescore"):
        EvaluationConfig(
            rerank=RerankConfig(k=5, full_scoring=False), save_scores=True, rescore=RescoreConfig(dsl=DualSoftmax())
        )
    EvaluationConfig(rerank=RerankConfig(k=5, full_scoring=False), analyses=AnalysesConfig(stages=["val"]))


def test_test_stage_rerank_ceiling_is_the_retrievers_recall(tmp_path, corpus, tiny_clip):
    """With K = 3 the ceiling is meanP's R@3 on the same encoder, and bounds the re-ranked R@1."""
    module, data, metrics = rerank_test(tmp_path, corpus, tiny_clip, RerankConfig(k=3))
    meanp = DualEncoderRetrieval(
        CLIPEncoder(pretrained=str(tiny_clip)), MeanPHead(), evaluation=EvaluationConfig(save_scores=True)
    )
    meanp.encoder.load_state_dict(module.encoder.state_dict())
    eval_trainer(tmp_path / "meanp").test(meanp, data, verbose=False)
    retriever_scores = torch.from_numpy(np.load(tmp_path / "meanp" / "scores.npy"))
    retriever_ranks = text_to_video_ranks(retriever_scores, torch.arange(len(retriever_scores)))
    assert metrics["rerank/recall_ceiling"] == pytest.approx(100 * float((retriever_ranks <= 3).double().mean()))
    assert metrics["rerank/t2v/R@1"] <= metrics["rerank/recall_ceiling"] < 100
