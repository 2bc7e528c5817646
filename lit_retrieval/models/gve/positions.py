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


def _grids(
    layout: MRopeLayout,
    image_grid_thw: torch.Tensor | None,
    video_grid_thw: torch.Tensor | None,
    second_per_grid_ts: torch.Tensor | None,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The images' then the videos' `[t, h, w]` grids, each item's seconds per temporal patch
    (images 0, as the release places them; videos without `second_per_grid_ts` 1, the release's
    default), and the number of images."""
    none = torch.zeros(0, 3, dtype=torch.long, device=device)
    images = none if image_grid_thw is None else image_grid_thw.to(device=device, dtype=torch.long)
    videos = none if video_grid_thw is None else video_grid_thw.to(device=device, dtype=torch.long)
    if second_per_grid_ts is None:
        seconds = torch.ones(len(videos), device=device)
    else:
        seconds = second_per_grid_ts.to(device).float()
    return torch.cat([images, videos]), torch.cat([torch.zeros(len(images), device=device), seconds]), len(images)


def _check_placeholders(
    flags: torch.Tensor,
    slot: torch.Tensor,
    item: torch.Tensor,
    ordinal: torch.Tensor,
    ends: torch.Tensor,
    sizes: torch.Tensor,
) -> None:
    """Refuses placeholders that do not match the grids of their kind (`flags`, `ends`, `sizes`: that
    kind's tokens and items), with one line. It reads the data, so it runs only where the data is on
    the host (see `release_mrope_positions`)."""
    count, total = int(flags.sum()), int(sizes.sum())
    if count > total:
        raise ValueError(
            f"more visual placeholder blocks than grids ({count} placeholder tokens, {total} in the grids)"
        )
    # the tokens of one item sit on consecutive slots of one row: slot - offset is the same for all of them
    items = item[flags]
    anchors = slot[flags] - ordinal[flags] + (ends - sizes)[items]
    high = torch.full_like(sizes, -1).scatter_reduce(0, items, anchors, "amax", include_self=False)
    low = torch.full_like(sizes, -1).scatter_reduce(0, items, anchors, "amin", include_self=False)
    if bool((high != low).any()) or (count < total and count not in [0, *ends.tolist()]):
        raise ValueError(f"grids of {sizes.tolist()} tokens each need that many consecutive placeholder tokens")
    if count < total:
        raise ValueError("the batch has more visual grids than placeholder blocks in its input_ids")


def release_mrope_positions(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    layout: MRopeLayout,
    image_grid_thw: torch.Tensor | None = None,
    video_grid_thw: torch.Tensor | None = None,
    second_per_grid_ts: torch.Tensor | None = None,
) -> torch.Tensor:
    """`[3, B, L]` M-RoPE positions of a processed batch (left or right padding), computed on its device.

    Vectorised over the batch, without a device -> host copy, so a GPU step does not wait on it:
    the n-th image (video) placeholder of the batch, in row order with padding skipped, belongs to
    the item whose cumulative token count first exceeds n (`searchsorted`), at offset (k, i, j) in
    its merged grid. Each attended text token advances the position by 1 and the last token of a
    visual block by the block's span (its largest position - start + 1); a token sits at the sum
    of the advances before it in its row, plus (time, i, j) if visual. On the CPU the placeholders
    are also checked against the grids; on an accelerator that check would read the data back each
    step, so it is left to the processor that wrote them."""
    device, (rows, length) = input_ids.device, input_ids.shape
    mask = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    ids, attended = input_ids.flatten(), mask.flatten()
    grids, seconds, images = _grids(layout, image_grid_thw, video_grid_thw, second_per_grid_ts, device)
    is_image = (ids == layout.image_token_id) & attended
    is_video = (ids == layout.video_token_id) & attended
    visual = is_image | is_video
    if device.type == "cpu" and not len(grids) and bool(visual.any()):
        raise ValueError("more visual placeholder blocks than grids (placeholders and no grid)")
    merge = layout.spatial_merge_size
    t, h, w = grids[:, 0], grids[:, 1] // merge, grids[:, 2] // merge
    sizes = t * h * w
    ends = sizes.cumsum(0)
    image_tokens = ends[images - 1] if images else torch.zeros((), dtype=torch.long, device=device)
    # each placeholder's index among all placeholders, the images' first (their items come first)
    ordinal = torch.where(is_image, is_image.cumsum(0), is_video.cumsum(0) + image_tokens) - 1
    item = torch.searchsorted(ends, ordinal, right=True).clamp(0, max(len(grids) - 1, 0))
    if device.type == "cpu" and len(grids):
        # the tokens' row slots, rows one apart so that one block cannot span two rows
        slot = mask.long().cumsum(1).flatten() + torch.arange(rows).repeat_interleave(length) * (length + 1)
        _check_placeholders(is_image, slot, item, ordinal, ends[:images], sizes[:images])
        video_ends = ends[images:] - (ends[images - 1] if images else 0)
        _check_placeholders(is_video, slot, item - images, ordinal - image_tokens, video_ends, sizes[images:])
    if layout.tokens_per_second is None:  # Qwen2-VL: the temporal index is the patch index
        largest_time = t - 1
    else:  # same operation order as the release: k * seconds * tokens per second, then floor
        largest_time = ((t - 1) * seconds * layout.tokens_per_second).long()
    span = torch.maximum(largest_time, torch.maximum(h, w) - 1) + 1
    # per item: h*w, w, h (at least 1: the divisors of tokens that are not visual), first and last
    # ordinal, span; one gather for every token
    table = torch.stack([(h * w).clamp(min=1), w.clamp(min=1), h.clamp(min=1), ends - sizes, ends - 1, span], dim=1)
    if not len(grids):
        table = torch.ones(1, 6, dtype=torch.long, device=device)  # gathered by text tokens alone
    area, width, height, first, last, block = table[item].unbind(1)
    offset = torch.where(visual, ordinal - first, 0)
    k = offset // area
    if layout.tokens_per_second is None or not len(grids):
        time = k
    else:
        time = (k * seconds[item] * layout.tokens_per_second).long()
    advance = torch.where(visual, torch.where(ordinal == last, block, 0), attended.long()).view(rows, length)
    start = (advance.cumsum(1) - advance).flatten()
    local = torch.stack([time, offset // width % height, offset % width])
    out = torch.where(attended, start + torch.where(visual, local, 0), PAD_POSITION)
    return out.view(3, rows, length)
