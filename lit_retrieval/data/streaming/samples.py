"""One stored sample per item of a video-text split: the item's sampled frames (as the frame cache holds
them: `num_frames` frames at `image_size`) and its text fields, and the way back to the item the data
module's batches are made of (`MultiEventDataset`'s keys, so `collate_items` and every module take it).

`frames` keeps the uint8 frames [T, S, S, 3] as they are; `mp4` keeps them as an H.264 stream in RGB with
QP 0 (libx264rgb, lossless: the frames decode to the same bytes), paid for by a decode per item; on the
benchmark's noise-like frames it is not smaller and 38x slower to read (docs/benchmarks.md, "Shards at scale").
"""

from __future__ import annotations

import io
import json
from typing import Any, Literal

import numpy as np
import torch

from lit_retrieval.data.media.normalize import NormalizeFrames
from lit_retrieval.data.media.pyav_threads import decode_on_one_thread, to_rgb

Encoding = Literal["frames", "mp4"]
ENCODINGS: tuple[str, ...] = ("frames", "mp4")


def encode_mp4(frames: np.ndarray) -> bytes:
    """uint8 frames [T, H, W, 3] as a lossless H.264 (libx264rgb, QP 0) mp4, one frame per second."""
    import av

    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as container:
        stream = container.add_stream("libx264rgb", rate=1)
        stream.width, stream.height, stream.pix_fmt = frames.shape[2], frames.shape[1], "rgb24"
        stream.options = {"qp": "0"}
        for frame in frames:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")))
        container.mux(stream.encode())
    return buffer.getvalue()


def decode_mp4(data: bytes | memoryview) -> np.ndarray:
    """The frames of `encode_mp4`'s bytes, uint8 [T, H, W, 3]."""
    import av

    with av.open(io.BytesIO(bytes(data))) as container:
        stream = decode_on_one_thread(container.streams.video[0])  # no FFmpeg pool for a forked worker to inherit
        return np.stack([to_rgb(frame) for frame in container.decode(stream)])


def to_sample(item: dict[str, Any], encoding: Encoding) -> dict[str, Any]:
    """The stored form of a `MultiEventDataset` item made with `uint8_frames` (frames [T, 3, S, S])."""
    frames = item["frames"].permute(0, 2, 3, 1).contiguous().numpy()
    sample = {
        "index": int(item["index"]),
        "video_id": str(item["video_id"]),
        "events": json.dumps(list(item["events"])),
        "duration": float(item["duration"]),
        "frame_mask": item["frame_mask"].numpy(),
        "frame_times": item["frame_times"].numpy(),
    }
    if encoding == "mp4":
        sample["mp4"] = encode_mp4(frames)
    else:
        sample["frames"] = frames
    return sample


class ToItem:
    """A stored sample back to the item `MultiEventDataset` gives: frames normalised, or uint8 [T, 3, S, S]
    with `uint8_frames` (`normalize_on_device`). Picklable: litdata runs it in the loader's workers."""

    def __init__(self, normalize: NormalizeFrames, uint8_frames: bool = False) -> None:
        self.normalize = normalize
        self.uint8_frames = uint8_frames

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        frames = decode_mp4(sample["mp4"]) if "mp4" in sample else np.asarray(sample["frames"])
        return {
            "index": int(sample["index"]),
            "video_id": sample["video_id"],
            "frames": torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2)
            if self.uint8_frames
            else self.normalize(frames),
            "frame_mask": torch.as_tensor(np.asarray(sample["frame_mask"])),
            "frame_times": torch.as_tensor(np.asarray(sample["frame_times"])),
            "events": json.loads(sample["events"]),
            "duration": float(sample["duration"]),
        }
