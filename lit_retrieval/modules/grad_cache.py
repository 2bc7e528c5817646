"""Gradient caching (GradCache; Gao et al. 2021, "Scaling Deep Contrastive Learning Batch Size under
Memory Limited Setup", Sec. 3): the contrastive loss of a large batch with the activation memory of
one chunk.

The paper's three steps, and how this module realises them inside one ordinary Lightning training
step (automatic optimisation: `accumulate_grad_batches`, gradient clipping, LR schedulers, DDP and
DeepSpeed see one loss and one backward, exactly as without caching):

1. *Graph-less representation pass*: each chunk of `chunk` rows goes through the encoder under a
   non-reentrant `torch.utils.checkpoint` region, which keeps none of the chunk's activations (only
   its inputs and its output embeddings) -- the paper's forward under `no_grad`.
2. *Representation gradient computation and caching*: the loss is computed on the whole batch's
   embeddings (all in-batch, hard and cross-device negatives); its backward stops at each chunk's
   embeddings with the gradient of the full-batch loss there (the cached gradient).
3. *Sub-batch gradient accumulation*: autograd then re-runs each chunk's forward with graph (the
   checkpoint's recomputation, one chunk at a time, the last chunk first) and back-propagates that
   cached gradient into the encoder's parameters, which sum over chunks.

The result is the full-batch loss and every parameter's full-batch gradient (up to float
rounding; tested at chunks 1, 2 and the batch). One backward means each parameter's gradient
is final once, so DDP's bucketed all-reduce and DeepSpeed ZeRO-2's gradient partitioning see what
they see without caching; the paper's per-chunk `backward` calls would fire their hooks once per chunk.

Random state: the recomputation restores, per chunk, the torch CPU generator and the generator of
the model's device (CUDA) as they were when the chunk ran in step 1 (`preserve_rng_state`; a tensor
on the model's device is passed so its generator is recorded also for text chunks, whose input
is a list of strings), so dropout (LoRA dropout included) draws the same masks in both passes and
the generators end the step as if each chunk had run once. Python's `random` and numpy are not
touched inside the towers; MEA's partial queries are drawn once per step before the encoders run
(a seeded sampler keyed by epoch, batch and rank), and frame augmentation happens in the data
loader, so both passes see the same inputs. Autocast (bf16-mixed) is restored with the RNG state.

Chunks change only how the towers are batched: each row's representation must depend on that row
alone (true of the text and video towers and of every head's `encode_text`/`encode_video` except
where `DualEncoderRetrieval` refuses a head, see `GradCacheConfig`), so a chunk of 1 equals the
full batch. Dropout draws differ between a chunked and an unchunked step (other masks, the same
distribution), as they would between two batch sizes.
"""

from __future__ import annotations

from collections.abc import Callable
import logging
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from lit_retrieval.models.gve.processing import grid_rows
from lit_retrieval.errors import ConfigError
from lit_retrieval.models.heads.base import cat_reps

log = logging.getLogger(__name__)
Rows = Any  # a list (texts, media items) or a dict of batch-first tensors / lists


@dataclass
class GradCacheConfig:
    """`model.grad_cache`: rows per encoder call on each side; `null` puts the whole side in one
    chunk (still cached: its activations are recomputed in backward).

    Args:
        text_chunk: query rows per text-tower call (`DualEncoderRetrieval`: whole queries and MEA's
            partial queries, or MeVTR's event captions; `GVERetrieval`: the queries).
        video_chunk: rows per video-side call (`DualEncoderRetrieval`: videos with all their
            frames; `GVERetrieval`: the targets, positives then hard negatives).
    """

    text_chunk: int | None = None
    video_chunk: int | None = None

    def __post_init__(self) -> None:
        for name in ("text_chunk", "video_chunk"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"grad_cache.{name} must be a positive number of rows or null, got {value}")


def row_spans(rows: int, chunk: int | None) -> list[tuple[int, int]]:
    """`[start, stop)` of each chunk of `rows` rows, `chunk` at a time (one span when None)."""
    size = rows if chunk is None else chunk
    return [(start, min(start + size, rows)) for start in range(0, rows, max(1, size))]


def slice_rows(rows: Rows, start: int, stop: int) -> Rows:
    """Rows `start:stop` of a list, or of every entry of a dict whose values are batch first
    (tensors and lists; other values, e.g. a batch-wide count, are kept)."""
    if isinstance(rows, dict):
        return {k: slice_rows(v, start, stop) if isinstance(v, (torch.Tensor, list)) else v for k, v in rows.items()}
    return rows[start:stop]


def cached_encode(
    encode: Callable[[Rows], Any],
    rows: Rows,
    count: int,
    chunk: int | None,
    device: torch.device,
    split: Callable[[Rows, int, int], Rows] = slice_rows,
) -> Any:
    """`encode(rows)` computed chunk by chunk under gradient caching (module docstring): the
    representations of all `count` rows, concatenated (`cat_reps`), whose backward recomputes one
    chunk at a time. `split(rows, start, stop)` cuts a chunk (default `slice_rows`); `device` is
    the model's, whose random generator is restored in the recomputation."""
    anchor = torch.empty(0, device=device)  # makes checkpoint record this device's generator

    def run(_: torch.Tensor, part: Rows) -> Any:
        return encode(part)

    parts = [
        checkpoint(run, anchor, split(rows, start, stop), use_reentrant=False, preserve_rng_state=True)
        for start, stop in row_spans(count, chunk)
    ]
    return parts[0] if len(parts) == 1 else cat_reps(parts)


@dataclass
class QwenRowSplitter:
    """Cuts a processed Qwen2.5-VL batch (`input_ids`, `attention_mask`, `mm_token_type_ids`,
    `pixel_values` + `image_grid_thw`, `pixel_values_videos` + `video_grid_thw` +
    `second_per_grid_ts`) into the batch of rows `start:stop`: text tensors by row, the pixel
    rows and grids of the images and videos those rows hold (the processor concatenates them over
    the batch in row order). Rows keep the batch's padded length.

    Where each row's images and videos lie (`media_rows`) is read from the batch's tensors; on a GPU
    that read waits for the device, so give it beforehand as `rows`: the training batches carry it,
    read in the DataLoader workers (`GVEProcessing.media_rows`)."""

    image_token: int
    video_token: int
    merge: int
    rows: dict[str, tuple[list[int], list[int]]] | None = None

    MEDIA = (
        ("pixel_values", ("image_grid_thw",), "image"),
        ("pixel_values_videos", ("video_grid_thw", "second_per_grid_ts"), "video"),
    )

    def media_rows(self, batch: dict[str, torch.Tensor]) -> dict[str, tuple[list[int], list[int]]]:
        """Per kind of media in the batch: how many items and pixel rows each row holds (`grid_rows`)."""
        out = {}
        for pixels, grids, kind in self.MEDIA:
            if batch.get(pixels) is not None:
                token = self.image_token if kind == "image" else self.video_token
                out[kind] = grid_rows(batch["input_ids"], batch[grids[0]], token, self.merge)
        return out

    def __call__(self, batch: dict[str, torch.Tensor], start: int, stop: int) -> dict[str, torch.Tensor]:
        media = {key for pixels, grids, _ in self.MEDIA for key in (pixels, *grids)}
        out = {k: v[start:stop] for k, v in batch.items() if k not in media and isinstance(v, torch.Tensor)}
        rows = self.media_rows(batch) if self.rows is None else self.rows
        for pixels, grids, kind in self.MEDIA:
            if batch.get(pixels) is None:
                continue
            items, patches = rows[kind]
            first_item, first_patch = sum(items[:start]), sum(patches[:start])
            last_item, last_patch = first_item + sum(items[start:stop]), first_patch + sum(patches[start:stop])
            if last_item > first_item:  # a chunk without images (videos) has no such keys
                out[pixels] = batch[pixels][first_patch:last_patch]
                out.update({g: batch[g][first_item:last_item] for g in grids if batch.get(g) is not None})
        return out


class RecipeBatchCheck:
    """Warns once per run (rank 0) when a step contrasts another number of pairs than the paper's
    recipe: `recipe` is that number (`model.recipe_batch`: the texts x videos of one step,
    summed over ranks under cross-device negatives; GVE: `model.recipe_ranks`, see there),
    `None` checks nothing. Reaching it on fewer GPUs: GPUs x per-GPU batch = recipe, the per-GPU
    batch fitting in memory through `grad_cache` chunks."""

    def __init__(self, option: str, recipe: int | None, what: str = "contrastive batch") -> None:
        self.option, self.recipe, self.what, self.warned = option, recipe, what, False

    def check(self, actual: int, rank: int, how: str) -> None:
        if self.recipe is None or self.warned or actual == self.recipe:
            return
        self.warned = True
        if rank == 0:
            log.warning(
                "%s is %d but this run has %d (%s): its %s differs from the paper's; "
                "reach it with GPUs x per-GPU batch, the batch fitting in memory with model.grad_cache chunks",
                self.option,
                self.recipe,
                actual,
                how,
                self.what,
            )
