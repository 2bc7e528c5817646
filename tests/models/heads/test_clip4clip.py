"""CLIP4Clip's sequential and tight heads and X-CLIP: shapes, masks, gradients, blockwise scoring,
learning, and the property that defines each (CLIP4Clip arXiv:2104.08860 Sec. 3.3; X-CLIP arXiv:2207.07285)."""

import pytest
import torch
import torch.nn.functional as F

from helpers.head_checks import (
    assert_gradients_reach_every_parameter_and_steps_lower_the_loss,
    assert_trains_with_mea_evaluates_in_blocks_and_reloads,
    bind_seeded,
    features,
)
from lit_retrieval.models.features import TextFeatures, VideoFeatures
from lit_retrieval.models.heads import MeanPHead, SeqLSTMHead, SeqTransfHead, TightTransfHead, TS2NetHead, XCLIPHead
from lit_retrieval.models.heads.meanp import masked_mean

HEADS = {
    "seqLSTM": lambda: SeqLSTMHead(),
    "seqTransf": lambda: SeqTransfHead(layers=2),
    "tightTransf": lambda: TightTransfHead(layers=2, dropout=0.0),
    "xclip": lambda: XCLIPHead(max_words=77, max_frames=8, temporal_layers=1),
}


@pytest.mark.parametrize("name", sorted(HEADS))
def test_shapes_masks_and_blockwise_scoring(name, encoder):
    head = bind_seeded(HEADS[name], encoder).eval()
    text, video = features()
    scores = head.score(head.encode_text(text), head.encode_video(video))
    assert scores.shape == (3, 4) and torch.isfinite(scores).all()
    noisy = VideoFeatures(
        frames=video.frames + 50 * (~video.mask)[..., None] * torch.randn_like(video.frames), mask=video.mask
    )
    assert torch.allclose(
        head.score(head.encode_text(text), head.encode_video(noisy)), scores, atol=1e-5
    )  # padding never counts
    noisy_words = TextFeatures(
        pooled=text.pooled,
        tokens=text.tokens + 50 * (~text.mask)[..., None] * torch.randn_like(text.tokens),
        mask=text.mask,
    )
    assert torch.allclose(head.score(head.encode_text(noisy_words), head.encode_video(video)), scores, atol=1e-5)
    rep_t, rep_v = head.encode_text(text), head.encode_video(video)
    tiny_budget = head.pair_bytes(rep_t, rep_v) * 2  # two pairs per block
    assert torch.allclose(head.score_blocks(rep_t, rep_v, tiny_budget), scores, atol=1e-6)
    pairs = head.score_pairs(rep_t, {k: v[:3] for k, v in rep_v.items()} if isinstance(rep_v, dict) else rep_v[:3])
    assert torch.allclose(pairs, scores[:, :3].diagonal(), atol=1e-5)


@pytest.mark.parametrize("name", sorted(HEADS))
def test_gradients_reach_every_parameter_and_steps_lower_the_loss(name, encoder):
    text, video = features(num_text=4, num_video=4, seed=1)
    assert_gradients_reach_every_parameter_and_steps_lower_the_loss(bind_seeded(HEADS[name], encoder), text, video)


def test_seq_heads_are_meanp_over_the_residual_temporal_output(encoder):
    text, video = features()
    for name in ("seqLSTM", "seqTransf"):
        head = bind_seeded(HEADS[name], encoder).eval()
        assert head.indexable
        temporal = head.temporal_features(video.frames, video.mask) + video.frames
        expected = F.normalize(masked_mean(F.normalize(temporal, dim=-1), video.mask), dim=-1)
        assert torch.allclose(head.encode_video(video), expected, atol=1e-6)
        meanp = MeanPHead().encode_video(VideoFeatures(frames=temporal, mask=video.mask))
        assert torch.allclose(head.encode_video(video), meanp, atol=1e-6)


def test_lstm_reads_each_video_in_frame_order_over_its_valid_frames_only(encoder):
    head = bind_seeded(HEADS["seqLSTM"], encoder).eval()
    _, video = features()
    out = head.temporal_features(video.frames, video.mask)
    for v in range(4):
        n = int(video.mask[v].sum())
        alone, _ = head.temporal(video.frames[v : v + 1, :n])
        assert torch.allclose(out[v, :n], alone[0], atol=1e-6) and out[v, n:].abs().sum() == 0


def test_seq_transf_copies_clip_text_blocks_and_positions(encoder):
    head = bind_seeded(HEADS["seqTransf"], encoder)
    blocks, positions = encoder.text_blocks()
    for copied, original in zip(head.temporal.blocks, blocks):
        for (n, a), b in zip(copied.state_dict().items(), original.state_dict().values()):
            assert torch.equal(a, b), n
    assert torch.equal(head.temporal.positions.weight[: len(positions)], positions)
    fresh = SeqTransfHead(layers=2, init_from_text=False)
    fresh.bind(encoder)
    assert not torch.equal(fresh.temporal.blocks[0].mlp.fc1.weight, blocks[0].mlp.fc1.weight)


def test_tight_transf_scores_each_pair_jointly(encoder):
    head = bind_seeded(HEADS["tightTransf"], encoder).eval()
    assert not head.indexable
    text, video = features()
    scores = head.score(head.encode_text(text), head.encode_video(video))
    for i in range(3):
        for j in range(4):
            n = int(video.mask[j].sum())
            alone = head.joint_scores(text.pooled[i : i + 1], video.frames[j : j + 1, :n], video.mask[j : j + 1, :n])
            assert alone.item() == pytest.approx(scores[i, j].item(), abs=1e-5)
    assert torch.equal(head.logits(scores), scores)  # a cross-encoder logit: no temperature


def test_unbound_head_is_a_clear_error():
    text, video = features()
    with pytest.raises(RuntimeError, match="not bound"):
        SeqTransfHead().encode_video(video)


TRAINABLE = {**HEADS, "ts2net": lambda: TS2NetHead(select=2, samples=32, temporal_layers=1, max_frames=8)}


@pytest.mark.parametrize("name", sorted(TRAINABLE))
def test_head_trains_with_mea_evaluates_in_blocks_and_reloads(name, corpus, tiny_clip):
    assert_trains_with_mea_evaluates_in_blocks_and_reloads(TRAINABLE[name], corpus, tiny_clip)


def test_xclip_is_the_mean_of_four_aosm_terms():
    """With identity matrices, brute force over one pair at a time (X-CLIP's AOSM, arXiv:2207.07285)."""
    from lit_retrieval.models.heads.xclip import aosm

    x = torch.tensor([[0.3, 0.1, 0.5]])
    expected = (x * torch.softmax(x / 0.01, -1)).sum()
    assert aosm(x, torch.ones_like(x, dtype=torch.bool), torch.eye(3)).item() == pytest.approx(expected.item())

    class NoEncoder:
        embed_dim = 64

        def text_blocks(self):
            return None

    head = XCLIPHead(max_words=8, max_frames=8, temporal_layers=0)
    head.bind(NoEncoder())
    text, video = features()
    scores = head.score(head.encode_text(text), head.encode_video(video))

    def pool(values):
        values = torch.stack(values)
        return (values * torch.softmax(values / 0.01, 0)).sum()

    for i in range(3):
        words = [F.normalize(text.tokens[i, m], dim=0) for m in range(int(text.mask[i].sum()))]
        sentence = F.normalize(text.pooled[i], dim=0)
        for j in range(4):
            frames = [F.normalize(video.frames[j, k], dim=0) for k in range(int(video.mask[j].sum()))]
            pooled = F.normalize(torch.stack(frames).mean(0), dim=0)
            terms = [
                sentence @ pooled,
                pool([w @ pooled for w in words]),
                pool([sentence @ f for f in frames]),
                (
                    pool([pool([w @ f for w in words]) for f in frames])
                    + pool([pool([w @ f for f in frames]) for w in words])
                )
                / 2,
            ]
            assert scores[i, j].item() == pytest.approx(sum(terms).item() / 4, abs=1e-5)
