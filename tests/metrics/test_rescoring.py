"""Inference-time re-scoring (DSL, inverted softmax, QB-Norm) against hand-worked values and the
public implementations' behaviour, re-derived from their text (lit_retrieval/metrics/rescoring.py)."""

import dataclasses
import json
import math
import re

import numpy as np
import pytest
import torch

from lit_retrieval.cli import main
from lit_retrieval.commands import run_command
from lit_retrieval.data import MultiEventDataModule
from lit_retrieval.metrics.ranking import ScoreRows, retrieval_metrics
from lit_retrieval.metrics.rerank import RerankConfig
from lit_retrieval.metrics.rescoring import (
    RESCORINGS,
    DualSoftmax,
    InvertedSoftmax,
    QBNorm,
    QueryBank,
    RescoreConfig,
    column_logsumexp,
    dual_softmax,
    inverted_softmax_t2v,
    inverted_softmax_v2t,
    qb_norm,
    rescored_metrics,
)
from lit_retrieval.models.encoders import CLIPEncoder
from lit_retrieval.models.heads import MeanPHead
from lit_retrieval.modules import DualEncoderRetrieval
from lit_retrieval.modules.evaluation import EvaluationConfig
from helpers.evaluation_runs import eval_trainer

# video 0 is a hub: the raw top-1 of every text; texts 1 and 2 belong to videos 1 and 2
HUB = torch.tensor([[0.9, 0.1, 0.1], [0.6, 0.5, 0.1], [0.6, 0.1, 0.5]], dtype=torch.float64)


def full(rows: ScoreRows) -> torch.Tensor:
    return rows.rows(slice(0, rows.shape[0]))


def test_dual_softmax_by_hand():
    # T = 0.1: column 0's softmax over the texts is e^9, e^6, e^6 over their sum, etc.
    expected = [[0.0] * 3 for _ in range(3)]
    for j in range(3):
        denominator = sum(math.exp(HUB[i, j].item() / 0.1) for i in range(3))
        for i in range(3):
            expected[i][j] = HUB[i, j].item() * math.exp(HUB[i, j].item() / 0.1) / denominator
    got = full(dual_softmax(HUB, DualSoftmax(0.1)))
    assert torch.allclose(got, torch.tensor(expected, dtype=torch.float64), rtol=1e-12)
    # text 1 at video 0: 0.6 * e^6 / (e^9 + 2 e^6) = 0.6 / (e^3 + 2); at video 1: 0.5 / (1 + 2 e^-4)
    assert got[1, 0].item() == pytest.approx(0.6 / (math.exp(3) + 2))
    assert got[1, 1].item() == pytest.approx(0.5 / (1 + 2 * math.exp(-4)))
    metrics = rescored_metrics(HUB, torch.arange(3), RescoreConfig(dsl=DualSoftmax(0.1)))
    assert retrieval_metrics(HUB)["t2v/R@1"] == pytest.approx(100 / 3)
    assert metrics["dsl/t2v/R@1"] == 100.0  # the hub no longer wins texts 1 and 2


def test_dual_softmax_is_ts2net_on_logits():
    """TS2-Net (main_task_retrieval.py): sim_matrix * softmax(sim_matrix, axis=0) on the logits
    100 * cos; ours on the cosines at T = 0.01 is the same matrix divided by 100, so it ranks alike
    in both directions, and TS2-Net's V2T (the transposed DSL matrix) keeps the raw V2T ranking
    for positive scores."""
    generator = torch.Generator().manual_seed(0)
    cosines = torch.rand(6, 6, generator=generator, dtype=torch.float64) * 0.4 + 0.1
    logits = (100 * cosines).tolist()
    reference = [[0.0] * 6 for _ in range(6)]
    for j in range(6):
        denominator = sum(math.exp(logits[i][j]) for i in range(6))
        for i in range(6):
            reference[i][j] = logits[i][j] * math.exp(logits[i][j]) / denominator
    ours = full(dual_softmax(cosines, DualSoftmax(0.01)))
    assert torch.allclose(100 * ours, torch.tensor(reference, dtype=torch.float64), rtol=1e-9)
    dsl = rescored_metrics(cosines, torch.arange(6), RescoreConfig(dsl=DualSoftmax()))
    raw = retrieval_metrics(cosines)
    assert {k[4:]: v for k, v in dsl.items() if k.startswith("dsl/v2t/")} == {
        k: v for k, v in raw.items() if k.startswith("v2t/")
    }


def test_column_logsumexp_blockwise_equals_whole():
    generator = torch.Generator().manual_seed(1)
    scores = torch.randn(11, 5, generator=generator, dtype=torch.float64)
    expected = [math.log(sum(math.exp(scores[i, j].item() / 0.3) for i in range(11))) for j in range(5)]
    for chunk in (1, 3, 11, 64):
        assert column_logsumexp(scores, 0.3, chunk).tolist() == pytest.approx(expected, rel=1e-12)
    whole = full(dual_softmax(scores, DualSoftmax(0.3), chunk=64))
    assert torch.allclose(full(dual_softmax(scores, DualSoftmax(0.3), chunk=2)), whole, rtol=1e-12)


def test_inverted_softmax_by_hand():
    t2v = full(inverted_softmax_t2v(HUB, InvertedSoftmax(0.1)))
    v2t = full(inverted_softmax_v2t(HUB, InvertedSoftmax(0.1)))
    for i in range(3):
        for j in range(3):
            column = sum(math.exp(HUB[k, j].item() / 0.1) for k in range(3))
            row = sum(math.exp(HUB[i, k].item() / 0.1) for k in range(3))
            assert t2v[i, j].item() == pytest.approx(math.exp(HUB[i, j].item() / 0.1) / column, rel=1e-12)
            assert v2t[i, j].item() == pytest.approx(math.exp(HUB[i, j].item() / 0.1) / row, rel=1e-12)
    assert t2v[1, 1].item() == pytest.approx(1 / (1 + 2 * math.exp(-4)))
    metrics = rescored_metrics(HUB, torch.arange(3), RescoreConfig(inverted_softmax=InvertedSoftmax(0.1)))
    assert metrics["inverted_softmax/t2v/R@1"] == 100.0
    # V2T: video 0's column over the texts, each text normalised over the videos:
    # text 0 keeps 1 / (1 + 2 e^-8), texts 1 and 2 get e^6 / (e^6 + e^5 + e^1) < that
    assert metrics["inverted_softmax/v2t/R@1"] == 100.0


BANK = torch.tensor([[0.95, 0.2, 0.25], [0.3, 0.9, 0.1]], dtype=torch.float64)
# test texts: 0 and 1 have raw top-1 video 0 (activated by bank query 0), text 2 has video 2 (not activated)
TEST = torch.tensor([[0.9, 0.1, 0.1], [0.6, 0.5, 0.1], [0.3, 0.1, 0.5]], dtype=torch.float64)


def test_qb_norm_by_hand():
    config = QBNorm(temperature=0.1, k=1)
    bank = QueryBank.from_blocks(BANK.split(1), 3, config)
    assert bank.activated.tolist() == [True, True, False]
    norm = [sum(math.exp(BANK[b, j].item() / 0.1) for b in range(2)) for j in range(3)]
    assert bank.log_norm.tolist() == pytest.approx([math.log(n) for n in norm], rel=1e-12)
    got = full(qb_norm(TEST, bank, config))
    for i in (0, 1):
        assert got[i].tolist() == pytest.approx(
            [math.exp(TEST[i, j].item() / 0.1) / norm[j] for j in range(3)], rel=1e-12
        )
    assert got[2].tolist() == TEST[2].tolist()  # top-1 outside the activation set: the raw row
    # text 1: video 0 e^6 / (e^9.5 + e^3) = 0.0301 still beats video 1 e^5 / (e^2 + e^9) = 0.0183
    assert got[1, 0].item() == pytest.approx(math.exp(6) / (math.exp(9.5) + math.exp(3)))
    assert got[1, 1].item() == pytest.approx(math.exp(5) / (math.exp(2) + math.exp(9)))


def test_qb_norm_top_k_activation_and_keys():
    wide = QueryBank.from_blocks([BANK], 3, QBNorm(temperature=0.1, k=2))
    assert wide.activated.tolist() == [True, True, True]  # top-2: {0, 2} and {1, 0}
    config = RescoreConfig(qbnorm=QBNorm(temperature=0.1, k=2))
    metrics = rescored_metrics(TEST, torch.arange(3), config, wide)
    assert set(metrics) == {f"qbnorm/t2v/{k}" for k in ("R@1", "R@5", "R@10", "Rsum", "MdR", "MnR")}
    with pytest.raises(ValueError, match="querybank"):
        rescored_metrics(TEST, torch.arange(3), config)
    with pytest.raises(ValueError, match="gallery has 4"):
        QueryBank.from_blocks([BANK], 4, QBNorm())


@pytest.mark.parametrize("v2t_rule", ["strict", "group_max"])
def test_rescoring_reads_the_matrix_a_block_of_rows_at_a_time(v2t_rule):
    """Memory bound: every method reads at most `chunk` raw rows at once, and blocks of 3 rows give
    the metrics of one block of all rows."""
    generator = torch.Generator().manual_seed(2)
    raw = torch.randn(20, 6, generator=generator, dtype=torch.float64)
    targets = torch.randint(0, 6, (20,), generator=generator)
    read = []

    def rows(index):
        read.append(len(raw[index]))
        return raw[index]

    config = RescoreConfig(DualSoftmax(0.3), InvertedSoftmax(0.3), QBNorm(temperature=0.3, k=2))
    bank = QueryBank.from_blocks([BANK.repeat(1, 2)], 6, config.qbnorm)
    blocked = rescored_metrics(ScoreRows((20, 6), rows), targets, config, bank, v2t_rule=v2t_rule, chunk=3)
    assert max(read) == 3 and blocked == rescored_metrics(raw, targets, config, bank, v2t_rule=v2t_rule, chunk=64)


def test_a_method_has_one_name_everywhere(tmp_path, capsys):
    """The registry's names are `RescoreConfig`'s fields, the metric prefixes and the choices of
    `metrics --rescore`; the old spelling `is` is refused."""
    assert [f.name for f in dataclasses.fields(RescoreConfig)] == list(RESCORINGS)
    assert list(RESCORINGS) == ["dsl", "inverted_softmax", "qbnorm"]
    config = RescoreConfig(**{name: method.options() for name, method in RESCORINGS.items()})
    bank = QueryBank.from_blocks([BANK], 3, config.qbnorm)
    prefixes = [key.split("/")[0] for key in rescored_metrics(HUB, torch.arange(3), config, bank)]
    assert list(dict.fromkeys(prefixes)) == list(RESCORINGS)
    np.save(tmp_path / "hub.npy", HUB.numpy())
    with pytest.raises(SystemExit):
        main(["metrics", str(tmp_path / "hub.npy"), "--rescore", "is"])
    err = capsys.readouterr().err
    assert "invalid choice: 'is'" in err and all(name in err for name in RESCORINGS)


def test_checkpointed_rescore_and_rerank_options_load_with_weights_only(tmp_path):
    """A checkpoint's hyper-parameters hold `EvaluationConfig` with its `rescore` and `rerank`
    options; they load under `torch.load(weights_only=True)` (lit_retrieval/modules/dual_encoder.py)."""
    rescore = RescoreConfig(**{name: method.options() for name, method in RESCORINGS.items()})
    evaluation = EvaluationConfig(rescore=rescore, rerank=RerankConfig(k=5))
    torch.save({"hyper_parameters": {"evaluation": evaluation}}, tmp_path / "hparams.ckpt")
    loaded = torch.load(tmp_path / "hparams.ckpt", weights_only=True)["hyper_parameters"]["evaluation"]
    assert loaded == evaluation


def test_options_are_checked():
    with pytest.raises(ValueError, match="rescore.dsl.temperature"):
        DualSoftmax(0.0)
    with pytest.raises(ValueError, match="rescore.qbnorm.k"):
        QBNorm(k=0)


def test_test_stage_reports_rescored_metrics_beside_raw(tmp_path, corpus, tiny_clip, capsys):
    """`test` with every re-scoring: the raw keys are unchanged and each method's keys equal the
    re-scoring of the saved matrix; QB-Norm's bank is the training queries scored by the model."""

    def run(evaluation: EvaluationConfig, root):
        torch.manual_seed(0)
        module = DualEncoderRetrieval(CLIPEncoder(pretrained=str(tiny_clip)), MeanPHead(), evaluation=evaluation)
        data = MultiEventDataModule(
            annotation=str(corpus / "annotations.json"), num_frames=3, image_size=32, batch_size=4, num_workers=0
        )
        eval_trainer(root).test(module, data, verbose=False)
        return module, data, json.loads((root / "metrics.json").read_text())["test"]

    rescore = RescoreConfig(DualSoftmax(0.05), InvertedSoftmax(0.05), QBNorm(temperature=0.05, k=2, bank_size=6))
    module, data, metrics = run(EvaluationConfig(save_scores=True, rescore=rescore, query_rows=3), tmp_path / "a")
    _, _, raw = run(EvaluationConfig(query_rows=3), tmp_path / "b")
    assert {k: v for k, v in metrics.items() if k.startswith(("t2v/", "v2t/"))} == {
        k: v for k, v in raw.items() if k.startswith(("t2v/", "v2t/"))
    }
    scores = torch.from_numpy(np.load(tmp_path / "a" / "scores.npy")).double()
    bank_reps = module.evaluator.query_bank(module, 6)
    module.eval()
    with torch.no_grad():
        videos = [
            module.head.encode_video(module.encoder.encode_video(b["frames"], b["frame_mask"]))
            for b in data.test_dataloader()
        ]
    bank_scores = module.head.score(bank_reps, torch.cat(videos))
    bank = QueryBank.from_blocks([bank_scores], scores.shape[1], rescore.qbnorm)
    expected = rescored_metrics(scores, torch.arange(len(scores)), rescore, bank)
    assert {k: v for k, v in metrics.items() if k.split("/")[0] in RESCORINGS} == pytest.approx(expected)
    assert {k.split("/")[0] for k in expected} == {"dsl", "inverted_softmax", "qbnorm"}
    # the saved bank re-scores the saved matrix as `test` did
    capsys.readouterr()  # the test table
    argv = ["--rescore", "dsl", "inverted_softmax", "qbnorm", "--temperature", "0.05", "--bank-k", "2"]
    out = cli_metrics(
        capsys, str(tmp_path / "a" / "scores.npy"), *argv, "--bank", str(tmp_path / "a" / "scores_bank.npy")
    )
    assert {k: v for k, v in out.items() if k in expected} == pytest.approx(expected)


def cli_metrics(capsys, *argv):
    assert run_command("metrics", list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_metrics_command_rescores_a_saved_matrix(tmp_path, capsys):
    np.save(tmp_path / "hub.npy", HUB.numpy())
    np.save(tmp_path / "bank.npy", BANK.numpy())
    np.save(tmp_path / "test.npy", TEST.numpy())
    out = cli_metrics(capsys, str(tmp_path / "hub.npy"), "--rescore", "dsl", "inverted_softmax", "--temperature", "0.1")
    assert out["t2v/R@1"] == pytest.approx(100 / 3)  # the raw headline, unchanged
    assert out["dsl/t2v/R@1"] == 100.0 and out["inverted_softmax/t2v/R@1"] == 100.0 and "qbnorm/t2v/R@1" not in out
    out = cli_metrics(capsys, str(tmp_path / "test.npy"), "--rescore", "qbnorm", "--bank", str(tmp_path / "bank.npy"))
    bank = QueryBank.from_blocks([BANK], 3, QBNorm())
    expected = rescored_metrics(TEST, torch.arange(3), RescoreConfig(qbnorm=QBNorm()), bank)
    assert {k: v for k, v in out.items() if k.startswith("qbnorm/")} == pytest.approx(expected)
    # four captions of two videos (test_metrics: strict rank 3, group max rank 2 for video 0)
    np.save(tmp_path / "captions.npy", np.array([[0.5, 0.2], [0.6, 0.9], [0.7, 0.3], [0.1, 0.8]]))
    np.save(tmp_path / "targets.npy", np.array([0, 1, 1, 1]))
    argv = [str(tmp_path / "captions.npy"), "--text-video", str(tmp_path / "targets.npy"), "--v2t-rule", "group_max"]
    assert cli_metrics(capsys, *argv)["v2t_group_max/MnR"] == 1.5


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--rescore", "qbnorm"], "--rescore qbnorm and --bank go together"),
        (["--rescore", "dsl", "--temperature", "0"], "--temperature must be a finite number > 0"),
        (["--rescore", "inverted_softmax", "--temperature", "inf"], "--temperature must be a finite number > 0"),
        (["--rescore", "dsl", "--temperature", "nan"], "--temperature must be a finite number > 0"),
        (["--rescore", "dsl", "--temperature", "1e-320"], "holds non-finite values"),
        (["--rescore", "qbnorm", "--bank", "BANK4"], r"bank must be \[bank queries, 3 videos\], got shape \(2, 4\)"),
    ],
)
def test_metrics_command_refuses_bad_rescoring_options(tmp_path, capsys, argv, message):
    np.save(tmp_path / "hub.npy", HUB.numpy())
    np.save(tmp_path / "bank4.npy", np.zeros((2, 4)))
    argv = [a.replace("BANK4", str(tmp_path / "bank4.npy")) for a in argv]
    with pytest.raises(SystemExit) as exit_info:
        main(["metrics", str(tmp_path / "hub.npy"), *argv])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert re.search(message, err.splitlines()[-1])


@pytest.mark.distributed
@pytest.mark.slow
def test_three_processes_rescore_and_rerank_as_one(tmp_path, tiny_clip, corpus):
    """DDP on 3 CPU processes, one rank without a batch (its videos undecodable): the re-scored and
    re-ranked metrics of every rank are the one-process ones."""
    from helpers.evaluation_runs import annotations, test_metrics

    annotation = annotations(corpus, tmp_path, 7, (1, 2, 5))
    evaluation = {
        "rescore": {"dsl": {}, "inverted_softmax": {}, "qbnorm": {"k": 2, "bank_size": 2}},
        "rerank": {"k": 2},
        "v2t_rule": "group_max",
    }
    [single] = test_metrics(tmp_path, tiny_clip, corpus, annotation, 1, evaluation)
    expected = {"dsl/t2v/R@1", "inverted_softmax/v2t_group_max/R@1", "qbnorm/t2v/R@1", "rerank/recall_ceiling"}
    assert expected <= set(single)
    for results in test_metrics(tmp_path, tiny_clip, corpus, annotation, 3, evaluation):
        assert results == pytest.approx(single, abs=1e-9)
