"""GVE's embedder under ZeRO-3 calls the vision tower in one fixed order (one call for images,
one for videos, dummies where a batch has none), so every rank gathers the same weights in the
same order whatever its batch holds; the embeddings are those of the plain forward."""

from __future__ import annotations

import pytest
import torch
from helpers.gve_embedder import embedder, items, media, perturb_lora  # noqa: F401 (media: a fixture)

from lit_retrieval.data.items import MediaItem


@pytest.fixture(scope="module")
def model(tiny_qwen):
    gve = embedder(tiny_qwen).eval()
    perturb_lora(gve)
    return gve


def vision_calls(model, batch, zero3: bool, monkeypatch) -> tuple[torch.Tensor, int]:
    calls = []
    hook = model.base_model.model.visual.register_forward_hook(lambda *args: calls.append(1))
    monkeypatch.setattr(model, "zero3_partitioned", lambda: zero3)
    try:
        with torch.no_grad():
            return model(batch), len(calls)
    finally:
        hook.remove()


@pytest.mark.parametrize("kinds", ["mixed", "text", "image", "video"])
def test_zero3_path_calls_the_vision_tower_twice_and_embeds_as_the_plain_forward(model, media, kinds, monkeypatch):  # noqa: F811
    chosen = {
        "mixed": items(media),
        "text": [MediaItem(text="a red circle moves right"), MediaItem(text="then it stops")],
        "image": [items(media)[1], items(media)[3]],
        "video": [items(media)[2], items(media)[4]],
    }[kinds]
    batch = model.process(chosen, "Find the video.")
    plain, plain_calls = vision_calls(model, batch, False, monkeypatch)
    fixed, fixed_calls = vision_calls(model, batch, True, monkeypatch)
    assert plain_calls == {"mixed": 2, "text": 0, "image": 1, "video": 1}[kinds]
    assert fixed_calls == 2
    torch.testing.assert_close(fixed, plain, atol=1e-6, rtol=1e-5)
