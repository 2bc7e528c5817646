"""Turns `MediaItem`s into Qwen2.5-VL model inputs the way GVE embeds them (GVE Sec. 3.3, A.7).

Per item: a chat prompt (an optional task instruction as the system turn, then the image/video
placeholders and the text as the user turn, then the assistant header) with `<|endoftext|>`
appended: that token's final hidden state is the embedding (the released model's processor
appends it; GVE, arXiv:2510.27571, A.7). Videos are sampled as the authors' retriever does through
qwen-vl-utils (`smart_nframes`, then frame indices round(linspace(first, last, n)) over the window):
n = seconds x `fps` clamped to [`min_frames`, `max_frames`] (rounded to the temporal patch), then
to the frames in the window, rounded down to the temporal patch (2). With the authors' settings (fps
1, min_frames 32, max_frames 8) every clip of at least 8 frames gets exactly 8 (GVE A.8: "each video
is uniformly sampled into exactly 8 frames"). The project's PyAV sampler counts the window's frames by
their timestamps (`targets="linspace_frames"`). The rate those frames really have (n / frames in the
window x the stream's rate, qwen-vl-utils' `sample_fps`) goes to the processor as `VideoMetadata`
so the temporal M-RoPE spacing is right (transformers >= 5 ignores a call-time `fps` for
pre-sampled frames). Frames are resized by the
processor within a per-frame pixel budget (`video_max_pixels`, 200 x 28^2 by default: at most 200
merged visual tokens per temporal patch).

Inputs longer than `max_tokens` lose the end of their text (never vision tokens, which the
processor cannot cut); each truncation is counted and warned about.
"""

from __future__ import annotations

import copy
import math
import warnings
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from transformers import BatchFeature
from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize
from transformers.video_utils import VideoMetadata

from lit_retrieval.data.media.frame_cache import FrameCache, cached_or_sampled
from lit_retrieval.data.items import ItemError, MediaItem
from lit_retrieval.data.media.video import FrameSample, VideoDecodeError, sample_frames, video_duration
from lit_retrieval.errors import ConfigError

END_OF_TEXT = "<|endoftext|>"


@dataclass
class InputConfig:
    """Frame sampling, pixel budgets and the token cap.

    Args:
        fps: frames sampled per second of video (GVE A.8: 1.0), before the clamps below.
        max_frames: at most this many frames per video (GVE A.8: 8; floored to the temporal patch).
        min_frames: at least this many frames, when the window has them (the authors' retriever
            passes 32 to qwen-vl-utils; being above `max_frames`, it makes every clip take
            `max_frames` frames).
        video_min_pixels / video_max_pixels: per-frame pixel bounds (qwen-vl-utils' 128 x 28^2 lower
            bound and the authors' 200 x 28^2 upper bound).
        sampling: `exact` frames, or `keyframe` (the key frame at or before each chosen frame: faster,
            approximate; for indexing large galleries).
        image_min_pixels / image_max_pixels: bounds for images (the released processor's 4 and
            256 x 28^2).
        max_tokens: cap on an input's length in tokens (text is cut to fit).
        padding_side: `left` (the pooled token is then always the last column) or `right`.
    """

    fps: float = 1.0
    max_frames: int = 8
    min_frames: int = 32
    sampling: str = "exact"
    video_min_pixels: int = 128 * 28 * 28
    video_max_pixels: int = 200 * 28 * 28
    image_min_pixels: int = 4 * 28 * 28
    image_max_pixels: int = 256 * 28 * 28
    max_tokens: int = 8192
    padding_side: str = "left"

    def __post_init__(self) -> None:
        if self.fps <= 0 or self.max_frames < 1 or self.min_frames < 1 or self.max_tokens < 16:
            raise ConfigError(
                f"impossible input settings: fps {self.fps}, max_frames {self.max_frames}, "
                f"min_frames {self.min_frames}, max_tokens {self.max_tokens}"
            )
        if (
            not 0 < self.video_min_pixels <= self.video_max_pixels
            or not 0 < self.image_min_pixels <= self.image_max_pixels
        ):
            raise ConfigError("pixel bounds must satisfy 0 < min_pixels <= max_pixels")
        if self.padding_side not in ("left", "right"):
            raise ConfigError(f"padding_side must be 'left' or 'right', got {self.padding_side!r}")
        if self.sampling not in ("exact", "keyframe"):
            raise ConfigError(f"sampling must be 'exact' or 'keyframe', got {self.sampling!r}")


def clip_frame_count(seconds: float, config: InputConfig, temporal_patch: int) -> int:
    """qwen-vl-utils' `smart_nframes` for a window of `seconds`, before its clamp to the window's
    frame count (the sampler applies that): seconds x fps within [min_frames rounded up, max_frames
    rounded down] to multiples of the temporal patch, rounded down to a multiple of it."""
    low = math.ceil(config.min_frames / temporal_patch) * temporal_patch
    high = max(temporal_patch, config.max_frames // temporal_patch * temporal_patch)
    return max(temporal_patch, math.floor(min(max(seconds * config.fps, low), high) / temporal_patch) * temporal_patch)


PIXELS_PER_TOKEN = 28 * 28  # one visual token per merged 2 x 2 block of 14-px patches (Qwen2.5-VL)


def scaled_inputs(config: InputConfig, frames: int | None = None, frame_tokens: int | None = None) -> InputConfig:
    """`config` with GVE's test-time scaling settings (GVE A.12, "the number of sampled frames and
    the maximum tokens per frame"): exactly `frames` frames per video (`min_frames = max_frames`, so
    the fps rule no longer decides) and at most `frame_tokens` visual tokens per frame
    (`video_max_pixels = frame_tokens x 28^2`, the lower bound lowered with it if needed). None keeps
    the setting (GVE Sec. 4.1: 8 frames, fewer than 200 tokens per frame)."""
    changes: dict[str, Any] = {}
    if frames is not None:
        if frames < 1:
            raise ValueError(f"frames must be >= 1, got {frames}")
        changes.update(max_frames=frames, min_frames=frames)
    if frame_tokens is not None:
        if frame_tokens < 4:
            raise ValueError(f"tokens per frame must be >= 4, got {frame_tokens}")
        top = frame_tokens * PIXELS_PER_TOKEN
        changes.update(video_max_pixels=top, video_min_pixels=min(config.video_min_pixels, top))
    return replace(config, **changes)


def sample_clip(
    path: str, start: float | None, end: float | None, config: InputConfig, temporal_patch: int
) -> FrameSample:
    """The frames GVE embeds of `path` over `[start, end)` seconds (None: the video's start/end)."""
    duration = video_duration(path)
    first = start or 0.0
    last = min(end, duration) if end is not None else duration
    if last <= first:
        raise VideoDecodeError(path, f"window [{first}, {end}] is outside the {duration:.2f} s video")
    return sample_frames(
        path,
        clip_frame_count(last - first, config, temporal_patch),
        first,
        last,
        targets="linspace_frames",
        frame_multiple=temporal_patch,
        sampling=config.sampling,
    )


def clip_cache_params(config: InputConfig, temporal_patch: int) -> dict[str, Any]:
    """What decides a clip's frames, as a frame cache records it (`lit_retrieval.data.media.frame_cache`)."""
    return {
        "consumer": "gve",
        "fps": config.fps,
        "max_frames": config.max_frames,
        "min_frames": config.min_frames,
        "sampling": config.sampling,
        "temporal_patch": temporal_patch,
    }


@dataclass
class LoadedVideo:
    frames: np.ndarray  # [n, H, W, 3] uint8, n a multiple of the temporal patch size
    fps: float  # sampled frames per second of the clip


def grid_rows(
    ids: torch.Tensor, grid: torch.Tensor | None, token: int, merge: int
) -> tuple[list[int], list[int]] | tuple[None, None]:
    """Per row of a processed Qwen2.5-VL batch: how many of the `grid` entries (images or videos,
    in row order) it holds, and how many pixel rows (patches) they have; `None` without a grid.
    A row's placeholder tokens (`token`) number t*h*w / merge^2 per item."""
    if grid is None:
        return None, None
    tokens = [int(n) for n in (ids == token).sum(1)]
    sizes = [int(t * h * w) for t, h, w in grid.tolist()]
    items, patches, index = [], [], 0
    for need in tokens:
        taken = pixels = 0
        while need > 0:
            need -= sizes[index] // merge**2
            pixels += sizes[index]
            taken, index = taken + 1, index + 1
        items.append(taken)
        patches.append(pixels)
    return items, patches


class GVEProcessing:
    """Callable `(items, instruction) -> BatchFeature` around a Qwen2.5-VL processor."""

    def __init__(self, processor: Any, config: InputConfig | None = None) -> None:
        self.processor = processor
        self.config = config or InputConfig()
        self.tokenizer = processor.tokenizer
        self.tokenizer.padding_side = self.config.padding_side
        video = processor.video_processor
        self.temporal_patch = int(video.temporal_patch_size)
        self.factor = int(video.patch_size) * int(video.merge_size)
        self.merge = int(video.merge_size)
        self.truncated = 0
        self.frame_cache: FrameCache | None = None

    def with_frame_cache(self, root: str) -> GVEProcessing:
        """A copy that reads video frames from the frame cache at `root` (refused if built otherwise)."""
        other = copy.copy(self)
        other.frame_cache = FrameCache(root, clip_cache_params(self.config, self.temporal_patch))
        return other

    # ---- media -------------------------------------------------------------------------------
    def frame_count(self, seconds: float) -> int:
        """`clip_frame_count` with this processor's settings."""
        return clip_frame_count(seconds, self.config, self.temporal_patch)

    def load_video(self, item: MediaItem) -> LoadedVideo:
        path = item.video
        assert path is not None
        sample = cached_or_sampled(
            self.frame_cache,
            path,
            item.start,
            item.end,
            lambda: sample_clip(path, item.start, item.end, self.config, self.temporal_patch),
        )
        frames = sample.frames[sample.mask]
        fps = sample.sampled_fps
        if len(frames) % self.temporal_patch:  # a window of fewer frames than one patch: repeat the last
            pad = self.temporal_patch - len(frames) % self.temporal_patch
            fps *= (len(frames) + pad) / len(frames)
            frames = np.concatenate([frames, np.repeat(frames[-1:], pad, axis=0)])
        return LoadedVideo(frames=frames, fps=fps)

    @staticmethod
    def load_image(path: str) -> np.ndarray:
        try:
            with Image.open(path) as image:
                return np.array(image.convert("RGB"))
        except FileNotFoundError:
            raise ItemError(f"{path}: image file not found") from None
        except (UnidentifiedImageError, OSError) as err:
            raise ItemError(f"{path}: unreadable image ({err})") from None

    def vision_tokens(self, height: int, width: int, frames: int, min_pixels: int, max_pixels: int) -> int:
        """Merged visual tokens the processor will emit for this geometry (GVE A.7: T_v = THW/p^2)."""
        h, w = smart_resize(height, width, factor=self.factor, min_pixels=min_pixels, max_pixels=max_pixels)
        grid_t = math.ceil(frames / self.temporal_patch)
        return grid_t * (h // self.factor) * (w // self.factor)

    # ---- prompts -----------------------------------------------------------------------------
    @staticmethod
    def messages(item: MediaItem, text: str | None, instruction: str | None) -> list[dict]:
        content: list[dict] = []
        if item.video is not None:
            content.append({"type": "video"})
        if item.image is not None:
            content.append({"type": "image"})
        if text is not None:
            content.append({"type": "text", "text": text})
        turns = [{"role": "system", "content": instruction}] if instruction else []
        return turns + [{"role": "user", "content": content}]

    def prompt(self, item: MediaItem, text: str | None, instruction: str | None) -> str:
        """The chat prompt with the generation prompt (`<|im_start|>assistant\\n`), then `<|endoftext|>`,
        whose final hidden state is pooled. Source: GVE's released inference code, Alibaba-NLP/VRAG
        (commit 24f8d05) `search_engine/models/GVE/qwen25vl/qwen25vl_processor.py`: its processor
        tokenizes the templated text (`add_generation_prompt=True`, `processor.py`) to `max_length - 1`
        and appends the `<|endoftext|>` id with attention 1 to every sequence; GVE A.7 pools "the EOS
        token in left-padded sequences". (The model card's usage section was not readable here.)"""
        rendered = self.processor.apply_chat_template(
            [self.messages(item, text, instruction)], tokenize=False, add_generation_prompt=True
        )
        return rendered[0] + END_OF_TEXT

    def fit_text(self, item: MediaItem, instruction: str | None, visual: int) -> str:
        """The prompt with the item's text cut so the whole input fits `max_tokens`."""
        cap = self.config.max_tokens
        prompt = self.prompt(item, item.text, instruction)
        if len(prompt) + visual <= cap:  # every token covers at least one character: no need to count
            return prompt
        placeholders = (item.image is not None) + (item.video is not None)
        length = len(self.tokenizer(prompt, add_special_tokens=False)["input_ids"]) - placeholders + visual
        if length <= cap:
            return prompt
        text_ids = self.tokenizer(item.text or "", add_special_tokens=False)["input_ids"]
        keep = len(text_ids) - (length - cap)
        if keep < 1:
            raise ItemError(
                f"{item.video or item.image or 'text item'}: {length} tokens exceed max_tokens {cap} "
                "even without its text; "
                "lower the pixel budget or max_frames, or raise max_tokens"
            )
        self.truncated += 1
        warnings.warn(
            f"input truncated from {length} to {cap} tokens ({self.truncated} truncated so far)", stacklevel=3
        )
        return self.prompt(item, self.tokenizer.decode(text_ids[:keep]), instruction)

    # ---- batch -------------------------------------------------------------------------------
    def media_rows(self, batch: dict[str, Any]) -> dict[str, tuple[list[int], list[int]]]:
        """Per kind of media a processed batch holds ("image", "video"): how many items and pixel rows
        each of its rows has (`grid_rows`). Read on the host (the DataLoader workers) so that cutting
        the batch into chunks on the GPU (gradient caching) needs no device -> host copy."""
        processor, out = self.processor, {}
        for kind, grid, token in (
            ("image", "image_grid_thw", processor.image_token_id),
            ("video", "video_grid_thw", processor.video_token_id),
        ):
            if batch.get(grid) is not None:
                out[kind] = grid_rows(batch["input_ids"], batch[grid], token, processor.image_processor.merge_size)
        return out

    def __call__(self, items: list[MediaItem], instruction: str | None = None) -> BatchFeature:
        cfg = self.config
        prompts, images, videos, metadata = [], [], [], []
        for item in items:
            visual = 0
            if item.image is not None:
                image = self.load_image(item.image)
                images.append(image)
                visual += self.vision_tokens(
                    *image.shape[:2], self.temporal_patch, cfg.image_min_pixels, cfg.image_max_pixels
                )
            if item.video is not None:
                video = self.load_video(item)
                videos.append(video.frames)
                n = len(video.frames)
                metadata.append(VideoMetadata(total_num_frames=n, fps=video.fps, frames_indices=list(range(n))))
                visual += self.vision_tokens(*video.frames.shape[1:3], n, cfg.video_min_pixels, cfg.video_max_pixels)
            prompts.append(self.fit_text(item, instruction, visual))
        kwargs: dict[str, Any] = {}
        if images:
            kwargs["images"] = images
            kwargs["images_kwargs"] = {
                "size": {"shortest_edge": cfg.image_min_pixels, "longest_edge": cfg.image_max_pixels}
            }
        if videos:
            kwargs["videos"] = videos
            kwargs["videos_kwargs"] = {
                "do_sample_frames": False,
                "video_metadata": metadata,
                "size": {"shortest_edge": cfg.video_min_pixels, "longest_edge": cfg.video_max_pixels},
                "cap_pixels_per_frame": True,
            }
        return self.processor(text=prompts, padding=True, return_tensors="pt", **kwargs)
