"""Qwen2.5-VL's release-era M-RoPE rule, re-derived token by token in plain Python from its
written description (transformers 4.51 `get_rope_index` docstring; Qwen2.5-VL report Sec. 2.1):
text counts up by one on all three axes; merged visual patch (k, i, j) of a block starting at s
sits at (s + floor(k * seconds * tokens_per_second), s + i, s + j) (products in float32, as the
release computes them from the processor's float32 `second_per_grid_ts`), images with k = 0; text after
a block resumes at the block's largest position + 1; padded slots hold 1. Independent of
`lit_retrieval.models.gve.positions` (a reference for the tests, not a second implementation to use)."""

from __future__ import annotations

import math

import numpy as np


def reference_positions(
    input_ids,
    attention_mask,
    image_token,
    video_token,
    merge,
    tokens_per_second,
    image_grids=(),
    video_grids=(),
    seconds=None,
) -> list[list[list[int]]]:
    """`[3][B][L]` nested lists for a batch given as nested lists."""
    image_grids, video_grids = list(image_grids), list(video_grids)
    seconds = [1.0] * len(video_grids) if seconds is None else list(seconds)
    axes = [[[1] * len(row) for row in input_ids] for _ in range(3)]
    for b, (row, mask) in enumerate(zip(input_ids, attention_mask)):
        slots = [p for p, m in enumerate(mask) if m]
        n, nxt = 0, 0
        while n < len(slots):
            token = row[slots[n]]
            if token not in (image_token, video_token):
                for a in range(3):
                    axes[a][b][slots[n]] = nxt
                nxt, n = nxt + 1, n + 1
                continue
            if token == image_token:
                (t, h, w), sec = image_grids.pop(0), 0.0
            else:
                (t, h, w), sec = video_grids.pop(0), seconds.pop(0)
            h, w = h // merge, w // merge
            largest = nxt
            for k in range(t):
                for i in range(h):
                    for j in range(w):
                        time = np.float32(k) * np.float32(sec) * np.float32(tokens_per_second)
                        place = (nxt + math.floor(time), nxt + i, nxt + j)
                        for a in range(3):
                            axes[a][b][slots[n]] = place[a]
                        largest = max(largest, *place)
                        n += 1
            nxt = largest + 1
    return axes


def batch_reference_positions(batch, config) -> list[list[list[int]]]:
    """`reference_positions` of a processed batch for a Qwen2(.5)-VL model config."""

    def grids(key):
        return batch[key].tolist() if key in batch else ()

    seconds = batch["second_per_grid_ts"].tolist() if "second_per_grid_ts" in batch else None
    vision = config.vision_config
    return reference_positions(
        batch["input_ids"].tolist(),
        batch["attention_mask"].tolist(),
        config.image_token_id,
        config.video_token_id,
        vision.spatial_merge_size,
        vision.tokens_per_second,
        grids("image_grid_thw"),
        grids("video_grid_thw"),
        seconds,
    )
