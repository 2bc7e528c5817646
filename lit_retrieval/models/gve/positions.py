"""Multimodal RoPE (M-RoPE) positions as Qwen2.5-VL was released and GVE was trained with them.

Qwen2.5-VL (arXiv 2502.13923, Sec. 2.1 "Multimodal Rotary Position Embedding Aligned to Absolute
Time") gives every token a (temporal, height, width) position. Text tokens share one position on
all three axes, counting up by one. A visual block starting at `start` puts its merged patch
(k, i, j) (temporal patch k, row i, column j) at `start + (floor(k * seconds_per_patch *
tokens_per_second), i, j)`; images have one temporal patch at offset 0. The text after a block
starts at the block's largest position + 1.

That last rule is what the release-era transformers code does (4.49-4.51, the versions GVE's
released model code is written for: it imports `QWEN2_5_VL_INPUTS_DOCSTRING` and
`self.model.embed_tokens`, both gone in 4.52). Later versions differ, so the positions GVE sees
depend on the installed transformers unless they are passed explicitly:
  - transformers 5.x continues text after a block at `start + max(H, W)` (merged grid), which is
    smaller than the block's largest position + 1 whenever the temporal positions run past the
    spatial ones (long windows, few frames per second);
  - transformers 4.52-4.57 cast `seconds_per_patch` to an integer before the product (2.5 s -> 2 s).
`GVEEmbedder.forward` therefore computes positions here and passes them to the model.

Padded slots get position 1, as the release-era code fills them; they are masked out of attention.
Qwen2-VL checkpoints (GME) have no `tokens_per_second`: their temporal index is the patch index.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

PAD_POSITION = 1


@dataclass(frozen=True)
class MRopeLayout:
    """Which token ids hold visual features, and how grids map to positions."""

    image_token_id: int
    video_token_id: int
    spatial_merge_size: int
    tokens_per_second: float | None  # None: Qwen2-VL (temporal index = patch index)

    @classmethod
    def from_config(cls, config) -> MRopeLayout:
        """From a Qwen2-VL / Qwen2.5-VL model config (any transformers version)."""
        vision = config.vision_config
        return cls(
            int(config.image_token_id),
            int(config.video_token_id),
            int(vision.spatial_merge_size),
            getattr(vision, "tokens_per_second", None),
        )


def _vision_block(grid: list[int], seconds: torch.Tensor | float, layout: MRopeLayout, start: int) -> torch.Tensor:
    """`[3, t*h*w]` positions of one merged visual grid placed at `start`."""
    t, h, w = grid[0], grid[1] // layout.spatial_merge_size, grid[2] // layout.spatial_merge_size
    steps = torch.arange(t)
    if layout.tokens_per_second is not None:  # same operation order as the release: k * seconds * tps, then floor
        steps = (steps * seconds * layout.tokens_per_second).long()
    temporal = steps.repeat_interleave(h * w)
    rows = torch.arange(h).repeat_interleave(w).repeat(t)
    cols = torch.arange(w).repeat(t * h)
    return torch.stack([temporal, rows, cols]) + start


def _runs(flags: torch.Tensor) -> list[tuple[int, int]]:
    """`[start, end)` of each run of True in a 1-D bool tensor."""
    edges = torch.diff(flags.long(), prepend=flags.new_zeros(1).long(), append=flags.new_zeros(1).long())
    return list(zip(torch.nonzero(edges == 1).flatten().tolist(), torch.nonzero(edges == -1).flatten().tolist()))


def _row_positions(ids: torch.Tensor, layout: MRopeLayout, images: Iterator, videos: Iterator) -> torch.Tensor:
    """`[3, n]` positions of one row's attended tokens; consumes its grids from the iterators."""
    pieces, cursor, next_position = [], 0, 0
    visual = (ids == layout.image_token_id) | (ids == layout.video_token_id)
    for run_start, run_end in _runs(visual) + [(len(ids), len(ids))]:
        text = run_start - cursor
        pieces.append(torch.arange(text).expand(3, -1) + next_position)
        next_position += text
        cursor = run_start
        while cursor < run_end:  # one run may hold several blocks if nothing separates them
            token = int(ids[cursor])
            grid, seconds = next(videos, (None, 0.0)) if token == layout.video_token_id else (next(images, None), 0.0)
            if grid is None:
                raise ValueError(f"more visual placeholder blocks than grids (position {cursor})")
            count = grid[0] * grid[1] * grid[2] // layout.spatial_merge_size**2
            if cursor + count > run_end or bool((ids[cursor : cursor + count] != token).any()):
                raise ValueError(f"grid {grid} needs {count} consecutive placeholder tokens at position {cursor}")
            block = _vision_block(grid, seconds, layout, next_position)
            pieces.append(block)
            next_position = int(block.max()) + 1
            cursor += count
    return torch.cat(pieces, dim=1)


def release_mrope_positions(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    layout: MRopeLayout,
    image_grid_thw: torch.Tensor | None = None,
    video_grid_thw: torch.Tensor | None = None,
    second_per_grid_ts: torch.Tensor | None = None,
) -> torch.Tensor:
    """`[3, B, L]` M-RoPE positions of a processed batch (left or right padding), on its device."""
    ids = input_ids.detach().cpu()
    mask = torch.ones_like(ids, dtype=torch.bool) if attention_mask is None else attention_mask.detach().cpu().bool()
    images = iter(image_grid_thw.tolist() if image_grid_thw is not None else [])
    video_grids = video_grid_thw.tolist() if video_grid_thw is not None else []
    if second_per_grid_ts is None:
        seconds = [1.0] * len(video_grids)  # the release's default when the processor gives none
    else:
        seconds = list(second_per_grid_ts.detach().cpu().float().unbind())
    videos = iter(zip(video_grids, seconds))
    out = torch.full((3, *ids.shape), PAD_POSITION, dtype=torch.long)
    for row in range(ids.shape[0]):
        slots = mask[row].nonzero().flatten()
        # index_copy_: about 4x faster than boolean-mask assignment on long rows (CPU, 1 thread)
        out[:, row].index_copy_(1, slots, _row_positions(ids[row, slots], layout, images, videos).contiguous())
    if next(images, None) is not None or next(videos, None) is not None:
        raise ValueError("the batch has more visual grids than placeholder blocks in its input_ids")
    return out.to(input_ids.device)
