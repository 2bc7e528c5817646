"""MEA inside DualEncoderRetrieval: one text forward, wiring against the equations, exact resume,
training curves, and the evaluation analyses against brute-force references."""

import json
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger

from lit_retrieval.callbacks import TrainingCurves
from lit_retrieval.cli import main
from lit_retrieval.data import MultiEventDataModule
from lit_retrieval.models.encoders import CLIPEncoder
from lit_retrieval.models.heads import MeanPHead
from lit_retrieval.modules import AnalysesConfig, DualEncoderRetrieval, EvaluationConfig, MEAConfig, OptimConfig


def make_module(tiny_clip, **kwargs):
    torch.manual_seed(0)
    optim = OptimConfig(backbone_lr=1e-3, head_lr=1e-3, weight_decay=0.0, warmup_proportion=0.0)
    return DualEncoderRetrieval(
        CLIPEncoder(pretrained=str(tiny_clip)), MeanPHead(logit_scale_init=2.3), optim=optim, **kwargs
    )


def make_data(corpus, **kwargs):
    return MultiEventDataModule(
        annotation=str(corpus / "annotations.json"), num_frames=4, image_size=32, batch_size=8, **kwargs
    )


def first_train_batch(corpus):
    data = make_data(corpus)
    data.setup()
    return next(iter(data.train_dataloader()))


def test_mea_step_encodes_texts_once_and_follows_the_equations(corpus, tiny_clip):
    module = make_module(tiny_clip, mea=MEAConfig(weight=0.5, seed=3))
    batch = first_train_batch(corpus)
    calls = {"text": [], "video": 0}
    encode_text, encode_video = module.encoder.encode_text, module.encoder.encode_video
    module.encoder.encode_text = lambda texts: calls["text"].append(len(texts)) or encode_text(texts)
    module.encoder.encode_video = lambda *a, **k: (
        calls.__setitem__("video", calls["video"] + 1) or encode_video(*a, **k)
    )
    out = module.training_step(batch, 0)
    partial = module.objectives.mea.partial_queries(batch["events"], 0, 0, 0)
    assert calls == {"text": [len(batch["events"]) + len(partial.events)], "video": 1}
    with torch.no_grad():  # the same quantities, computed separately
        text = module.head.encode_text(module.encode_queries(batch["events"]))
        partial_text = module.head.encode_text(module.encode_queries(partial.events))
        video = module.encode_videos(batch)
    sim = module.head.score(text, video)
    scores = module.head.score(partial_text, video)[torch.arange(len(partial.events)), partial.owner]
    positive = sim.diagonal()[partial.owner]
    delta = (positive - scores).mean()
    hardest = sim.masked_fill(torch.eye(len(sim), dtype=torch.bool), -2).amax(0)
    xi = (sim.diagonal() - hardest).clamp_min(0).sum() / (2 * len(sim))
    theta = torch.minimum(delta, xi)
    push = (scores - positive + theta).clamp_min(0).mean()
    pull = (hardest[partial.owner] - scores).clamp_min(0).mean()
    assert out["mea_delta"].item() == pytest.approx(delta.item(), abs=1e-5)
    assert out["mea_xi"].item() == pytest.approx(xi.item(), abs=1e-5)
    assert out["mea_push"].item() == pytest.approx(push.item(), abs=1e-5)
    assert out["mea_pull"].item() == pytest.approx(pull.item(), abs=1e-5)
    assert out["loss"].item() == pytest.approx((out["loss_std"] + 0.5 * (push + pull)).item(), abs=1e-5)


class Interrupt(L.Callback):
    """Stops training after `epochs` epochs, as a preempted job would (its checkpoint is saved)."""

    def __init__(self, epochs: int) -> None:
        self.epochs = epochs

    def on_train_epoch_end(self, trainer, module):
        if trainer.current_epoch + 1 == self.epochs:
            trainer.should_stop = True


def run_fit(tmp_path, corpus, tiny_clip, max_epochs=3, ckpt_path=None, logger=False, stop_after=None, crash_at=None):
    module = make_module(tiny_clip, mea=MEAConfig(weight=0.5))
    curves = TrainingCurves()
    checkpoint = ModelCheckpoint(
        dirpath=tmp_path / "ckpt",
        save_last=True,
        save_top_k=0,
        every_n_train_steps=1 if crash_at else None,
        enable_version_counter=False,
    )
    extra = [Interrupt(stop_after)] if stop_after else []
    if crash_at:
        from helpers.stop_callbacks import CrashAtStep

        extra.append(CrashAtStep(crash_at))
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=max_epochs,
        default_root_dir=tmp_path,
        logger=logger,
        log_every_n_steps=1,
        callbacks=[curves, checkpoint, *extra],
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, make_data(corpus), ckpt_path=ckpt_path)
    return module, curves


def test_resumed_run_continues_with_the_same_threshold(tmp_path, corpus, tiny_clip):
    logger = CSVLogger(tmp_path / "whole", name="logs", version="v")
    whole, whole_curves = run_fit(tmp_path / "whole", corpus, tiny_clip, logger=logger)
    run_fit(tmp_path / "split", corpus, tiny_clip, stop_after=1)
    resumed, resumed_curves = run_fit(
        tmp_path / "split", corpus, tiny_clip, ckpt_path=tmp_path / "split" / "ckpt" / "last.ckpt"
    )
    thetas = [s["mea_theta"] for s in whole_curves.steps]
    # step 1 uses its own statistics, step 2 those of step 1: the same threshold; then it moves
    assert len(thetas) == 6 and thetas[0] == thetas[1] and len(set(thetas[1:])) == 5
    assert [s["mea_theta"] for s in resumed_curves.steps] == pytest.approx(thetas, abs=1e-6)
    for (name, a), b in zip(whole.state_dict().items(), resumed.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-5), name
    # curves reach the logger and the figure is written
    run_dir = tmp_path / "whole" / "logs" / "v"
    header = (run_dir / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {
        "train/mea/theta",
        "train/mea/delta",
        "train/mea/xi",
        "train/mea/push",
        "train/mea/pull",
        "train/loss_std",
    } <= set(header)
    assert (run_dir / "training_curves.png").read_bytes()[:4] == b"\x89PNG"
    history = json.loads((run_dir / "training_curves.json").read_text())
    assert [s["mea_theta"] for s in history["steps"]] == pytest.approx(thetas)
    out = tmp_path / "overlay.png"
    with pytest.raises(SystemExit) as code:
        main(["curves", str(run_dir), str(run_dir / "training_curves.json"), "--labels", "a", "b", "--out", str(out)])
    assert code.value.code == 0 and out.read_bytes()[:4] == b"\x89PNG"


def test_resume_mid_epoch_continues_with_the_same_batches_threshold_and_weights(tmp_path, corpus, tiny_clip):
    whole, whole_curves = run_fit(tmp_path / "whole", corpus, tiny_clip)
    with pytest.raises(RuntimeError, match="simulated crash at step 3"):  # epoch 2 of 3, after its first batch
        run_fit(tmp_path / "split", corpus, tiny_clip, crash_at=3)
    resumed, resumed_curves = run_fit(
        tmp_path / "split", corpus, tiny_clip, ckpt_path=tmp_path / "split" / "ckpt" / "last.ckpt"
    )
    assert [s["mea_theta"] for s in resumed_curves.steps] == pytest.approx(
        [s["mea_theta"] for s in whole_curves.steps], abs=1e-6
    )
    assert [s["loss"] for s in resumed_curves.steps] == pytest.approx([s["loss"] for s in whole_curves.steps], abs=1e-5)
    for (name, a), b in zip(whole.state_dict().items(), resumed.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-5), name


def test_curves_reach_tensorboard(tmp_path, corpus, tiny_clip):
    from lightning.pytorch.loggers import TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = TensorBoardLogger(tmp_path, name="tb", version="v")
    _, curves = run_fit(tmp_path, corpus, tiny_clip, max_epochs=1, logger=logger)
    events = EventAccumulator(str(tmp_path / "tb" / "v"))
    events.Reload()
    thetas = [e.value for e in events.Scalars("train/mea/theta")]
    assert thetas == pytest.approx([s["mea_theta"] for s in curves.steps], abs=1e-6)
    assert {"train/mea/push", "train/mea/pull", "train/mea/xi", "train/loss_std"} <= set(events.Tags()["scalars"])


def brute_force_ranks(module, data, queries_of):
    """t2v rank of each test video's query list (built by `queries_of(events, index)`), one query at a time."""
    records = data.datasets["test"].records
    with torch.no_grad():
        gallery = torch.cat([module.encode_videos(b) for b in data.test_dataloader()])
        ranks = []
        for i, record in enumerate(records):
            queries = queries_of(record.descriptions, i)
            scores = module.head.score(module.head.encode_text(module.encode_queries(queries)), gallery)
            ranks.append([(1 + (row > row[i]).sum()).item() for row in scores])
    return records, ranks


def char_tokens(events: list[str]) -> int:
    """The tiny CLIP's character tokenizer, counted by hand: one token per non-space character of
    the joined query, plus the start and end tokens."""
    return sum(not c.isspace() for c in " ".join(events)) + 2


def test_analyses_match_brute_force(tmp_path, corpus, tiny_clip):
    data = make_data(corpus, eval_batch_size=4)
    data.setup("test")
    lengths = np.array([char_tokens(r.descriptions) for r in data.datasets["test"].records])
    edge = int(np.median(lengths))  # a query of exactly `edge` tokens belongs to the lower bucket
    analyses = AnalysesConfig(
        avg_event=True,
        slices=True,
        length_edges=[20.0],
        token_edges=[edge],
        event_orders=["reversed", "shuffled"],
        query_modes=["concat"],
    )
    module = make_module(tiny_clip, query_mode="events", evaluation=EvaluationConfig(analyses=analyses, query_rows=3))
    L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False).test(module, data)
    results = module.eval_results["test"]
    module.eval()
    records, single = brute_force_ranks(module, data, lambda events, i: [[e] for e in events])
    per_video = [np.mean([r == 1 for r in ranks]) for ranks in single]
    assert results["avg_event/t2v/R@1"] == pytest.approx(100 * np.mean(per_video))
    _, full = brute_force_ranks(module, data, lambda events, i: [events])
    full = np.array([r[0] for r in full])
    counts = np.array([len(r.events) for r in records])
    for k in np.unique(counts):
        assert results[f"slices/events_{k}/n"] == (counts == k).sum()
        assert results[f"slices/events_{k}/t2v/R@1"] == pytest.approx(100 * np.mean(full[counts == k] == 1))
        assert results[f"avg_event/events_{k}/t2v/R@1"] == pytest.approx(
            100 * np.mean(np.array(per_video)[counts == k])
        )
    short = np.array([r.duration < 20.0 for r in records])
    assert results["slices/length_0-20s/n"] + results["slices/length_20s+/n"] == len(records)
    assert results["slices/length_0-20s/t2v/R@1"] == pytest.approx(100 * np.mean(full[short] == 1))
    fits = lengths <= edge
    assert 0 < fits.sum() < len(records)
    assert (
        results[f"slices/tokens_1-{edge}/n"] == fits.sum() and results[f"slices/tokens_{edge + 1}+/n"] == (~fits).sum()
    )
    assert results[f"slices/tokens_1-{edge}/t2v/R@1"] == pytest.approx(100 * np.mean(full[fits] == 1))
    assert results[f"slices/tokens_{edge + 1}+/t2v/MnR"] == pytest.approx(np.mean(full[~fits]))
    # event pooling ignores the order of events: reordered queries score exactly the same
    for order in ("reversed", "shuffled"):
        assert results[f"order/{order}/t2v/R@1"] == pytest.approx(results["t2v/R@1"])
        assert results[f"order/{order}/v2t/MnR"] == pytest.approx(results["v2t/MnR"])
    module.query_mode = "concat"
    _, concat = brute_force_ranks(module, data, lambda events, i: [events])
    assert results["query_mode/concat/t2v/R@1"] == pytest.approx(100 * np.mean(np.array([r[0] for r in concat]) == 1))


def test_shipped_mea_quickstart_config_runs_end_to_end(tmp_path, corpus):
    """configs/quickstart_mea.yaml as shipped (MiniLM text tower, MEA, curves, analyses), on the
    small test corpus for one epoch."""
    common = [
        "--config",
        str(Path(__file__).resolve().parents[2] / "configs" / "quickstart_mea.yaml"),
        "--data.init_args.annotation",
        str(corpus / "annotations.json"),
        "--data.init_args.synthetic",
        "null",
        "--data.init_args.num_workers",
        "0",
        "--data.init_args.batch_size",
        "8",
        "--trainer.max_epochs",
        "1",
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.logger.init_args.save_dir",
        str(tmp_path),
    ]
    main(["fit", *common])
    main(
        [
            "test",
            *common,
            "--trainer.logger.init_args.version",
            "test",
            "--ckpt_path",
            str(tmp_path / "logs" / "fit" / "checkpoints" / "last.ckpt"),
        ]
    )
    assert (tmp_path / "logs" / "fit" / "training_curves.png").exists()
    curves = json.loads((tmp_path / "logs" / "fit" / "training_curves.json").read_text())
    assert len(curves["steps"]) == 2 and "mea_theta" in curves["steps"][0] and "t2v/R@1" in curves["epochs"][0]
    test = json.loads((tmp_path / "logs" / "test" / "metrics.json").read_text())["test"]
    expected = {
        "t2v/R@1",
        "avg_event/t2v/R@1",
        "slices/events_3/t2v/R@1",
        "slices/length_0-18s/n",
        "order/reversed/v2t/R@1",
        "order/shuffled/t2v/R@1",
        "query_mode/events/t2v/R@1",
    }
    assert expected <= set(test)
    queries = sum(test[f"slices/events_{k}/n"] for k in (2, 3, 4, 5) if f"slices/events_{k}/n" in test)
    assert test["slices/tokens_1-77/n"] + test["slices/tokens_78+/n"] == queries > 0
