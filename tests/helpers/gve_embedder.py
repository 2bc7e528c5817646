"""The GVE embedder on the tiny random Qwen2.5-VL, as the GVE tests use it: small pixel budgets, a test
video and image (`media`, a fixture), one item of each input format, LoRA weights that matter, and a
processing of 2 frames (`processing`, a fixture)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import AutoProcessor

from helpers.media import write_noise_video
from lit_retrieval.data.items import MediaItem
from lit_retrieval.models.gve import GVEEmbedder, GVEProcessing, InputConfig

SMALL = InputConfig(
    max_frames=4,
    video_min_pixels=4 * 784,
    video_max_pixels=16 * 784,
    image_min_pixels=4 * 784,
    image_max_pixels=16 * 784,
    max_tokens=512,
)


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    root = tmp_path_factory.mktemp("gve_media")
    video = write_noise_video(root / "clip.mp4", seconds=6)
    image = root / "frame.png"
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (40, 50, 3), dtype=np.uint8)).save(image)
    return {"video": str(video), "image": str(image), "root": root}


def items(media) -> list[MediaItem]:
    return [
        MediaItem(text="a red circle moves right"),
        MediaItem(image=media["image"]),
        MediaItem(video=media["video"]),
        MediaItem(text="the same object, larger", image=media["image"]),
        MediaItem(text="then it stops", video=media["video"], start=1.0, end=4.0),
    ]


def embedder(path, **kwargs) -> GVEEmbedder:
    return GVEEmbedder(
        str(path), inputs=kwargs.pop("inputs", SMALL), dtype="float32", attn_implementation="sdpa", **kwargs
    )


def perturb_lora(model: GVEEmbedder, seed: int = 0) -> None:
    """LoRA B starts at zero (no effect); give it values so adapters matter."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.5)


# the smallest inputs the tiny Qwen2.5-VL takes: 2 frames of one 56 x 56 patch grid, 1,024 tokens
SMALL_INPUTS = InputConfig(
    max_frames=2,
    video_min_pixels=3136,
    video_max_pixels=3136,
    image_min_pixels=3136,
    image_max_pixels=3136,
    max_tokens=1024,
)


@pytest.fixture(scope="module")
def processing(tiny_qwen):
    return GVEProcessing(AutoProcessor.from_pretrained(str(tiny_qwen)), SMALL_INPUTS)
