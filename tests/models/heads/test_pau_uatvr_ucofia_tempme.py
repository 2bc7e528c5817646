"""Baseline zoo part 2 heads: shapes, masks, gradients, blockwise scoring, learning, MEA training,
and the property that defines each (UCoFiA arXiv:2309.10091, UATVR 2301.06309, PAU 2309.17093, TempMe 2409.01156)."""

import pytest
import torch
import torch.nn.functional as F

from helpers.head_checks import (
    assert_gradients_reach_every_parameter_and_steps_lower_the_loss,
    assert_trains_with_mea_evaluates_in_blocks_and_reloads,
    bind_seeded,
    features,
)
from lit_retrieval.metrics.ranking import retrieval_metrics
from lit_retrieval.models.encoders import CLIPEncoder
from lit_retrieval.models.features import TextFeatures, VideoFeatures
from lit_retrieval.models.heads import PAUHead, UATVRHead, UCoFiAHead
from lit_retrieval.models.heads.pau import certainty

HEADS = {
    "pau": lambda: PAUHead(prototypes=4, layers=1, max_frames=8),
    "uatvr": lambda: UATVRHead(layers=1, max_frames=12, max_words=80, samples=3),
    "ucofia": lambda: UCoFiAHead(select=2, samples=16, temporal_layers=1, max_frames=8, max_words=80, shift_blocks=1),
}


@pytest.mark.parametrize("name", sorted(HEADS))
def test_shapes_masks_and_blockwise_scoring(name, encoder):
    head = bind_seeded(HEADS[name], encoder).eval()
    text, video = features()
    with torch.no_grad():
        scores = head.score(head.encode_text(text), head.encode_video(video))
        assert scores.shape == (3, 4) and torch.isfinite(scores).all()
        padding = ~video.mask[..., None]
        noisy_video = VideoFeatures(
            frames=video.frames + 3.0 * padding, mask=video.mask, patches=video.patches + 3.0 * padding[..., None]
        )
        noisy_words = TextFeatures(text.pooled, text.tokens + 3.0 * (~text.mask[..., None]), text.mask)
        torch.testing.assert_close(head.score(head.encode_text(noisy_words), head.encode_video(noisy_video)), scores)
        text_rep, video_rep = head.encode_text(text), head.encode_video(video)
        blocks = head.score_blocks(text_rep, video_rep, budget_bytes=head.pair_bytes(text_rep, video_rep) * 2)
        torch.testing.assert_close(blocks, scores)


@pytest.mark.parametrize("name", sorted(HEADS))
def test_gradients_reach_every_parameter_and_steps_lower_the_loss(name, encoder):
    text, video = features(num_text=4, num_video=4)
    assert_gradients_reach_every_parameter_and_steps_lower_the_loss(bind_seeded(HEADS[name], encoder), text, video)


@pytest.mark.parametrize("name", sorted(HEADS))
def test_head_trains_with_mea_evaluates_in_blocks_and_reloads(name, corpus, tiny_clip):
    assert_trains_with_mea_evaluates_in_blocks_and_reloads(HEADS[name], corpus, tiny_clip)


def test_pau_score_is_half_mean_video_half_best_frame(encoder):
    head = bind_seeded(HEADS["pau"], encoder).eval()
    text, video = features()
    rep_t, rep_v = head.encode_text(text), head.encode_video(video)
    with torch.no_grad():
        scores = head.score(rep_t, rep_v)
        for a in range(3):
            s = F.normalize(text.pooled[a], dim=-1)
            for b in range(4):
                frames = F.normalize(video.frames[b][video.mask[b]], dim=-1)
                expected = 0.5 * (s @ rep_v["mean"][b] + (frames @ s).max())
                assert scores[a, b].item() == pytest.approx(expected.item(), abs=1e-5)


def test_pau_uncertainty_in_unit_interval_and_equal_uncertainty_keeps_the_ranking(encoder):
    head = bind_seeded(HEADS["pau"], encoder)
    text, video = features()
    rep_t, rep_v = head.encode_text(text), head.encode_video(video)
    for values in (rep_t["certainty"], rep_v["certainty"]):
        assert ((values >= 0) & (values < 1)).all()  # certainty 1 - U, so U lies in (0, 1]
    assert certainty(torch.zeros(2, 64), torch.randn(4, 64), torch.tensor(100.0), 5.0).allclose(torch.tensor(1 - 4 / 8))
    raw = head.raw_score(rep_t, rep_v).detach()
    equal = head.rescale(raw, torch.full((3,), 0.4), torch.full((4,), 0.7), torch.tensor([0.3, -0.2]))
    assert torch.equal(equal.argsort(1), raw.argsort(1)) and torch.equal(equal.argsort(0), raw.argsort(0))
    varied = head.rescale(raw, torch.full((3,), 0.4), torch.tensor([0.0, 0.9, 0.1, 0.5]), torch.tensor([3.0, 0.0]))
    assert not torch.equal(varied.argsort(1), raw.argsort(1))


def test_pau_auxiliary_losses_follow_the_reference_equations(encoder):
    head = bind_seeded(HEADS["pau"], encoder).train()
    text, video = features(num_text=4, num_video=4)
    rep_t, rep_v = head.encode_text(text), head.encode_video(video)
    sim = head.score(rep_t, rep_v)
    losses = head.auxiliary_losses(rep_t, rep_v, sim)
    scale = head.logit_scale.exp()
    logits = sim * scale

    def l_u(matrix, cert):
        r = (matrix.sum(1) - matrix.diagonal()) / len(matrix)
        return ((cert - cert.mean() / r.mean() * r) ** 2).mean()

    expected_u = 100 * 0.5 * (l_u(logits, rep_t["certainty"]) + l_u(logits.t(), rep_v["certainty"]))
    assert losses["uncertainty"].item() == pytest.approx(expected_u.item(), rel=1e-5)
    div = 0.0
    for protos in (head.video_prototypes, head.text_prototypes):
        unit = F.normalize(protos, dim=-1)
        gram = scale * unit @ unit.t()
        div = div + ((gram - torch.diag(gram.diagonal())) ** 2).sum() / gram.numel()
    assert losses["diversity"].item() == pytest.approx((0.025 * div).item(), rel=1e-5)


def test_pau_rerank_is_fitted_on_validation_only(encoder):
    torch.manual_seed(0)
    head = PAUHead(prototypes=4, layers=1, max_frames=8, rerank="fit")
    head.bind(encoder)
    head.eval()
    text, video = features(num_text=4, num_video=4)
    rep_t, rep_v = head.encode_text(text), head.encode_video(video)
    with pytest.raises(RuntimeError, match="never fitted on the test split"):
        head.before_evaluation("test")
    torch.testing.assert_close(head.score(rep_t, rep_v), head.raw_score(rep_t, rep_v))  # first validation: raw
    report = head.fit_on_validation(rep_t, rep_v, torch.arange(4), retrieval_metrics)
    assert report["pau/R@1_mean_after"] >= report["pau/R@1_mean_before"]
    head.before_evaluation("test")
    fitted = head.score(rep_t, rep_v)
    metrics = retrieval_metrics(fitted, torch.arange(4))
    assert (metrics["t2v/R@1"] + metrics["v2t/R@1"]) / 2 == pytest.approx(report["pau/R@1_mean_after"])
    assert head.state_dict()["betas_fitted"].item()


def test_pau_rerank_fit_runs_in_validation_and_is_used_at_test(corpus, tiny_clip):
    import lightning as L

    from lit_retrieval.data import MultiEventDataModule
    from lit_retrieval.modules import DualEncoderRetrieval

    torch.manual_seed(0)
    module = DualEncoderRetrieval(
        CLIPEncoder(pretrained=str(tiny_clip)),
        PAUHead(prototypes=4, layers=1, max_frames=8, rerank="fit", rerank_grid=5),
    )
    data = MultiEventDataModule(annotation=str(corpus / "annotations.json"), num_frames=4, image_size=32, batch_size=8)
    tester = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    with pytest.raises(RuntimeError, match="never fitted on the test split"):
        tester.test(module, data, verbose=False)
    holdout = MultiEventDataModule(
        annotation=str(corpus / "annotations.json"),
        num_frames=4,
        image_size=32,
        batch_size=8,
        val_split="val",
        holdout_val=0.3,
    )
    tester.validate(module, holdout, verbose=False)
    report = module.eval_results["val"]
    assert {"pau/beta_video", "pau/beta_text"} <= set(report) and report["pau/R@1_mean_after"] >= report[
        "pau/R@1_mean_before"
    ]
    torch.testing.assert_close(
        module.head.betas,
        torch.tensor([report["pau/beta_video"], report["pau/beta_text"]], dtype=module.head.betas.dtype),
    )
    tester.test(module, holdout, verbose=False)  # uses the validation fit
    assert 0 <= module.eval_results["test"]["t2v/R@1"] <= 100


def test_uatvr_score_is_the_two_sided_weighted_max_sim(encoder):
    head = bind_seeded(HEADS["uatvr"], encoder).eval()
    text, video = features()
    rep_t, rep_v = head.encode_text(text), head.encode_video(video)
    assert rep_t["tokens"].shape[1] == 5 + 2 and rep_v["tokens"].shape[1] == 6 + 2  # two extras each
    with torch.no_grad():
        scores = head.score(rep_t, rep_v)
        for a in range(3):
            ta = rep_t["tokens"][a][rep_t["mask"][a]]
            wt = torch.softmax(head.text_weights(ta).squeeze(-1), 0)
            for b in range(4):
                vb = rep_v["tokens"][b][rep_v["mask"][b]]
                wv = torch.softmax(head.video_weights(vb).squeeze(-1), 0)
                cos = ta @ vb.t()
                expected = 0.5 * ((wt * cos.max(1).values).sum() + (wv * cos.max(0).values).sum())
                assert scores[a, b].item() == pytest.approx(expected.item(), abs=1e-5)


def test_uatvr_caption_tokens_do_not_depend_on_the_batch_padding(encoder):
    """A caption padded with 3 more masked words (a longer caption in its batch, or on another rank) keeps
    its tokens: the extras sit at the word-position table's last rows (max_words 80: rows 78, 79) as in the
    reference, whose captions are always padded to max_words."""
    head = bind_seeded(HEADS["uatvr"], encoder).eval()
    text, _ = features()
    pad = torch.randn(len(text.tokens), 3, text.tokens.shape[-1])
    padded = TextFeatures(
        text.pooled, torch.cat([text.tokens, pad], 1), torch.cat([text.mask, text.mask.new_zeros(len(pad), 3)], 1)
    )
    with torch.no_grad():
        alone, batched = head.encode_text(text), head.encode_text(padded)
    words = text.tokens.shape[1]
    kept = torch.cat([torch.arange(words), torch.arange(words + 3, words + 5)])
    torch.testing.assert_close(batched["tokens"][:, kept], alone["tokens"])
    assert torch.equal(batched["mask"][:, kept], alone["mask"]) and not batched["mask"][:, words : words + 3].any()


def test_uatvr_sampled_branch_leaves_inference_scores_unchanged(encoder):
    head = bind_seeded(HEADS["uatvr"], encoder)
    text, video = features()
    head.eval()
    with torch.no_grad():
        before = head.score(head.encode_text(text), head.encode_video(video))
        for module in (head.text_prob, head.video_prob):
            for param in module.parameters():
                param.add_(torch.randn_like(param))
        torch.manual_seed(123)
        after = head.score(head.encode_text(text), head.encode_video(video))
    torch.testing.assert_close(before, after)
    head.train()
    text, video = features(num_text=4, num_video=4)
    rep_t, rep_v = head.encode_text(text), head.encode_video(video)
    similarity = head.score(rep_t, rep_v)
    losses = head.auxiliary_losses(rep_t, rep_v, similarity)
    assert set(losses) == {"mil", "kl"} and all(torch.isfinite(v) for v in losses.values())
    torch.manual_seed(0)
    first = head.auxiliary_losses(rep_t, rep_v, similarity)["mil"]
    torch.manual_seed(1)
    assert head.auxiliary_losses(rep_t, rep_v, similarity)["mil"] != first  # sampled


def test_uatvr_mil_nce_and_kl_against_loops():
    from lit_retrieval.models.heads.uatvr import gaussian_kl, mil_nce

    g = torch.Generator().manual_seed(0)
    v, t = torch.randn(3, 2, 4, generator=g), torch.randn(3, 2, 4, generator=g)
    flat_v, flat_t = v.reshape(6, 4), t.reshape(6, 4)
    total = 0.0
    for rows, cols in ((flat_v, flat_t), (flat_t, flat_v)):
        logits = rows @ cols.t()
        for r in range(6):
            log_p = torch.log_softmax(logits[r], 0)
            total += -sum(log_p[c] for c in range(6) if c // 2 == r // 2) / 2 / 6
    assert mil_nce(v, t).item() == pytest.approx(total.item() / 2, abs=1e-5)
    log_sigma = torch.randn(3, 4, generator=g)
    m = v.mean(1)
    assert gaussian_kl(v, log_sigma).item() == pytest.approx(
        (0.5 * (log_sigma.exp() + m**2 - 1 - log_sigma)).sum().item(), abs=1e-5
    )


def test_ucofia_levels_against_loops_and_the_logit_mix(encoder):
    head = bind_seeded(HEADS["ucofia"], encoder).eval()
    text, video = features()
    rep_t, rep_v = head.encode_text(text), head.encode_video(video)

    def isa_loop(values, matrix):
        first = torch.softmax(values / 0.01, 0)
        weights = torch.softmax(first @ matrix[: len(values), : len(values)] / 0.01, 0)
        return (weights * values).sum()

    with torch.no_grad():
        levels = head.levels(rep_t, rep_v)
        for a in range(3):
            words = rep_t["words"][a][rep_t["word_mask"][a]]
            for b in range(4):
                frames = rep_v["frames"][b][rep_v["frame_mask"][b]]
                pixels = rep_v["pixels"][b][rep_v["pixel_mask"][b]]
                assert levels[1, a, b].item() == pytest.approx(
                    isa_loop(frames @ rep_t["sentence"][a], head.frame_weight).item(), abs=1e-5
                )
                u = words @ pixels.t()  # identity matrices
                g = torch.stack([isa_loop(u[:, p], head.word_weight) for p in range(u.shape[1])])
                h = torch.stack([isa_loop(u[i], head.patch_weight) for i in range(u.shape[0])])
                s3 = 0.5 * (isa_loop(g, head.patch_weight2) + isa_loop(h, head.word_weight2))
                assert levels[2, a, b].item() == pytest.approx(s3.item(), rel=1e-4, abs=1e-4)
        scale = head.logit_scale.exp()
        torch.testing.assert_close(
            head.logits(head.score(rep_t, rep_v)), (scale * levels[0] + scale * levels[1] + levels[2]) / 3
        )


def test_ucofia_selects_patches_deterministically_at_evaluation_and_uses_the_patch_shift(encoder, tiny_clip):
    head = bind_seeded(HEADS["ucofia"], encoder).eval()
    text, video = features()
    with torch.no_grad():
        first = head.encode_video(video)["pixels"]
        torch.testing.assert_close(head.encode_video(video)["pixels"], first)
    fresh = CLIPEncoder(pretrained=str(tiny_clip))
    torch.manual_seed(0)
    UCoFiAHead(shift_blocks=1).bind(fresh)
    assert fresh.vision_hooks  # the patch shift sits in the last vision block


def test_ucofia_sk_norm_is_doubly_normalised_against_the_bank(encoder):
    from lit_retrieval.models.heads.ucofia import sk_norm_bias

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 6, generator=g, dtype=torch.float64) * 3
    kernel = torch.exp(logits - logits.max())
    b = 1.0 / kernel.sum(0)
    for _ in range(200):
        a = 1.0 / (kernel @ b)
        b = 1.0 / (kernel.t() @ a)
    scaled = a[:, None] * kernel * b[None]
    torch.testing.assert_close(scaled.sum(0), torch.ones(6, dtype=torch.float64))
    torch.testing.assert_close(scaled.sum(1), torch.ones(6, dtype=torch.float64), atol=1e-6, rtol=0)
    torch.testing.assert_close(sk_norm_bias(logits, 200), torch.log_softmax(b.log(), 0))
    head = bind_seeded(HEADS["ucofia"], encoder).eval()
    text, video = features()
    bank_text, _ = features(num_text=4, seed=1)
    with torch.no_grad():
        rep_v = head.encode_video(video)
        calibrated = head.calibrate(head.encode_text(bank_text), rep_v, budget_bytes=10**9)
        bank_logits = head.level_logits(head.encode_text(bank_text), rep_v)
        for level in range(3):
            torch.testing.assert_close(
                calibrated["sk_bias"][:, level], sk_norm_bias(bank_logits[level], head.sk_norm_iters)
            )
        rep_t = head.encode_text(text)
        expected = (head.level_logits(rep_t, rep_v) + calibrated["sk_bias"].t()[:, None, :]).mean(
            0
        ) / head.logit_scale.exp()
        torch.testing.assert_close(head.score(rep_t, calibrated), expected)
        blocks = head.calibrate(head.encode_text(bank_text), rep_v, budget_bytes=1)  # one bank row at a time
        torch.testing.assert_close(blocks["sk_bias"], calibrated["sk_bias"])


def test_ucofia_sk_norm_runs_in_evaluation_with_a_training_bank(corpus, tiny_clip):
    import lightning as L

    from lit_retrieval.data import MultiEventDataModule
    from lit_retrieval.modules import DualEncoderRetrieval

    torch.manual_seed(0)
    head = UCoFiAHead(
        select=2, samples=16, temporal_layers=1, max_frames=4, max_words=80, shift_blocks=1, sk_norm_bank=10
    )
    module = DualEncoderRetrieval(CLIPEncoder(pretrained=str(tiny_clip)), head)
    data = MultiEventDataModule(annotation=str(corpus / "annotations.json"), num_frames=4, image_size=32, batch_size=8)
    calls = []
    calibrate = head.calibrate
    head.calibrate = lambda bank, gallery, budget: (
        calls.append(len(bank["sentence"])) or calibrate(bank, gallery, budget)
    )
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.test(module, data, verbose=False)
    assert calls == [10] and 0 <= module.eval_results["test"]["t2v/R@1"] <= 100


@pytest.fixture(scope="module")
def deep_clip(tmp_path_factory):
    """A 12-block tiny CLIP at 224 px with 32 px patches: ViT-B/32's token geometry (50 per frame)."""
    from lit_retrieval.models.encoders.tiny import save_tiny_clip

    return save_tiny_clip(
        tmp_path_factory.mktemp("deep_clip"), image_size=224, patch_size=32, width=32, layers=12, embed_dim=32
    )


def tempme_encoder(path, **head_kwargs):
    from lit_retrieval.models.heads import TempMeHead

    torch.manual_seed(0)
    encoder = CLIPEncoder(pretrained=str(path))
    head = TempMeHead(**head_kwargs)
    head.bind(encoder)
    return encoder, head


def test_tempme_token_counts_follow_the_reference_schedule(deep_clip):
    encoder, head = tempme_encoder(deep_clip, num_frames=12)
    frames = torch.randn(1, 12, 3, 224, 224)
    with torch.no_grad():
        encoder.encode_video(frames, torch.ones(1, 12, dtype=torch.bool))
    image_me = [12 * (50 - 2 * (k + 1)) for k in range(8)]
    assert head.merger.token_counts == [600, *image_me, 6 * 44, 3 * 56, 107, 97]  # the reference's ViT-B/32 schedule
    assert head.merger.token_counts[-1] / head.merger.token_counts[0] == pytest.approx(97 / 600)


def test_tempme_without_merging_equals_the_plain_vit_and_lora_starts_at_zero(deep_clip):
    plain = CLIPEncoder(pretrained=str(deep_clip))
    encoder, head = tempme_encoder(deep_clip, num_frames=12, merging=False)
    frames = torch.randn(2, 12, 3, 224, 224)
    mask = torch.ones(2, 12, dtype=torch.bool)
    mask[1, 7:] = False
    with torch.no_grad():
        expected = plain.encode_video(frames, mask).frames
        got = encoder.encode_video(frames, mask).frames
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(encoder.encode_text(["a red disc"]).pooled, plain.encode_text(["a red disc"]).pooled)
    assert head.merger.token_counts == [600] * 13


def test_tempme_short_videos_and_padding_are_handled(deep_clip):
    encoder, head = tempme_encoder(deep_clip, num_frames=12)
    frames = torch.randn(2, 12, 3, 224, 224)
    mask = torch.ones(2, 12, dtype=torch.bool)
    mask[1, 5:] = False
    with torch.no_grad():
        first = encoder.encode_video(frames, mask)
        frames[1, 5:] = 7.0  # padded frames never enter
        second = encoder.encode_video(frames, mask)
    torch.testing.assert_close(first.frames, second.frames)
    assert (first.frames[1, 5:] == 0).all() and first.frames[1, :5].abs().sum() > 0
    with torch.no_grad():
        text_rep, video_rep = (
            head.encode_text(encoder.encode_text(["a red disc", "a box", "a ring"])),
            head.encode_video(first),
        )
    torch.testing.assert_close(head.score_blocks(text_rep, video_rep, budget_bytes=4), head.score(text_rep, video_rep))
    with pytest.raises(ValueError, match="patch tokens are not available"):
        encoder.encode_video(frames, mask, with_patches=True)


def test_tempme_trains_only_lora_and_frame_positions(deep_clip):
    from lit_retrieval.losses import SymmetricInfoNCE

    encoder, head = tempme_encoder(deep_clip, num_frames=12)
    trainable = {n for n, p in [*encoder.named_parameters(), *head.named_parameters()] if p.requires_grad}
    assert trainable and all(".lora_" in n or n.startswith("merger.frame_positions") for n in trainable)
    assert not head.logit_scale.requires_grad
    frozen = {n: p.detach().clone() for n, p in encoder.named_parameters() if not p.requires_grad}
    params = [p for p in [*encoder.parameters(), *head.parameters()] if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=1e-2)
    g = torch.Generator().manual_seed(0)
    frames = torch.randn(4, 12, 3, 224, 224, generator=g)
    mask = torch.ones(4, 12, dtype=torch.bool)
    texts = ["a red disc", "a blue box", "a green ring", "a white cross"]

    def loss():
        sim = head.score(
            head.encode_text(encoder.encode_text(texts)), head.encode_video(encoder.encode_video(frames, mask))
        )
        return SymmetricInfoNCE()(head.logits(sim))

    loss().backward()
    for name, param in [*encoder.named_parameters(), *head.named_parameters()]:
        if param.requires_grad and "lora_A" not in name:  # B starts at zero, so A's first gradient is zero
            assert param.grad is not None and param.grad.abs().sum() > 0, name
    before = loss().item()
    for _ in range(15):
        optimizer.zero_grad()
        loss().backward()
        optimizer.step()
    assert loss().item() < before
    for name, param in encoder.named_parameters():
        if name in frozen:
            assert torch.equal(param, frozen[name]), name


def test_tempme_trains_with_mea_through_the_module(corpus, tiny_clip):
    from lit_retrieval.models.heads import TempMeHead

    assert_trains_with_mea_evaluates_in_blocks_and_reloads(
        lambda: TempMeHead(num_frames=4, merge_layers=[1], merge_frames=[2], train_backbone=True), corpus, tiny_clip
    )
