"""M-RoPE positions as GVE was trained with them (release-era Qwen2.5-VL rule), whatever transformers
is installed: against positions a real transformers 4.51.3 computed (fixture), a grid worked by
hand, and a token-by-token reference loop on batches the embedder really builds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from lit_retrieval.data.items import MediaItem
from lit_retrieval.models.gve import GVEEmbedder, InputConfig
from lit_retrieval.models.gve.positions import MRopeLayout, release_mrope_positions
from helpers.media import write_noise_video
from helpers.mrope_reference import batch_reference_positions
from helpers.gve_embedder import SMALL  # the small pixel budgets of the embedder tests

FIXTURE = Path(__file__).parents[2] / "fixtures" / "mrope" / "positions.json"


def tensor_or_none(values, dtype=torch.long):
    return None if not values else torch.tensor(values, dtype=dtype)


@pytest.mark.parametrize("case", json.loads(FIXTURE.read_text())["cases"], ids=lambda c: c["name"])
def test_positions_equal_those_of_release_era_transformers(case):
    """Expected values: transformers 4.51.3 `get_rope_index` of Qwen2.5-VL (and of Qwen2-VL for one
    batch), written by tests/fixtures/mrope/make_positions.py."""
    layout = MRopeLayout(**json.loads(FIXTURE.read_text())["layouts"][case.get("model", "qwen2_5_vl")])
    ids, mask = torch.tensor(case["input_ids"]), torch.tensor(case["attention_mask"])
    seconds = None if case["seconds"] is None else torch.tensor(case["seconds"], dtype=torch.float32)
    grids = tensor_or_none(case["images"]), tensor_or_none(case["videos"])
    ours = release_mrope_positions(ids, mask, layout, *grids, seconds)
    assert ours.tolist() == case["position_ids"]


def test_hand_worked_video_then_text():
    """Text "a b", a video of 2 temporal patches on a 4 x 4 patch grid (2 x 2 merged) at 2.5 s per
    temporal patch and 2 tokens per second, then text "c"; two left pads.
    Temporal step floor(1 x 2.5 x 2) = 5. The video starts at 2: t = 2,2,2,2,7,7,7,7;
    h = 2,2,3,3,2,2,3,3; w = 2,3,2,3,2,3,2,3. "c" follows at the largest position + 1 = 8
    (transformers 5 would put it at 2 + max(2, 2) = 4; 4.52-4.57 would use a step of 2 x 2 = 4)."""
    layout = MRopeLayout(image_token_id=9, video_token_id=8, spatial_merge_size=2, tokens_per_second=2)
    ids = torch.tensor([[0, 0, 1, 2] + [8] * 8 + [3]])
    mask = torch.tensor([[0, 0] + [1] * 11])
    out = release_mrope_positions(ids, mask, layout, None, torch.tensor([[2, 4, 4]]), torch.tensor([2.5]))
    assert out[0, 0].tolist() == [1, 1, 0, 1, 2, 2, 2, 2, 7, 7, 7, 7, 8]
    assert out[1, 0].tolist() == [1, 1, 0, 1, 2, 2, 3, 3, 2, 2, 3, 3, 8]
    assert out[2, 0].tolist() == [1, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 8]


def test_hand_worked_image_then_text_and_qwen2_vl_video():
    """An image of 4 x 6 patches (2 x 3 merged) after one text token: t = 1 throughout, h = 1,1,1,2,2,2,
    w = 1,2,3,1,2,3; the text after it at 4. Qwen2-VL (no tokens_per_second) steps time by 1 per patch."""
    image = MRopeLayout(image_token_id=9, video_token_id=8, spatial_merge_size=2, tokens_per_second=2)
    out = release_mrope_positions(torch.tensor([[5] + [9] * 6 + [6]]), None, image, torch.tensor([[1, 4, 6]]))
    assert out[:, 0].tolist() == [[0, 1, 1, 1, 1, 1, 1, 4], [0, 1, 1, 1, 2, 2, 2, 4], [0, 1, 2, 3, 1, 2, 3, 4]]
    qwen2 = MRopeLayout(image_token_id=9, video_token_id=8, spatial_merge_size=2, tokens_per_second=None)
    ids, grid = torch.tensor([[8] * 3 + [6]]), torch.tensor([[3, 2, 2]])
    out = release_mrope_positions(ids, None, qwen2, None, grid, torch.tensor([7.0]))
    assert out[:, 0].tolist() == [[0, 1, 2, 3], [0, 0, 0, 3], [0, 0, 0, 3]]


def test_placeholders_that_do_not_match_the_grids_are_refused():
    layout = MRopeLayout(image_token_id=9, video_token_id=8, spatial_merge_size=2, tokens_per_second=2)
    with pytest.raises(ValueError, match="consecutive placeholder"):
        release_mrope_positions(torch.tensor([[1] + [9] * 5 + [2]]), None, layout, torch.tensor([[1, 4, 6]]))
    with pytest.raises(ValueError, match="more visual grids"):
        release_mrope_positions(torch.tensor([[1, 2]]), None, layout, torch.tensor([[1, 4, 6]]))
    with pytest.raises(ValueError, match="more visual placeholder blocks"):
        release_mrope_positions(torch.tensor([[1] + [9] * 6]), None, layout)


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    root = tmp_path_factory.mktemp("positions_media")
    image = root / "frame.png"
    Image.fromarray(np.random.default_rng(2).integers(0, 256, (40, 70, 3), dtype=np.uint8)).save(image)
    return {"video": str(write_noise_video(root / "clip.mp4", seconds=6)), "image": str(image)}


def captured_positions(model: GVEEmbedder, batch) -> torch.Tensor:
    """The position ids the language model really receives in `GVEEmbedder.forward`."""
    seen = {}
    language_model = model.base_model.model.language_model
    handle = language_model.register_forward_pre_hook(lambda m, a, kw: seen.update(kw), with_kwargs=True)
    try:
        with torch.no_grad():
            model(batch)
    finally:
        handle.remove()
    return seen["position_ids"]


@pytest.mark.parametrize("side", ["left", "right"])
def test_embedder_feeds_the_release_positions_for_every_input_format(tiny_qwen, media, side):
    inputs = InputConfig(**{**SMALL.__dict__, "padding_side": side})
    model = GVEEmbedder(str(tiny_qwen), lora=None, inputs=inputs, dtype="float32", attn_implementation="sdpa").eval()
    config = model.base_model.config
    batches = [
        [MediaItem(text="a dog runs"), MediaItem(text="short")],  # text only
        [
            MediaItem(text="a red circle"),
            MediaItem(image=media["image"]),
            MediaItem(video=media["video"]),
            MediaItem(text="larger", image=media["image"]),
            MediaItem(text="then it stops", video=media["video"], start=0.5, end=5.5),
            MediaItem(text="both", image=media["image"], video=media["video"]),
        ],
    ]
    for items in batches:
        batch = model.process(items, "Find the video.")
        assert captured_positions(model, batch).tolist() == batch_reference_positions(batch, config)
    # the batch is one where the rules of transformers 5 and 4.5x part: a video whose temporal positions
    # run past its spatial ones, so the text after it starts later than at start + max(h, w)
    merge, tps = config.vision_config.spatial_merge_size, config.vision_config.tokens_per_second
    grids = batch["video_grid_thw"].tolist()
    seconds = batch["second_per_grid_ts"].tolist()
    reach = [int((t - 1) * s * tps) - max(h, w) // merge for (t, h, w), s in zip(grids, seconds)]
    assert max(reach) >= 0


def test_positions_need_no_host_transfer():
    """The positions are computed where the batch is, with no device -> host copy (`.cpu()`, `.tolist()`,
    `.item()`, a data-dependent branch) that would stall every step on a GPU: on PyTorch's `meta` device,
    which holds shapes and no data, any such read raises, so the computation must run there end to end."""
    layout = MRopeLayout(image_token_id=9, video_token_id=8, spatial_merge_size=2, tokens_per_second=2)
    ids = torch.tensor([[0, 0, 1, 9, 9, 9, 9, 9, 9, 3], [1, 8, 8, 8, 8, 8, 8, 8, 8, 3]], device="meta")
    mask = torch.ones(2, 10, dtype=torch.long, device="meta")
    images, videos = torch.tensor([[1, 4, 6]], device="meta"), torch.tensor([[2, 4, 4]], device="meta")
    out = release_mrope_positions(ids, mask, layout, images, videos, torch.tensor([2.5], device="meta"))
    assert out.device.type == "meta" and out.shape == (3, 2, 10) and out.dtype == torch.long


@pytest.mark.parametrize("side", ["left", "right"])
def test_positions_equal_the_installed_transformers_where_its_rule_agrees(tiny_qwen, media, side):
    """Against the installed transformers' own Qwen2.5-VL `get_rope_index` on the attended slots of a
    batch of text, image and video items (short clips: where each video's temporal positions stay
    within its spatial ones, the 5.x rule and the release rule give the same positions; the module
    docstring says where they part). Padded slots: the release fills 1, 5.x fills 0."""
    inputs = InputConfig(**{**SMALL.__dict__, "padding_side": side})
    model = GVEEmbedder(str(tiny_qwen), lora=None, inputs=inputs, dtype="float32", attn_implementation="sdpa")
    items = [
        MediaItem(text="a red circle"),
        MediaItem(image=media["image"]),
        MediaItem(text="then it stops", video=media["video"], start=0.0, end=1.0),
        MediaItem(text="both", image=media["image"], video=media["video"], start=2.0, end=3.0),
    ]
    batch = model.process(items, "Find the video.")
    config = model.base_model.config
    merge, tps = config.vision_config.spatial_merge_size, config.vision_config.tokens_per_second
    for (t, h, w), s in zip(batch["video_grid_thw"].tolist(), batch["second_per_grid_ts"].tolist()):
        assert int((t - 1) * s * tps) < max(h, w) // merge  # the rules agree on this batch
    theirs, _ = model.base_model.model.get_rope_index(
        batch["input_ids"],
        batch["mm_token_type_ids"],
        batch["image_grid_thw"],
        batch["video_grid_thw"],
        batch["second_per_grid_ts"],
        attention_mask=batch["attention_mask"],
    )
    ours = model.positions(batch)
    attended = batch["attention_mask"].bool().expand(3, -1, -1)
    assert attended[0].sum(1).min() < attended.shape[2]  # the batch is padded on `side`
    assert torch.equal(ours[attended], theirs[attended])
    assert (ours[~attended] == 1).all()
