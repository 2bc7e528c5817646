"""The base DataModules of text-video records: `VideoTextDataModule` (splits, batching, frame
sampling, the bad-record and bad-video policies) and `SplitFilesDataModule` (one annotation file per
split). Each dataset in `lit_retrieval.data.datasets` subclasses one of them with its own parser.
"""

from __future__ import annotations

import logging
import os
from abc import ABC, abstractmethod
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, Literal, Protocol

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader

from lit_retrieval.data.bad_records import BadRecordPolicy, RecordCollector
from lit_retrieval.data.batching.dataset import MultiEventDataset, collate_items
from lit_retrieval.data.batching.resume import EpochPosition
from lit_retrieval.data.batching.samplers import EpochShuffle
from lit_retrieval.data.batching.workers import pins_memory, worker_init_fn
from lit_retrieval.data.media.cache_plan import Plan, WindowSampler, sorted_unique
from lit_retrieval.data.media.frame_cache import CacheJob, FrameCache
from lit_retrieval.data.media.identity import file_path
from lit_retrieval.data.media.normalize import CLIP_MEAN, CLIP_STD, NormalizeFrames
from lit_retrieval.data.media.shots import ShotConfig, Shots, detect_many, uncached
from lit_retrieval.data.media.decoding import BUILTIN_DECODER, Decoder, check_decoder
from lit_retrieval.data.media.video import SamplingSpec, decoder_backend
from lit_retrieval.data.records import AnnotationError, VideoRecord
from lit_retrieval.errors import ConfigError, check_at_least

log = logging.getLogger(__name__)


class VideoTextDataModule(EpochPosition, L.LightningDataModule, ABC):
    """Train/val/test splits of text-video records; subclasses read one annotation format each.

    Args:
        video_root: folder the records' relative video paths start from (default: the
            subclass's annotation folder).
        num_frames: T frames sampled uniformly over each video (MELON: 64).
        image_size: frames are resized (short side) and centre-cropped to this size; it must
            match the encoder's vision tower.
        val_split: split used by `validate` and per-epoch validation (`None`: no validation;
            MELON defines no validation split, see the docs on model selection).
        on_bad_video: `raise` or `skip` (count, log and drop the sample from its batch).
        on_bad_record: `raise` on the first malformed annotation record, or `skip` it (counted
            in `dropped_records` and logged with the reasons).
        min_events: a training video with fewer events is a bad record (2 where MEA needs partial
            queries).
        min_events_scope: `train` (default) applies `min_events` to the training split only, so a
            model trained with MEA is evaluated on the same val/test gallery as its baseline
            (MELON Tab. 4 compares the rows on one test set); `all` applies it to every split.
        shuffle_seed: seed of the training order (with the epoch; see `EpochShuffle`).
        shots: detect shots (PySceneDetect, cached) and give every item its frames' shot
            indices (SALI). Videos whose detection fails follow `on_bad_video`.
        trim_to_annotation: sample frames in [0, the record's duration] instead of the whole file
            (Condensed Movies: the annotated duration leaves out the YouTube outro).
        sampling: `exact` (the frame at each uniform target) or `keyframe` (the key frame at or
            before each target: one decode per frame, up to one GOP early; for evaluating and
            indexing large galleries fast, see docs/datasets.md for its measured cost).
        decoder: `pyav`, or `torchcodec` (the optional `torchcodec` extra and FFmpeg's shared
            libraries; `exact` sampling): the same frames at the original size, decoded by torchcodec
            (a backend of `lit_retrieval.data.media.decoding`; docs/datasets.md compares the two).
        holdout_val: move this fraction of the training videos (seeded by `shuffle_seed`) into
            the `val_split`, for datasets without a validation split (SALI Sec. 4: 10% on
            ActivityNet). Records sharing a video file move together.
        allow_split_overlap: a video (file) in the training split and in an evaluation split
            (val/test) is an error naming it, since evaluation would score videos trained on;
            `true` accepts such files and logs how many there are.
        frame_cache: read frames from this frame cache (`lit-retrieval cache-frames`) instead of
            decoding; a video missing from it is decoded (with a warning), a cache of other sampling
            parameters or changed videos is refused (`lit_retrieval.data.media.frame_cache`).
        normalize_on_device: items carry uint8 frames (a quarter of the bytes through the worker
            queue and to the GPU) and are normalised after the batch reaches the device
            (`on_after_batch_transfer`): the same values, measured in docs/datasets.md.
    """

    def __init__(
        self,
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
        on_bad_record: BadRecordPolicy = "raise",
        min_events: int = 1,
        min_events_scope: Literal["train", "all"] = "train",
        mean: tuple[float, float, float] = CLIP_MEAN,
        std: tuple[float, float, float] = CLIP_STD,
        seek_threshold: float = 1.0,
        shuffle_seed: int = 0,
        shots: ShotConfig | None = None,
        trim_to_annotation: bool = False,
        sampling: Literal["exact", "keyframe"] = "exact",
        decoder: Decoder = "pyav",
        holdout_val: float = 0.0,
        allow_split_overlap: bool = False,
        frame_cache: str | None = None,
        normalize_on_device: bool = False,
    ) -> None:
        super().__init__()
        # impossible values are refused when the config is parsed (LightningCLI builds the module then)
        check_at_least(
            "data", 1, num_frames=num_frames, image_size=image_size, batch_size=batch_size, min_events=min_events
        )
        check_at_least("data", 1, **({"eval_batch_size": eval_batch_size} if eval_batch_size is not None else {}))
        check_at_least("data", 0, num_workers=num_workers)
        if not 0 <= holdout_val < 1:
            raise ConfigError(f"data.holdout_val must lie in [0, 1), got {holdout_val}")
        if holdout_val and val_split is None:
            raise ConfigError("data.holdout_val needs a val_split name for the held-out videos")
        if on_bad_video not in ("raise", "skip"):
            raise ConfigError(f"data.on_bad_video must be 'raise' or 'skip', got {on_bad_video!r}")
        if sampling not in ("exact", "keyframe"):
            raise ConfigError(f"data.sampling must be 'exact' or 'keyframe', got {sampling!r}")
        self._check_decoder(decoder, sampling)
        RecordCollector(on_bad_record)  # validates the policy now, not at setup
        self.video_root = Path(video_root) if video_root else None
        self.num_frames = num_frames
        self.image_size = image_size
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.num_workers = num_workers
        self.splits = {"train": train_split, "val": val_split, "test": test_split}
        self.on_bad_video = on_bad_video
        self.on_bad_record = on_bad_record
        if min_events_scope not in ("train", "all"):
            raise ConfigError(f"data.min_events_scope must be 'train' or 'all', got {min_events_scope!r}")
        self.min_events = min_events
        self.min_events_scope = min_events_scope
        self.normalize = NormalizeFrames(mean, std)
        self.seek_threshold = seek_threshold
        self.shuffle_seed = shuffle_seed
        self.shots = shots
        self.trim_to_annotation = trim_to_annotation
        self.sampling = sampling
        self.decoder = decoder
        self.holdout_val = holdout_val
        self.allow_split_overlap = allow_split_overlap
        self.frame_cache = frame_cache
        self.normalize_on_device = normalize_on_device
        self.datasets: dict[str, MultiEventDataset] = {}
        self.dropped_records: list[AnnotationError] = []

    @staticmethod
    def _check_decoder(decoder: str, sampling: str) -> None:
        """Refuse an unknown decoder, torchcodec with keyframe sampling, or torchcodec missing (with
        what to install) when the config is parsed, not in the first DataLoader worker."""
        check_decoder(decoder, sampling, option="data.decoder")
        if decoder != BUILTIN_DECODER:
            try:
                decoder_backend(decoder).require()
            except ConfigError as err:
                raise ConfigError(f"data.{err}") from None

    @property
    @abstractmethod
    def source(self) -> str:
        """The annotation file or folder, for messages."""

    @abstractmethod
    def default_video_root(self) -> Path:
        """Where videos are looked for when `video_root` is not given."""

    @abstractmethod
    def load_records(self, collector: RecordCollector) -> list[VideoRecord]:
        """Every record of the annotation, bad ones handled by `collector`."""

    def setup(self, stage: str | None = None) -> None:
        collector = RecordCollector(self.on_bad_record)
        records = self.load_records(collector)
        if self.holdout_val:
            records = self._hold_out(records)
        records = self._with_min_events(records, collector)
        collector.report(self.source)
        self.dropped_records = collector.dropped
        video_root = self.video_root or self.default_video_root()
        self._check_split_overlap(records, video_root)
        cache = None
        if self.frame_cache:
            spec = SamplingSpec(self.num_frames, self.image_size, sampling=self.sampling, decoder=self.decoder)
            cache = FrameCache(self.frame_cache, MultiEventDataset.cache_params(spec, self.trim_to_annotation))
        if self.shots is not None and self._world_size() > 1:
            configured = set(self.splits.values())
            self._refuse_uncached_shots([r for r in records if r.split in configured], video_root)
        for role, split in self.splits.items():
            if split is None:
                continue
            chosen = [r for r in records if r.split == split]
            if not chosen and role != "val":
                found = sorted({r.split for r in records})
                raise AnnotationError(self.source, "-", f"no videos in split {split!r} (splits present: {found})")
            shots = None
            if self.shots is not None:
                chosen, shots = self._with_shots(chosen, video_root)
            self.datasets[role] = MultiEventDataset(
                chosen,
                video_root,
                self.num_frames,
                self.image_size,
                self.on_bad_video,
                self.normalize,
                self.seek_threshold,
                shots,
                self.trim_to_annotation,
                self.sampling,
                cache,
                self.normalize_on_device,
                self.decoder,
            )

    def _check_split_overlap(self, records: list[VideoRecord], video_root: Path) -> None:
        """Refuse (or, with `allow_split_overlap`, log) video files in both the training split and
        an evaluation split (an evaluation split named as the training split is a deliberate choice).
        Files are compared by `media.identity.file_path`, so no spelling of a path hides a file."""
        identity = {path: file_path(video_root / path) for path in {r.path for r in records}}
        train = {identity[r.path] for r in records if r.split == self.splits["train"]}
        for role in ("val", "test"):
            if self.splits[role] in (None, self.splits["train"]):
                continue
            shared = sorted({r.path for r in records if r.split == self.splits[role] and identity[r.path] in train})
            if not shared:
                continue
            what = (
                f"{len(shared)} video(s) of split {self.splits[role]!r} are also in the training split "
                f"{self.splits['train']!r}"
            )
            if not self.allow_split_overlap:
                first = self.overlap_record(shared[0], self.splits[role])
                raise AnnotationError(
                    self.source, first, f"{what} (first: {shared[0]}); set data.allow_split_overlap to accept"
                )
            log.warning("%s: %s (allowed by allow_split_overlap)", self.source, what)

    def overlap_record(self, path: str, split: str) -> str:
        """The record named when the video file `path` of evaluation split `split` is also a training
        video: the path (a format with row numbers names the row)."""
        return path

    def _with_min_events(self, records: list[VideoRecord], collector: RecordCollector) -> list[VideoRecord]:
        """`records` less those with under `min_events` events (in the training split only unless
        `min_events_scope: all`), each rejected through `collector`."""
        scoped = {self.splits["train"]} if self.min_events_scope == "train" else {r.split for r in records}
        kept = []
        for record in records:
            if len(record.events) < self.min_events and record.split in scoped:
                reason = (
                    f"{len(record.events)} events; at least {self.min_events} needed in split {record.split!r} "
                    "(data.min_events)"
                )
                collector.reject(AnnotationError(self.source, record.video_id, reason))
            else:
                kept.append(record)
        return kept

    def _hold_out(self, records: list[VideoRecord]) -> list[VideoRecord]:
        """Relabel a seeded `holdout_val` share of the training videos as the val split."""
        train = self.splits["train"]
        videos = sorted({r.path for r in records if r.split == train})
        order = np.random.default_rng(self.shuffle_seed).permutation(len(videos))
        chosen = {videos[i] for i in order[: round(self.holdout_val * len(videos))]}
        return [replace(r, split=self.splits["val"]) if r.split == train and r.path in chosen else r for r in records]

    def _with_shots(self, records: list[VideoRecord], video_root: Path) -> tuple[list[VideoRecord], list[Shots]]:
        """The records whose shots are known (detected now or cached) and their shot lists."""
        assert self.shots is not None
        paths = [str(video_root / r.path) for r in records]
        found = detect_many(
            paths,
            self.shots.detector,
            self.shots.cache_dir,
            self.shots.workers,
            on_error=self.on_bad_video,
            progress=self.shots.progress,
        )
        kept = [(r, found.shots[p]) for r, p in zip(records, paths) if p in found.shots]
        if len(kept) < len(records):
            log.warning(
                "dropped %d video(s) whose shot detection failed (on_bad_video: skip)", len(records) - len(kept)
            )
        return [r for r, _ in kept], [s for _, s in kept]

    def prepare_data(self) -> None:
        """Detect and cache the shots of every configured split, so that `setup` only reads the
        cache. In one process only: under several ranks the others would wait at Lightning's
        barrier, whose timeout (30 min under NCCL) a large corpus outlasts; `setup` then refuses
        videos the cache lacks (`_refuse_uncached_shots`)."""
        if self.shots is not None and self._world_size() == 1:
            self.setup()
            self.datasets.clear()

    def _world_size(self) -> int:
        return self.trainer.world_size if self.trainer is not None else 1

    def _refuse_uncached_shots(self, records: list[VideoRecord], video_root: Path) -> None:
        """Under several ranks, a run whose videos' shots are not all cached ends on every rank (each
        reads the same cache) in one line naming the `lit-retrieval shots` commands that detect them,
        one process or a Slurm array; the missing videos are listed in the cache folder for `--list`."""
        assert self.shots is not None
        paths = [str(video_root / r.path) for r in records]
        missing = uncached(paths, self.shots.detector, self.shots.cache_dir)
        if not missing:
            return
        listing = Path(self.shots.cache_dir) / "uncached_videos.txt"
        if self.trainer is None or self.trainer.global_rank == 0:
            listing.parent.mkdir(parents=True, exist_ok=True)
            partial = listing.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text("".join(f"{path}\n" for path in missing))
            os.replace(partial, listing)
        command = f"shots --config FIT.yaml --list {listing}"
        raise ConfigError(
            f"data.shots: {len(missing)} of {len(dict.fromkeys(paths))} video(s) have no shots in "
            f"{self.shots.cache_dir} (first: {missing[0]}) and {self._world_size()} ranks do not detect them "
            f"(the others would wait at a barrier that times out): detect them first with "
            f"`lit-retrieval {command} --workers N`, or as a Slurm array with "
            f'`lit-retrieval slurm array.sbatch --set COMMAND="{command}" SHARDS=16 ...`, then start again'
        )

    def _loader(self, role: str, train: bool) -> DataLoader:
        if role not in self.datasets:
            raise ConfigError(f"no {role} split configured (set data.{role}_split)")
        dataset = self.datasets[role]
        sampler = None
        if train:
            trainer = self.trainer
            rank, world = (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)
            sampler = EpochShuffle(len(dataset), self.shuffle_seed, rank, world)
            self._check_full_batch(len(dataset), len(sampler), world)
            self.place_training(trainer, len(sampler) // self.batch_size, partial(sampler.place, self.batch_size))
        return DataLoader(
            dataset,
            batch_size=self.batch_size if train else self.eval_batch_size,
            sampler=sampler,
            drop_last=train,
            num_workers=self.num_workers,
            collate_fn=collate_items,
            pin_memory=pins_memory(self.trainer),
            persistent_workers=self.num_workers > 0,
            generator=torch.Generator().manual_seed(self.shuffle_seed),  # worker seeds never touch the global RNG
            worker_init_fn=worker_init_fn(),  # workers leave SIGTERM/SIGINT/SIGUSR1 to the main process
        )

    def _check_full_batch(self, records: int, per_process: int, world: int) -> None:
        """Refuse a training split with no full batch (training drops the last, incomplete batch, so
        Lightning would run no step, save nothing and exit 0), naming the records and the batch size."""
        if per_process >= self.batch_size:
            return
        share = f" ({per_process} on each of {world} processes)" if world > 1 else ""
        reason = (
            f"the training split {self.splits['train']!r} has {records} records{share}, fewer than one batch of "
            f"data.batch_size {self.batch_size} (the last, incomplete batch is dropped): lower data.batch_size "
            "or add records"
        )
        raise AnnotationError(self.source, "-", reason)

    def cache_plan(self, splits: list[str]) -> Plan:
        """The frame-cache plan of these splits' records (`lit-retrieval cache-frames`), sampled as
        `MultiEventDataset` samples them; set up without reading the cache it writes."""
        out = self.frame_cache
        self.frame_cache = None  # the records alone: the cache it names is the one being written
        self.prepare_data()
        self.setup()
        jobs = []
        for role in splits:
            dataset = self.datasets.get(role)
            if dataset is None:
                continue
            for record in dataset.records:
                start, end = dataset.window(record)
                jobs.append(CacheJob(file_path(dataset.video_root / record.path), start, end, record.duration))
        spec = SamplingSpec(self.num_frames, self.image_size, sampling=self.sampling, decoder=self.decoder)
        params = MultiEventDataset.cache_params(spec, self.trim_to_annotation)
        return Plan(
            params,
            WindowSampler(spec, self.seek_threshold),
            sorted_unique(jobs),
            self.on_bad_video,
            out,
        )

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """With `normalize_on_device`, the batch's uint8 frames become normalised floats where they are."""
        frames = batch.get("frames") if isinstance(batch, dict) else None
        if self.normalize_on_device and frames is not None and frames.dtype == torch.uint8:
            batch["frames"] = self.normalize.tensor(frames)
        return batch

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", train=False) if "val" in self.datasets else []

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", train=False)


class SplitParser(Protocol):
    """What `SplitFilesDataModule` needs of a dataset's parser: the records of one split's file."""

    def load(self, path: Path, split: str, collector: RecordCollector) -> list[VideoRecord]: ...


class SplitFilesDataModule(VideoTextDataModule, ABC):
    """A dataset released as one annotation file per split in one folder."""

    def __init__(self, annotation_dir: str, split_files: dict[str, str], **kwargs) -> None:
        super().__init__(**kwargs)
        self.annotation_dir = Path(annotation_dir)
        self.split_files = split_files

    @property
    def source(self) -> str:
        return str(self.annotation_dir)

    def default_video_root(self) -> Path:
        return self.annotation_dir

    @abstractmethod
    def parser(self) -> SplitParser:
        """The parser of this dataset's files."""

    def load_records(self, collector: RecordCollector) -> list[VideoRecord]:
        parser = self.parser()
        return [
            r
            for split, name in self.split_files.items()
            for r in parser.load(self.annotation_dir / name, split, collector)
        ]
