"""`MultiEventDataset`: one item per video record, its frames decoded per item with PyAV (safe in
DataLoader workers), and `collate_items`, which stacks the good items of a batch.

`on_bad_video="skip"` turns an undecodable video into an `{"index", "error"}` item, which
`collate_items` lists under `skipped`, so the module can count skips across worker processes;
`"raise"` stops with the `VideoDecodeError`.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import Dataset

from lit_retrieval.data.media.frame_cache import FrameCache, cached_or_sampled
from lit_retrieval.data.media.normalize import NormalizeFrames
from lit_retrieval.data.media.shots import Shots, frame_shot_index
from lit_retrieval.data.media.video import Decoder, Sampling, SamplingSpec, VideoDecodeError, sample_video
from lit_retrieval.data.records import VideoRecord

log = logging.getLogger(__name__)


class MultiEventDataset(Dataset):
    """Items: `index`, `video_id`, `frames` [T, 3, S, S], `frame_mask` [T], `frame_times` [T],
    `events` (list of descriptions), `duration` (seconds); with `shots` (one shot list per record)
    also `frame_shots` [T] (each frame's shot, -1 where padded; `frame_shot_index`) and
    `num_shots` (the video's detected shot count). A bad video under the skip policy yields
    `{"index", "error"}`."""

    def __init__(
        self,
        records: list[VideoRecord],
        video_root: Path,
        num_frames: int,
        image_size: int,
        on_bad_video: Literal["raise", "skip"] = "raise",
        normalize: NormalizeFrames | None = None,
        seek_threshold: float = 1.0,
        shots: list[Shots] | None = None,
        trim_to_annotation: bool = False,
        sampling: Sampling = "exact",
        frame_cache: FrameCache | None = None,
        uint8_frames: bool = False,
        decoder: Decoder = "pyav",
    ) -> None:
        if shots is not None and len(shots) != len(records):
            raise ValueError(f"{len(shots)} shot lists for {len(records)} records")
        self.records = records
        self.shots = shots
        self.video_root = video_root
        self.num_frames = num_frames
        self.image_size = image_size
        self.on_bad_video = on_bad_video
        self.normalize = normalize or NormalizeFrames()
        self.seek_threshold = seek_threshold
        self.trim_to_annotation = trim_to_annotation
        self.spec = SamplingSpec(num_frames, image_size, sampling=sampling, decoder=decoder)  # every item's frames
        self.frame_cache = frame_cache
        self.uint8_frames = uint8_frames  # `frames` stay uint8 [T, 3, S, S]; the data module normalises on the device

    @staticmethod
    def cache_params(spec: SamplingSpec, trim_to_annotation: bool) -> dict[str, Any]:
        """What decides an item's frames, as a frame cache records it (`lit_retrieval.data.media.frame_cache`).
        The decoder is named only when it is not PyAV (caches written before the choice existed stay
        valid; torchcodec's resized frames differ from PyAV's by rounding)."""
        params = asdict(spec)
        if params["decoder"] == "pyav":
            del params["decoder"]
        return {"consumer": "video-text", **params, "trim_to_annotation": trim_to_annotation}

    def __len__(self) -> int:
        return len(self.records)

    def window(self, record: VideoRecord) -> tuple[float | None, float | None]:
        """The (start, end) seconds `record`'s frames are sampled in: its `window`, else `[0, duration]`
        with `trim_to_annotation`, else the whole file (`None, None`)."""
        if record.window is not None:
            return record.window
        return None, record.duration if self.trim_to_annotation else None

    def __getitem__(self, index: int) -> dict[str, Any]:
        record = self.records[index]
        path = self.video_root / record.path
        try:
            start, end = self.window(record)
            sample = cached_or_sampled(
                self.frame_cache,
                path,
                start,
                end,
                lambda: sample_video(
                    path, self.spec, start, end, seek_threshold=self.seek_threshold, duration=record.duration
                ),
            )
        except VideoDecodeError as err:
            if self.on_bad_video == "raise":
                raise
            log.warning("skipping video %s (%s): %s", record.video_id, err.path, err.reason)
            return {"index": index, "error": str(err)}
        item = {
            "index": index,
            "video_id": record.video_id,
            "frames": torch.from_numpy(sample.frames).permute(0, 3, 1, 2)
            if self.uint8_frames
            else self.normalize(sample.frames),
            "frame_mask": torch.from_numpy(sample.mask),
            "frame_times": torch.from_numpy(sample.times),
            "events": record.descriptions,
            "duration": record.duration,
        }
        if self.shots is not None:
            item["frame_shots"] = torch.from_numpy(frame_shot_index(sample.times, self.shots[index]))
            item["num_shots"] = len(self.shots[index])
        return item


def collate_items(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack good items; bad ones are listed under `skipped` (may leave an empty batch).

    Only the model's inputs (`frames`, `frame_mask`, `frame_shots`) and integer fields are tensors: a
    precision plugin casts every floating tensor of a batch (DeepSpeed's bf16 made 299 s of
    `duration` 300 s, moving videos across MELON's length slices), so the metadata stays out of it,
    `duration` as float seconds and `frame_times` as a float64 array `[B, T]`."""
    good = [item for item in items if "error" not in item]
    batch: dict[str, Any] = {
        "index": torch.tensor([item["index"] for item in good], dtype=torch.long),
        "video_id": [item["video_id"] for item in good],
        "events": [item["events"] for item in good],
        "skipped": [item["error"] for item in items if "error" in item],
        "skipped_index": torch.tensor([item["index"] for item in items if "error" in item], dtype=torch.long),
        "duration": [float(item["duration"]) for item in good],
        "frame_times": np.stack([item["frame_times"].numpy() for item in good]) if good else np.empty((0, 0)),
    }
    for key in ("frames", "frame_mask"):
        batch[key] = torch.stack([item[key] for item in good]) if good else torch.empty(0)
    if good and "frame_shots" in good[0]:
        batch["frame_shots"] = torch.stack([item["frame_shots"] for item in good])
        batch["num_shots"] = torch.tensor([item["num_shots"] for item in good], dtype=torch.long)
    return batch
