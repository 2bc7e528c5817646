"""DataModule for multi-event text-video data in the canonical annotation format.

Every item is one video with its event descriptions; the LightningModule builds the query
(concatenated or per-event, MELON Sec. 4.2 / Tab. 5). Videos are decoded per item with PyAV
(safe in DataLoader workers). `on_bad_video="skip"` drops an undecodable video from its batch,
logs its path and reports it in the batch (`skipped`), so the module can count skips across
worker processes; `"raise"` stops with the `VideoDecodeError`.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from lit_retrieval.data.annotations import load_annotations
from lit_retrieval.data.records import VideoRecord
from lit_retrieval.data.synthetic import SynthConfig, generate_corpus
from lit_retrieval.data.transforms import CLIP_MEAN, CLIP_STD, NormalizeFrames
from lit_retrieval.data.video import VideoDecodeError, sample_frames

log = logging.getLogger(__name__)


class MultiEventDataset(Dataset):
    """Items: `index`, `video_id`, `frames` [T, 3, S, S], `frame_mask` [T], `frame_times` [T],
    `events` (list of descriptions). A bad video under the skip policy yields `{"index", "error"}`."""

    def __init__(
        self,
        records: list[VideoRecord],
        video_root: Path,
        num_frames: int,
        image_size: int,
        on_bad_video: Literal["raise", "skip"] = "raise",
        normalize: NormalizeFrames | None = None,
        seek_threshold: float = 1.0,
    ) -> None:
        self.records = records
        self.video_root = video_root
        self.num_frames = num_frames
        self.image_size = image_size
        self.on_bad_video = on_bad_video
        self.normalize = normalize or NormalizeFrames()
        self.seek_threshold = seek_threshold

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> dict[str, Any]:
        record = self.records[index]
        path = self.video_root / record.path
        try:
            sample = sample_frames(path, self.num_frames, size=self.image_size, seek_threshold=self.seek_threshold, duration=record.duration)
        except VideoDecodeError as err:
            if self.on_bad_video == "raise":
                raise
            log.warning("skipping video %s (%s): %s", record.video_id, err.path, err.reason)
            return {"index": index, "error": str(err)}
        return {
            "index": index,
            "video_id": record.video_id,
            "frames": self.normalize(sample.frames),
            "frame_mask": torch.from_numpy(sample.mask),
            "frame_times": torch.from_numpy(sample.times),
            "events": record.descriptions,
        }


def collate_items(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack good items; bad ones are listed under `skipped` (may leave an empty batch)."""
    good = [item for item in items if "error" not in item]
    batch: dict[str, Any] = {
        "index": torch.tensor([item["index"] for item in good], dtype=torch.long),
        "video_id": [item["video_id"] for item in good],
        "events": [item["events"] for item in good],
        "skipped": [item["error"] for item in items if "error" in item],
    }
    for key in ("frames", "frame_mask", "frame_times"):
        batch[key] = torch.stack([item[key] for item in good]) if good else torch.empty(0)
    return batch


@dataclass
class SyntheticSpec:
    """Make the synthetic corpus in the annotation's folder when the annotation is missing."""

    num_videos: int = 1200
    seed: int = 0
    size: int = 64
    fps: int = 8


class MultiEventDataModule(L.LightningDataModule):
    """Train/val/test splits of a canonical multi-event annotation file.

    Args:
        annotation: the canonical JSON file (see `lit_retrieval.data.annotations`).
        video_root: folder the records' relative paths start from (default: the file's folder).
        num_frames: T frames sampled uniformly over each video (MELON: 64).
        image_size: frames are resized (short side) and centre-cropped to this size; it must
            match the encoder's vision tower.
        val_split: split used by `validate` and per-epoch validation (`None`: no validation;
            MELON defines no validation split, see the docs on model selection).
        on_bad_video: `raise` or `skip` (count, log and drop the sample from its batch).
        synthetic: generate the synthetic corpus if `annotation` does not exist.
    """

    def __init__(
        self,
        annotation: str,
        video_root: str | None = None,
        num_frames: int = 12,
        image_size: int = 224,
        batch_size: int = 16,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        train_split: str = "train",
        val_split: str | None = None,
        test_split: str = "test",
        on_bad_video: Literal["raise", "skip"] = "raise",
        mean: tuple[float, float, float] = CLIP_MEAN,
        std: tuple[float, float, float] = CLIP_STD,
        seek_threshold: float = 1.0,
        synthetic: SyntheticSpec | None = None,
    ) -> None:
        super().__init__()
        if on_bad_video not in ("raise", "skip"):
            raise ValueError(f"on_bad_video must be 'raise' or 'skip', got {on_bad_video!r}")
        self.annotation = Path(annotation)
        self.video_root = Path(video_root) if video_root else self.annotation.parent
        self.num_frames = num_frames
        self.image_size = image_size
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.num_workers = num_workers
        self.splits = {"train": train_split, "val": val_split, "test": test_split}
        self.on_bad_video = on_bad_video
        self.normalize = NormalizeFrames(mean, std)
        self.seek_threshold = seek_threshold
        self.synthetic = synthetic
        self.datasets: dict[str, MultiEventDataset] = {}

    def prepare_data(self) -> None:
        if self.synthetic is not None and not self.annotation.exists():
            cfg = SynthConfig(**asdict(self.synthetic))
            log.info("creating the synthetic corpus in %s", self.annotation.parent)
            written = generate_corpus(self.annotation.parent, cfg)
            if written != self.annotation:
                written.replace(self.annotation)

    def setup(self, stage: str | None = None) -> None:
        records = load_annotations(self.annotation)
        for role, split in self.splits.items():
            if split is None:
                continue
            chosen = [r for r in records if r.split == split]
            if not chosen and role != "val":
                found = sorted({r.split for r in records})
                raise ValueError(f"{self.annotation}: no videos in split {split!r} (splits present: {found})")
            self.datasets[role] = MultiEventDataset(
                chosen, self.video_root, self.num_frames, self.image_size, self.on_bad_video, self.normalize, self.seek_threshold
            )

    def _loader(self, role: str, train: bool) -> DataLoader:
        if role not in self.datasets:
            raise ValueError(f"no {role} split configured (set data.{role}_split)")
        return DataLoader(
            self.datasets[role],
            batch_size=self.batch_size if train else self.eval_batch_size,
            shuffle=train,
            drop_last=train,
            num_workers=self.num_workers,
            collate_fn=collate_items,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", train=False) if "val" in self.datasets else []

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", train=False)
