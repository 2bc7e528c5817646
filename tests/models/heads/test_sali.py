"""SALI head and module: shot regrouping, score against a brute-force reference, gate and penalty
gradients, operators per phase, warm start, relational evaluation and a short training run."""

import json

import lightning as L
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from helpers.head_checks import assert_gradients_reach_every_parameter_and_steps_lower_the_loss, bind_seeded
from lit_retrieval.callbacks import MetricsReport
from lit_retrieval.commands import run_command
from lit_retrieval.data import MultiEventDataModule
from lit_retrieval.data.media.shots import ShotCache, ShotConfig, ShotDetectorConfig
from lit_retrieval.data.text.spans import SpanSplitter
from lit_retrieval.data.datasets.synthetic import CHARACTER_WORDS, SynthConfig, generate_corpus
from lit_retrieval.metrics.ranking import summarize_ranks
from lit_retrieval.metrics.relational import RelationalConfig, relational_metrics
from lit_retrieval.models.encoders import CLIPEncoder
from lit_retrieval.models.features import VideoFeatures
from lit_retrieval.models.heads import MeanPHead, SALIHead
from lit_retrieval.models.heads.sali import SpanTextFeatures, shot_means
from lit_retrieval.modules import DualEncoderRetrieval, EvaluationConfig, OptimConfig, SALIRetrieval

DIM = 64


def make_head(encoder, **kwargs):
    return bind_seeded(lambda: SALIHead(**kwargs), encoder)


def features(num_text=4, num_video=3, frames=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(num_video, frames, dtype=torch.bool)
    shots = torch.full((num_video, frames), -1)
    layouts = [[0, 0, 1, 1, 1, 2], [0, 1, 1], [0]]  # 3, 2 and 1 shots; padded frames after
    for v, layout in enumerate(layouts[:num_video]):
        mask[v, : len(layout)] = True
        shots[v, : len(layout)] = torch.tensor(layout)
    video = VideoFeatures(
        frames=torch.randn(num_video, frames, DIM, generator=g) * mask[..., None], mask=mask, shots=shots
    )
    rows = torch.randn(3, num_text, DIM, generator=g)
    has_verb = torch.tensor([True, True, False, False][:num_text])
    relational = torch.tensor([True, False, False, False][:num_text])
    subject = torch.where(has_verb[:, None], rows[1], rows[0])
    obj = torch.where(has_verb[:, None], rows[2], rows[0])
    return SpanTextFeatures(full=rows[0], subject=subject, object=obj, has_verb=has_verb, relational=relational), video


def test_shot_means_against_a_loop():
    _, video = features()
    means, shot_mask = shot_means(video.frames, video.shots, video.mask)
    assert means.shape == (3, 3, DIM) and shot_mask.tolist() == [[True] * 3, [True, True, False], [True, False, False]]
    for v in range(3):
        for s in range(int(shot_mask[v].sum())):
            members = video.frames[v][(video.shots[v] == s) & video.mask[v]]
            torch.testing.assert_close(means[v, s], members.mean(0))


def brute_force_score(head, text, video, penalty=False):
    """s_hat of every pair with explicit loops (greedy max, identity projections)."""
    out = torch.empty(len(text.full), len(video.frames))
    for t in range(len(text.full)):
        rows = F.normalize(torch.stack([text.full[t], text.subject[t], text.object[t]]), dim=-1)
        g = 0.5
        for v in range(len(video.frames)):
            frames = F.normalize(video.frames[v][video.mask[v]], dim=-1)
            ids = video.shots[v][video.mask[v]]
            shots = F.normalize(torch.stack([frames[ids == s].mean(0) for s in ids.unique()]), dim=-1)
            M = rows @ shots.t()
            s = M.max(1).values.mean()
            if penalty and text.relational[t]:
                a = torch.softmax(M / head.eps, -1)
                same = (a[1] * a[2]).sum()
                gap = (torch.arange(len(shots))[:, None] - torch.arange(len(shots))[None]).abs()
                far = (a[1][:, None] * a[2][None] * ((gap - 1) / 2).clamp(0, 1)).sum()
                s = s - F.softplus(torch.tensor(-3.0)) * (same + far)
            clip = F.normalize(text.full[t], dim=-1) @ F.normalize(frames.mean(0), dim=-1)
            out[t, v] = g * s + (1 - g) * clip
    return out


@pytest.mark.parametrize("penalty", [False, True])
def test_score_equals_the_brute_force_reference_and_ignores_padding(encoder, penalty):
    head = make_head(encoder, eval_penalty=penalty).eval()
    text, video = features()
    with torch.no_grad():
        scores = head.score(head.encode_text(text), head.encode_video(video))
        torch.testing.assert_close(scores, brute_force_score(head, text, video, penalty), atol=1e-5, rtol=1e-5)
        noisy = VideoFeatures(frames=video.frames + 5.0 * (~video.mask[..., None]), mask=video.mask, shots=video.shots)
        torch.testing.assert_close(head.score(head.encode_text(text), head.encode_video(noisy)), scores)
        blocks = head.score_blocks(head.encode_text(text), head.encode_video(video), budget_bytes=3 * 3 * 4 * 3 * 2)
        torch.testing.assert_close(blocks, scores)


def test_clip_level_score_is_meanp_at_initialisation(encoder):
    head = make_head(encoder).eval()
    text, video = features()
    meanp = MeanPHead()
    rep_t, rep_v = head.encode_text(text), head.encode_video(video)
    expected = meanp.score(F.normalize(text.full, dim=-1), meanp.encode_video(video))
    torch.testing.assert_close(rep_t["clip"] @ rep_v["clip"].t(), expected)


def test_meanp_shot_pooling_is_the_mean_of_shot_means():
    _, video = features()
    head = MeanPHead(pooling="shots")
    expected = []
    for v in range(3):
        frames = F.normalize(video.frames[v][video.mask[v]], dim=-1)
        ids = video.shots[v][video.mask[v]]
        expected.append(F.normalize(torch.stack([frames[ids == s].mean(0) for s in ids.unique()]).mean(0), dim=-1))
    torch.testing.assert_close(head.encode_video(video), torch.stack(expected))
    assert not torch.allclose(head.encode_video(video), MeanPHead().encode_video(video))  # unequal shot sizes
    with pytest.raises(ValueError, match="data.shots"):
        head.encode_video(VideoFeatures(frames=video.frames, mask=video.mask))


def test_operators_and_penalty_switch_with_the_phase(encoder):
    head = make_head(encoder, train_operator="ot", eval_operator="max", train_penalty=True)
    text, video = features()
    rep_t, rep_v = head.encode_text(text), head.encode_video(video)
    head.train()
    trained = head.shot_scores(rep_t, rep_v)
    head.eval()
    evaluated = head.shot_scores(rep_t, rep_v)
    assert not torch.allclose(trained, evaluated)
    max_head = make_head(encoder, train_operator="max")
    max_head.train()
    torch.testing.assert_close(
        max_head.shot_scores(max_head.encode_text(text), max_head.encode_video(video)), evaluated
    )


def test_gate_capacity_eps_and_penalty_receive_gradients(encoder):
    head = make_head(encoder, train_operator="ot", train_penalty=True).train()
    text, video = features()
    head.score(head.encode_text(text), head.encode_video(video)).sum().backward()
    assert (head.gate_logits.grad != 0).all()  # queries with and without a verb
    for param in (head.capacity_logit, head.log_eps, head.penalty_weights):
        assert param.grad is not None and param.grad.abs().sum() > 0
    head.zero_grad()
    no_rel = SpanTextFeatures(text.full, text.subject, text.object, text.has_verb, torch.zeros_like(text.relational))
    head.score(head.encode_text(no_rel), head.encode_video(video)).sum().backward()
    assert head.penalty_weights.grad is None or head.penalty_weights.grad.abs().sum() == 0  # relational only


def test_gradients_reach_every_parameter_and_steps_lower_the_loss(encoder):
    head = make_head(encoder, train_operator="ot", train_penalty=True)
    text, video = features(num_text=3, num_video=3)
    text = SpanTextFeatures(
        *(t.clone() for t in (text.full, text.subject, text.object)),
        text.has_verb[:3],
        torch.tensor([True, True, False]),
    )
    assert_gradients_reach_every_parameter_and_steps_lower_the_loss(head, text, video)


def test_relational_metrics_against_a_brute_force_subset():
    ranks = torch.tensor([1.0, 4.0, 12.0, 2.0, 30.0, 1.0, 7.0, 3.0])
    relational = torch.tensor([True, True, False, True, True, False, True, False])
    shots = torch.tensor([2, 40, 35, 34, 10, 50, 36, 1])
    out = relational_metrics(ranks, relational, shots, RelationalConfig(diagnosis=True))
    median = float(np.median(shots.numpy()))
    chosen = [i for i in range(8) if relational[i] and shots[i] >= median]
    assert out["rel_multi/min_shots"] == median and out["rel_multi/n"] == len(chosen)
    assert out["rel_multi/t2v/R@5"] == summarize_ranks(ranks[chosen])["R@5"]
    assert out["relational/n"] == 5 and out["non_relational/n"] == 3
    fixed = relational_metrics(ranks, relational, shots, RelationalConfig(min_shots=36))
    assert fixed["rel_multi/n"] == 2  # videos with 40 and 36 shots
    quartile_hits = [out[k] for k in out if k.startswith("diagnosis/") and k.endswith("/n")]
    assert sum(quartile_hits) == 8


@pytest.fixture(scope="module")
def relational_corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("relcorpus")
    generate_corpus(
        out,
        SynthConfig(num_videos=32, seed=5, events_per_video=(1, 2), relational_fraction=0.5),
        workers=1,
        progress=False,
    )
    return out


def make_data(corpus, cache):
    return MultiEventDataModule(
        annotation=str(corpus / "annotations.json"),
        num_frames=8,
        image_size=32,
        batch_size=8,
        val_split="test",
        shots=ShotConfig(cache_dir=str(cache), progress=False),
    )


def make_sali(tiny_clip, **kwargs):
    torch.manual_seed(0)
    optim = OptimConfig(backbone_lr=1e-3, head_lr=1e-3, weight_decay=0.0, warmup_proportion=0.0)
    spans = SpanSplitter(extra_person_words=CHARACTER_WORDS)
    return SALIRetrieval(
        CLIPEncoder(pretrained=str(tiny_clip)),
        SALIHead(train_operator="ot", train_penalty=True),
        optim=optim,
        spans=spans,
        **kwargs,
    )


def test_queries_are_split_and_encoded_in_one_call(tiny_clip):
    module = make_sali(tiny_clip)
    calls = []
    encode = module.encoder.encode_text
    module.encoder.encode_text = lambda texts: calls.append(list(texts)) or encode(texts)
    events = [["The red circle confronts the blue square.", "A dot rests."], ["A small box slides left."]]
    features = module.encode_queries(events)
    full = ["The red circle confronts the blue square. A dot rests.", "A small box slides left."]
    assert calls == [[*full, "The red circle", "the blue square. A dot rests"]]
    assert features.has_verb.tolist() == [True, False] and features.relational.tolist() == [True, False]
    torch.testing.assert_close(features.subject[1], features.full[1])
    torch.testing.assert_close(features.subject[0], encode(["The red circle"]).pooled[0])


def test_warm_start_takes_the_meanp_encoder_and_refuses_other_heads(tiny_clip, tmp_path):
    torch.manual_seed(1)
    meanp = DualEncoderRetrieval(CLIPEncoder(pretrained=str(tiny_clip)), MeanPHead(logit_scale_init=3.0))
    with torch.no_grad():
        for p in meanp.encoder.parameters():
            p.add_(0.01 * torch.randn_like(p))
    path = tmp_path / "meanp.ckpt"
    torch.save({"state_dict": meanp.state_dict()}, path)
    sali = make_sali(tiny_clip, warm_start=str(path))
    for (name, a), (_, b) in zip(meanp.encoder.state_dict().items(), sali.encoder.state_dict().items()):
        torch.testing.assert_close(a, b, msg=name)
    assert sali.head.logit_scale.item() == pytest.approx(3.0)
    other = make_sali(tiny_clip)
    torch.save({"state_dict": other.state_dict()}, tmp_path / "sali.ckpt")
    with pytest.raises(ValueError, match="CLIP4Clip-meanP"):
        make_sali(tiny_clip, warm_start=str(tmp_path / "sali.ckpt"))


def test_sali_trains_evaluates_relational_metrics_and_reloads(tiny_clip, relational_corpus, tmp_path):
    data = make_data(relational_corpus, tmp_path / "shots")
    module = make_sali(tiny_clip)
    trainer = L.Trainer(
        max_epochs=3,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    losses = []

    class Record(L.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            losses.append(outputs["loss"].item())

    trainer.callbacks.append(Record())
    trainer.fit(module, data)
    assert np.mean(losses[-2:]) < np.mean(losses[:2])
    results = module.eval_results["val"]
    assert {"t2v/R@1", "rel_multi/t2v/R@1", "relational/n", "non_relational/n", "rel_multi/min_shots"} <= set(results)
    assert results["relational/n"] + results["non_relational/n"] == len(data.datasets["val"])
    trainer.save_checkpoint(tmp_path / "sali.ckpt")
    restored = SALIRetrieval.load_from_checkpoint(
        tmp_path / "sali.ckpt",
        encoder=CLIPEncoder(pretrained=str(tiny_clip)),
        head=SALIHead(train_operator="ot", train_penalty=True),
    )
    tester = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    tester.validate(restored, data)
    for key in ("t2v/R@1", "t2v/MnR", "rel_multi/t2v/R@5"):
        assert restored.eval_results["val"][key] == pytest.approx(results[key])


def test_sali_needs_shots_in_the_data(tiny_clip, relational_corpus):
    data = MultiEventDataModule(
        annotation=str(relational_corpus / "annotations.json"), num_frames=4, image_size=32, batch_size=4
    )
    data.setup()
    with pytest.raises(ValueError, match="data.shots"):
        make_sali(tiny_clip).training_step(next(iter(data.train_dataloader())), 0)


def test_saved_scores_carry_relational_flags_and_metrics_reports_rel_multi(
    tiny_clip, relational_corpus, tmp_path, capsys
):
    """`test` with save_scores writes each query's relational flag and shot count; `metrics` on the
    saved matrix then reports the Rel-Multi figures the test stage reported."""
    data = make_data(relational_corpus, tmp_path / "shots")
    spans = SpanSplitter(extra_person_words=CHARACTER_WORDS)
    evaluation = EvaluationConfig(save_scores=True, relational=RelationalConfig(stages=["test"]))
    torch.manual_seed(0)
    module = DualEncoderRetrieval(
        CLIPEncoder(pretrained=str(tiny_clip)), MeanPHead(), spans=spans, evaluation=evaluation
    )
    trainer = L.Trainer(
        accelerator="cpu",
        default_root_dir=str(tmp_path / "run"),
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[MetricsReport()],
    )
    trainer.test(module, data, verbose=False)
    ids = json.loads((tmp_path / "run" / "scores_ids.json").read_text())
    annotation = json.loads((relational_corpus / "annotations.json").read_text())
    by_id = {v["video_id"]: v for v in annotation["videos"]}
    cache = ShotCache(tmp_path / "shots")
    for text_id, flag, shots in zip(ids["text_ids"], ids["relational"], ids["num_shots"]):
        video = by_id[text_id]
        query = " ".join(e["description"] for e in video["events"])
        assert flag == spans.split(query).relational
        assert shots == len(cache.get(relational_corpus / video["path"], ShotDetectorConfig()))
    assert any(ids["relational"]) and not all(ids["relational"]) and ids["min_shots"] is None
    reported = json.loads((tmp_path / "run" / "metrics.json").read_text())["test"]
    capsys.readouterr()
    assert run_command("metrics", [str(tmp_path / "run" / "scores.npy")]) == 0
    recomputed = json.loads(capsys.readouterr().out)
    for key in ("relational/n", "rel_multi/n", "rel_multi/min_shots", "rel_multi/t2v/R@1", "rel_multi/t2v/MnR"):
        assert recomputed[key] == pytest.approx(reported[key]), key
