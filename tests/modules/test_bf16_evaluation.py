"""Evaluation in float32 whatever the training precision (issue 31, item 2).

Under `bf16-mixed` the encoders and heads run under autocast; scores computed from their bf16
outputs under autocast are bf16 (8 mantissa bits), so positives tie with negatives and the tie
rule decides ranks. CPU autocast runs the same bf16 matmuls as a GPU. Every head of the zoo, SALI
and GVE trains a few steps under `bf16-mixed` with finite losses; the bf16-mixed evaluation of
those weights then scores in float32, ties no positive with a negative that the fp32 evaluation
separates, and reports the fp32 evaluation's R@K within two queries' worth (the encoders still
run in bf16). `fp32_encoders` makes the two evaluations equal.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import lightning as L
import pytest
import torch

from helpers.head_checks import bind_seeded, features
from lit_retrieval.data import MultiEventDataModule
from lit_retrieval.data.media.shots import ShotConfig
from lit_retrieval.metrics.analyses import AnalysesConfig
from lit_retrieval.metrics.blockwise import Relevance, blockwise_search
from lit_retrieval.models.encoders import CLIPEncoder
from lit_retrieval.models.heads import (
    MeanPHead,
    MeVTRHead,
    PAUHead,
    SALIHead,
    SeqLSTMHead,
    SeqTransfHead,
    TempMeHead,
    TightTransfHead,
    TS2NetHead,
    UATVRHead,
    UCoFiAHead,
    XCLIPHead,
)
from lit_retrieval.models.heads.base import map_rep
from lit_retrieval.models.heads.sali import SpanTextFeatures
from lit_retrieval.modules import DualEncoderRetrieval, EvaluationConfig, SALIRetrieval

ZOO: dict[str, Callable] = {
    "meanP": lambda: MeanPHead(),
    "seqLSTM": lambda: SeqLSTMHead(),
    "seqTransf": lambda: SeqTransfHead(layers=1),
    "tightTransf": lambda: TightTransfHead(layers=1, dropout=0.0),
    "xclip": lambda: XCLIPHead(max_words=80, max_frames=8, temporal_layers=1),
    "ts2net": lambda: TS2NetHead(select=2, samples=16, temporal_layers=1, max_frames=8),
    "ucofia": lambda: UCoFiAHead(select=2, samples=16, temporal_layers=1, max_frames=8, max_words=80, shift_blocks=1),
    "uatvr": lambda: UATVRHead(layers=1, max_frames=12, max_words=80, samples=3),
    "pau": lambda: PAUHead(prototypes=4, layers=1, max_frames=8),
    "tempme": lambda: TempMeHead(num_frames=4, merge_layers=[1], merge_frames=[2]),
    "mevtr": lambda: MeVTRHead(num_events=2),
}


def make_trainer(precision: str, **kwargs) -> L.Trainer:
    return L.Trainer(
        accelerator="cpu",
        precision=precision,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        **kwargs,
    )


def train_bf16(module: L.LightningModule, data: L.LightningDataModule, steps: int = 2) -> list[float]:
    """Fit `steps` batches under bf16-mixed; the training losses."""
    losses: list[float] = []

    class Record(L.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            losses.append(float(outputs["loss"]))

    make_trainer("bf16-mixed", max_steps=steps, limit_val_batches=0, callbacks=[Record()]).fit(module, data)
    return losses


@dataclass
class Ranked:
    scores: torch.Tensor  # [queries, gallery] as the evaluator ranked them
    targets: torch.Tensor  # each query's gallery column
    metrics: dict[str, float]
    text: object  # the representations it scored
    gallery: object


def evaluations(module: L.LightningModule, run: Callable[[L.Trainer], None], precision: str) -> list[Ranked]:
    """Every score matrix the evaluator ranks while `run(trainer)` evaluates `module` at `precision`."""
    seen: list[Ranked] = []
    rank = module.evaluator.rank

    def recording(score, text, gallery, targets, *args, **kwargs):
        ranked = rank(score, text, gallery, targets, *args, **{**kwargs, "keep_scores": True})
        seen.append(Ranked(ranked.scores, targets, ranked.metrics, text, gallery))
        return ranked

    module.evaluator.rank = recording
    try:
        run(make_trainer(precision))
    finally:
        del module.evaluator.rank
    return seen


def tied_positives(scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per query: its positive's score equals some other gallery item's."""
    positive = scores.gather(1, targets[:, None])
    return (scores == positive).sum(1) > 1


def assert_bf16_ranks_as_fp32(bf16: list[Ranked], fp32: list[Ranked]) -> None:
    assert len(bf16) == len(fp32) > 0
    for low, full in zip(bf16, fp32):
        assert low.scores.dtype == torch.float32 and torch.isfinite(low.scores).all()
        new_ties = tied_positives(low.scores, low.targets) & ~tied_positives(full.scores, full.targets)
        assert not new_ties.any(), f"{int(new_ties.sum())} of {len(new_ties)} positives tied under bf16-mixed only"
        queries, videos = len(low.targets), len(torch.unique(low.targets))
        for k in (1, 5, 10):
            assert abs(low.metrics[f"t2v/R@{k}"] - full.metrics[f"t2v/R@{k}"]) <= 2 * 100 / queries + 1e-9
            assert abs(low.metrics[f"v2t/R@{k}"] - full.metrics[f"v2t/R@{k}"]) <= 2 * 100 / videos + 1e-9


def gallery_data(corpus, **kwargs) -> MultiEventDataModule:
    """The corpus with the training split (17 videos) as the test gallery too."""
    return MultiEventDataModule(
        annotation=str(corpus / "annotations.json"),
        num_frames=4,
        image_size=32,
        batch_size=8,
        test_split="train",
        allow_split_overlap=True,
        **kwargs,
    )


def assert_trains_in_bf16(module: L.LightningModule, data: L.LightningDataModule) -> None:
    losses = train_bf16(module, data)
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))


def assert_evaluates_as_fp32(module: L.LightningModule, data: L.LightningDataModule, stage: str = "test") -> None:
    run = (lambda t: t.test(module, data, verbose=False)) if stage == "test" else (lambda t: t.validate(module, data))
    assert_bf16_ranks_as_fp32(evaluations(module, run, "bf16-mixed"), evaluations(module, run, "32-true"))


@pytest.mark.parametrize("name", list(ZOO))
def test_every_head_trains_in_bf16_and_evaluates_in_fp32(name, corpus, tiny_clip):
    torch.manual_seed(0)
    module = DualEncoderRetrieval(CLIPEncoder(pretrained=str(tiny_clip)), ZOO[name]())
    data = gallery_data(corpus)
    assert_trains_in_bf16(module, data)
    assert_evaluates_as_fp32(module, data)


def test_sali_trains_in_bf16_and_evaluates_in_fp32(corpus, tiny_clip, tmp_path):
    """OT with the film-grammar penalty in training; greedy max and OT at evaluation."""
    torch.manual_seed(0)
    head = SALIHead(train_operator="ot", train_penalty=True, eval_penalty=True)
    module = SALIRetrieval(CLIPEncoder(pretrained=str(tiny_clip)), head)
    data = gallery_data(corpus, shots=ShotConfig(cache_dir=str(tmp_path / "shots"), progress=False))
    assert_trains_in_bf16(module, data)
    for operator in ("max", "ot"):
        head.eval_operator = operator
        assert_evaluates_as_fp32(module, data)


def test_gve_trains_in_bf16_and_validates_in_fp32(tiny_qwen, gve_tasks):
    """GVE's recipe (configs/gve/train.yaml): bf16 weights, LoRA, bf16-mixed. The weights are bf16
    under either trainer precision, so the ranked scores are also checked against the float64
    cosine of the very embeddings the evaluator ranked: no positive tied that it separates. (The
    embedder returns float32 unit vectors, so GVE ranked from float32 before issue 31 too.)"""
    from lit_retrieval.data import MultiTaskDataModule
    from lit_retrieval.models.gve.embedder import AdapterConfig
    from lit_retrieval.models.gve.processing import InputConfig
    from lit_retrieval.modules.gve import EmbedderConfig, GVERetrieval

    pixels = 4 * 28 * 28
    inputs = InputConfig(
        max_frames=4,
        video_min_pixels=pixels,
        video_max_pixels=pixels,
        image_min_pixels=pixels,
        image_max_pixels=pixels,
        max_tokens=1024,
    )
    torch.manual_seed(0)
    embedder = EmbedderConfig(
        str(tiny_qwen), AdapterConfig(r=4), inputs=inputs, gradient_checkpointing=False, dtype="bfloat16"
    )
    module = GVERetrieval(embedder, cross_device=False)
    val = [t for t in gve_tasks["val"] if t.format in ("T->V", "I->V")]
    data = MultiTaskDataModule(gve_tasks["train"], val, steps_per_epoch=2, num_workers=0, eval_batch_size=16)
    assert_trains_in_bf16(module, data)
    run = lambda t: t.validate(module, data)  # noqa: E731
    bf16 = evaluations(module, run, "bf16-mixed")
    assert_bf16_ranks_as_fp32(bf16, evaluations(module, run, "32-true"))
    for ranked in bf16:
        exact = ranked.text.double() @ ranked.gallery.double().t()
        new_ties = tied_positives(ranked.scores, ranked.targets) & ~tied_positives(exact, ranked.targets)
        assert not new_ties.any(), f"{int(new_ties.sum())} of {len(new_ties)} positives tied that float64 separates"


def test_fp32_encoders_make_bf16_mixed_evaluation_equal_fp32(corpus, tiny_clip):
    """With `fp32_encoders` the representations are float32 too, so the bf16-mixed evaluation's
    scores are the fp32 evaluation's; by default (encoders in bf16) they are not."""
    torch.manual_seed(0)
    module = DualEncoderRetrieval(CLIPEncoder(pretrained=str(tiny_clip)), SeqTransfHead(layers=1))
    data = gallery_data(corpus)

    def scores(precision: str, fp32_encoders: bool) -> torch.Tensor:
        module.evaluator.config.fp32_encoders = fp32_encoders
        (ranked,) = evaluations(module, lambda t: t.test(module, data, verbose=False), precision)
        return ranked.scores

    full = scores("32-true", False)
    torch.testing.assert_close(scores("bf16-mixed", True), full, rtol=0, atol=1e-6)
    assert (scores("bf16-mixed", False) - full).abs().max() > 1e-4


def test_analyses_encode_queries_in_the_precision_of_the_test_step(corpus, tiny_clip):
    """The queries the evaluator encodes itself (an analysis re-encoding the model's own concat
    queries, in the test step's groups of 8) are encoded under bf16-mixed as in the test step, so
    the analysis reproduces the main ranks exactly."""
    torch.manual_seed(0)
    analyses = AnalysesConfig(query_modes=["concat"])
    evaluation = EvaluationConfig(analyses=analyses, query_rows=8)
    module = DualEncoderRetrieval(CLIPEncoder(pretrained=str(tiny_clip)), MeanPHead(), evaluation=evaluation)
    make_trainer("bf16-mixed").test(module, gallery_data(corpus), verbose=False)
    results = module.eval_results["test"]
    for key in ("t2v/R@1", "t2v/R@5", "t2v/MnR", "v2t/R@1", "v2t/MnR"):
        assert results[f"query_mode/concat/{key}"] == results[key], key


SCORED = {
    **ZOO,
    "sali_max": lambda: SALIHead(eval_penalty=True),
    "sali_ot": lambda: SALIHead(eval_operator="ot", eval_penalty=True),
}


def head_features(name: str, dim: int) -> tuple:
    """Random text and video features for head `name` (SALI: span features and shots)."""
    text, video = features(num_text=4, num_video=4, frames=4, words=5, dim=dim)
    if not name.startswith("sali"):
        return text, video
    video.shots = torch.tensor([[0, 0, 1, 1], [0, 1, 2, -1], [0, -1, -1, -1], [0, 1, 1, 2]])
    g = torch.Generator().manual_seed(1)
    subject, obj = torch.randn(2, 4, dim, generator=g)
    flags = torch.tensor([True, True, False, False])
    return SpanTextFeatures(text.pooled, subject, obj, has_verb=flags, relational=flags), video


@pytest.mark.parametrize("name", list(SCORED))
def test_score_blocks_is_float32_under_autocast_and_with_bf16_weights(name, encoder):
    """`score_blocks` of bf16 representations inside a bf16 autocast region equals the float32
    score of the same (upcast) representations; with the head's weights in bf16 it equals a float32
    copy of those weights, and the head keeps its own bf16 weight tensors."""
    head = bind_seeded(SCORED[name], encoder).eval()
    text, video = head_features(name, encoder.embed_dim)
    with torch.no_grad():
        text_rep, video_rep = head.encode_text(text), head.encode_video(video)
        low = lambda t: t.bfloat16() if t.is_floating_point() else t  # noqa: E731
        text_low, video_low = map_rep(text_rep, low), map_rep(video_rep, low)
        up = lambda t: t.float() if t.is_floating_point() else t  # noqa: E731
        expected = head.score(map_rep(text_low, up), map_rep(video_low, up))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = head.score_blocks(text_low, video_low, 2**20)
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)

        head.bfloat16()
        weights = {n: p for n, p in head.named_parameters()}
        storage = {n: p.data_ptr() for n, p in weights.items()}
        reference = copy.deepcopy(head).float().score_blocks(text_low, video_low, 2**20)
        got = head.score_blocks(text_low, video_low, 2**20)
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, reference, rtol=0, atol=1e-6)
        for n, p in head.named_parameters():
            assert p is weights[n] and p.dtype == torch.bfloat16 and p.data_ptr() == storage[n], n


def test_blockwise_search_ranks_bf16_embeddings_in_fp32():
    """UVRB's blockwise search of bf16 embeddings (under autocast) ranks as float64 brute force
    does on the same values, where a bf16 product would tie many positives with negatives."""
    g = torch.Generator().manual_seed(0)
    base = torch.nn.functional.normalize(torch.randn(1, 64, generator=g), dim=-1)
    near = lambda n: torch.nn.functional.normalize(base + 0.05 * torch.randn(n, 64, generator=g), dim=-1)  # noqa: E731
    gallery, queries, targets = near(200).bfloat16(), near(50).bfloat16(), torch.arange(50)
    exact = queries.double() @ gallery.double().t()
    assert not tied_positives(exact, targets).any() and tied_positives(queries @ gallery.t(), targets).sum() > 10
    expected = 1 + (exact > exact.gather(1, targets[:, None])).sum(1).double()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        result = blockwise_search(queries, gallery, Relevance.single(targets), k=5, ties="pessimistic")
    assert result.topk_scores.dtype == torch.float32
    assert torch.equal(result.ranks, expected)
