"""TS2-Net: token shift through the encoder hook, perturbed top-k selection, the head's masks,
blockwise scoring, gradients and learning (Liu et al., arXiv:2207.07852)."""

import pytest
import torch

from helpers.head_checks import assert_gradients_reach_every_parameter_and_steps_lower_the_loss
from lit_retrieval.models.encoders import CLIPEncoder
from lit_retrieval.models.features import TextFeatures, VideoFeatures
from lit_retrieval.models.heads import TS2NetHead
from lit_retrieval.models.heads.ts2net import PerturbedTopK, TokenShift


def test_token_shift_moves_the_configured_positions_between_neighbouring_frames_of_a_video():
    shift = TokenShift(n_div=2, offsets=(1, 4))
    lengths = torch.tensor([3, 2])
    frames = torch.arange(5.0)  # frame f's tokens all hold the value f
    tokens = frames[:, None, None].expand(5, 10, 2).clone()
    out = shift(tokens, lengths)
    back, ahead = shift.positions(10)
    assert back == [1, 6] and ahead == [4, 9]
    expected_back = torch.tensor([0.0, 0, 1, 3, 3])  # from the previous frame of the same video
    expected_ahead = torch.tensor([1.0, 2, 2, 4, 4])  # from the next frame of the same video
    assert torch.equal(out[:, back, 0], expected_back[:, None].expand(5, 2))
    assert torch.equal(out[:, ahead, 0], expected_ahead[:, None].expand(5, 2))
    untouched = [p for p in range(10) if p not in back + ahead]
    assert torch.equal(out[:, untouched], tokens[:, untouched]) and 0 in untouched  # CLS never shifted
    with pytest.raises(ValueError, match="too few"):
        TokenShift(n_div=7).positions(8)


def test_encoder_hook_sees_whole_videos_and_changes_only_hooked_encoding(tiny_clip):
    frames = torch.randn(3, 5, 3, 32, 32)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]]).bool()
    plain = CLIPEncoder(pretrained=str(tiny_clip)).eval()
    hooked = CLIPEncoder(pretrained=str(tiny_clip), frame_chunk=6).eval()
    seen = []
    hooked.add_vision_hook(-1, lambda tokens, lengths: seen.append((len(tokens), lengths.tolist())) or tokens)
    with torch.no_grad():
        assert torch.allclose(
            plain.encode_video(frames, mask).frames, hooked.encode_video(frames, mask).frames, atol=1e-6
        )
    assert seen == [(5, [5]), (5, [2, 3])]  # chunks of whole videos, at most 6 frames unless one video is longer
    shifted = CLIPEncoder(pretrained=str(tiny_clip), frame_chunk=6).eval()
    shifted.add_vision_hook(-1, TokenShift(n_div=2))
    with torch.no_grad():
        moved = shifted.encode_video(frames, mask).frames
        unmoved = plain.encode_video(frames, mask).frames
    assert not torch.allclose(moved[mask], unmoved[mask], atol=1e-4)
    single = CLIPEncoder(pretrained=str(tiny_clip), frame_chunk=100).eval()
    single.add_vision_hook(-1, TokenShift(n_div=2))
    with torch.no_grad():
        assert torch.allclose(single.encode_video(frames, mask).frames, moved, atol=1e-6)  # chunking never mixes videos


def test_perturbed_top_k_forward_and_gradient_direction():
    torch.manual_seed(0)
    scores = torch.tensor([[0.9, -0.9, -0.3, 0.4, -0.5]], requires_grad=True)
    soft = PerturbedTopK.apply(scores, 2, 2000, 0.05)
    assert soft.shape == (1, 2, 5) and torch.allclose(soft.sum(-1), torch.ones(1, 2))
    assert torch.allclose(soft[0, 0], torch.tensor([1.0, 0, 0, 0, 0])) and torch.allclose(
        soft[0, 1], torch.tensor([0.0, 0, 0, 1, 0])
    )
    close = torch.tensor([[0.50, 0.49, -0.9]], requires_grad=True)
    picked = PerturbedTopK.apply(close, 1, 4000, 0.05)
    picked[0, 0, 1].backward()  # reward selecting token 1
    assert close.grad[0, 1] > 0 and close.grad[0, 0] < 0


def head_and_features(tiny_clip, seed=0):
    torch.manual_seed(seed)
    encoder = CLIPEncoder(pretrained=str(tiny_clip))
    head = TS2NetHead(select=2, samples=64, temporal_layers=1, max_frames=8)
    head.bind(encoder)
    g = torch.Generator().manual_seed(seed)
    mask = torch.tensor([[1] * 6, [1, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0]]).bool()
    video = VideoFeatures(
        frames=torch.randn(4, 6, 64, generator=g) * mask[..., None],
        mask=mask,
        patches=torch.randn(4, 6, 16, 64, generator=g) * mask[..., None, None],
    )
    text = TextFeatures(
        pooled=torch.randn(4, 64, generator=g),
        tokens=torch.randn(4, 5, 64, generator=g),
        mask=torch.ones(4, 5, dtype=torch.bool),
    )
    return encoder, head, text, video


def test_ts2net_head_masks_blocks_and_pairs(tiny_clip):
    encoder, head, text, video = head_and_features(tiny_clip)
    assert len(encoder.vision_hooks) == 2 and head.needs_patches and not head.indexable
    head.eval()
    rep_t, rep_v = head.encode_text(text), head.encode_video(video)
    scores = head.score(rep_t, rep_v)
    assert scores.shape == (4, 4) and torch.isfinite(scores).all()
    pad = ~video.mask
    noisy = VideoFeatures(
        frames=video.frames + 9 * pad[..., None] * torch.randn_like(video.frames),
        mask=video.mask,
        patches=video.patches + 9 * pad[..., None, None] * torch.randn_like(video.patches),
    )
    assert torch.allclose(head.score(rep_t, head.encode_video(noisy)), scores, atol=1e-5)
    assert torch.allclose(head.score_blocks(rep_t, rep_v, head.pair_bytes(rep_t, rep_v) * 3), scores, atol=1e-6)
    assert torch.allclose(head.score_pairs(rep_t, rep_v), scores.diagonal(), atol=1e-6)
    # the frame weighting lies between the mean and the max of the frame similarities
    sims = torch.einsum("id,jkd->ijk", rep_t, rep_v["frames"])
    for i in range(4):
        for j in range(4):
            valid = sims[i, j][video.mask[j]]
            assert valid.min() - 1e-6 <= scores[i, j] <= valid.max() + 1e-6


def test_ts2net_gradients_and_learning(tiny_clip):
    _, head, text, video = head_and_features(tiny_clip, seed=1)
    assert_gradients_reach_every_parameter_and_steps_lower_the_loss(head, text, video)


@pytest.mark.parametrize("num_tokens, expected_count", [(50, 7), (197, 7), (257, 8)])
def test_token_shift_positions_follow_the_reference_rule(num_tokens, expected_count):
    """The reference's `PatchShiftModule` (yuqi657/ts2_net): fold = N // 7; every index from 1 in
    steps of fold below N takes frame t-1's vector, every index from 4 in steps of fold frame
    t+1's; the first and last frames keep their own. ViT-B/32, B/16 and L/14 token counts."""
    fold = num_tokens // 7
    back, ahead = [], []
    index = 1
    while index < num_tokens:
        back.append(index)
        index += fold
    index = 4
    while index < num_tokens:
        ahead.append(index)
        index += fold
    assert len(back) == len(ahead) == expected_count
    shift = TokenShift(n_div=7)
    assert shift.positions(num_tokens) == (back, ahead)
    tokens = torch.randn(5, num_tokens, 3, generator=torch.Generator().manual_seed(num_tokens))
    expected = tokens.clone()
    for t in range(5):
        for p in back:
            if t > 0:
                expected[t, p] = tokens[t - 1, p]
        for p in ahead:
            if t < 4:
                expected[t, p] = tokens[t + 1, p]
    assert torch.equal(shift(tokens, torch.tensor([5])), expected)
