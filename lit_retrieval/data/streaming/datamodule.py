"""`ShardedDataModule`: the video-text splits of a shard folder (`lit-retrieval shard`) streamed with litdata.

Training streams the split with litdata's `StreamingDataset` and `StreamingDataLoader`: items are divided
among ranks and workers with no item twice in an epoch (litdata's `drop_last` under DDP: each worker gets
the same count, the few items past the last whole share are left out of that epoch, a different few each
epoch), in a seeded order that is a function of (`shuffle_seed`, epoch) only: `PinnedShuffle` always uses
litdata's `FullShuffle` (chunks permuted, then items within a window of chunks) with a fixed in-chunk
window, where litdata would pick its `WindowShuffle` on NFS, Lustre, GPFS or BeeGFS mounts and read the
window from `LITDATA_ITEM_SHUFFLE_WINDOW`, so moving the shards from a parallel file system to a local disk
or an object store would change the order.

Mid-epoch resume is kept in this module's own state (`state_dict`): the litdata loader's state as it was
after the last batch trained, since Lightning builds the training loader before it restores a checkpoint
whenever `configure_optimizers` reads `trainer.estimated_stepping_batches` (as every module of the project
does) and then never gives the loader its saved state (Lightning #20550, litData #775); and since Lightning
fetches one batch ahead, the loader's own `state_dict()` at save time counts a batch not trained yet. The
state is applied when the loader is built, or to the built loader when it arrives later (DeepSpeed restores
after its setup); the loader starts its workers at the first batch. The loader is not a `DataLoader` with
`state_dict`, so Lightning neither saves nor restores it itself. A resume on another number of ranks,
workers or another batch size is refused with the reason (litdata's elastic restripe lost the last global
batch under `drop_last`, docs/datasets.md).

Evaluation splits are read as map-style datasets (litdata's random access into the chunks) in index order,
so Lightning's distributed sampler and the evaluation code see them as they see `MultiEventDataModule`'s.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from lit_retrieval.data.batching.dataset import collate_items
from lit_retrieval.data.batching.workers import worker_init_fn
from lit_retrieval.data.media.normalize import CLIP_MEAN, CLIP_STD, NormalizeFrames
from lit_retrieval.data.streaming.manifest import ShardError, check_settings, is_url, read_manifest
from lit_retrieval.data.streaming.samples import ToItem
from lit_retrieval.errors import ConfigError, check_at_least

KEPT_STATES = 4  # loader states kept, one per batch yielded: Lightning fetches one batch ahead


def streaming_dataset(location: str, shuffle: bool, seed: int, window: int, **options: Any):
    """litdata's `StreamingDataset` over `location` with the shuffle pinned (`PinnedShuffle`)."""
    from litdata import StreamingDataset
    from litdata.streaming.shuffle import FullShuffle, NoShuffle

    class PinnedShuffle(StreamingDataset):
        def _create_shuffler(self, cache):  # litdata 0.2.76's hook; FullShuffle whatever the file system
            state = self._state_dict or {}
            seed, drop_last = state.get("seed", self.seed), state.get("drop_last", self.drop_last)
            if not self.shuffle:
                return NoShuffle(cache, seed, drop_last)
            return FullShuffle(cache, seed, drop_last, item_window=self._item_shuffle_window)

    return PinnedShuffle(location, shuffle=shuffle, seed=seed, item_shuffle_window=window, **options)


class ResumableLoader:
    """The training loader: a litdata `StreamingDataLoader` whose epoch is Lightning's, started at the first
    batch, keeping its state after each of the last `KEPT_STATES` batches (`state_at`)."""

    def __init__(self, loader: Any, epoch: Callable[[], int]) -> None:
        self.loader = loader
        self.epoch = epoch
        self.states: OrderedDict[int, dict[str, Any]] = OrderedDict()
        self.restored_epoch_started = False

    def __len__(self) -> int:
        return len(self.loader)

    def restore(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state)
        self.restored_epoch_started = False

    def state_at(self, batches: int) -> dict[str, Any] | None:
        """The state after `batches` batches of the current epoch, or None (at its start or end)."""
        return self.states.get(batches)

    def __iter__(self) -> Iterator[Any]:
        return self._batches()

    def _batches(self) -> Iterator[Any]:
        if self.restored_epoch_started:
            # litdata 0.2.76 clears `restore` only when an epoch is read to its end; Lightning stops at the
            # loader's length, so the next epoch would replay the restored one
            self.loader.restore = False
            self.restored_epoch_started = False
        if not self.loader.restore:
            self.loader.current_epoch = self.epoch()  # litdata counts from 1: Lightning's epoch + 1 next
        self.states.clear()
        done = 0
        for batch in self.loader:
            done += 1
            self.restored_epoch_started = self.loader.restore
            self.states[done] = self.loader.state_dict()
            while len(self.states) > KEPT_STATES:
                self.states.popitem(last=False)
            yield batch
        self.states.pop(done, None)  # an epoch's end is no place to resume in


class ShardItems(Dataset):
    """A split of the shards as a map-style dataset (evaluation): item i is the split's item i."""

    def __init__(self, location: str, to_item: ToItem, **options: Any) -> None:
        self.shards = streaming_dataset(location, shuffle=False, seed=0, window=0, **options)
        self.to_item = to_item

    def __len__(self) -> int:
        return len(self.shards)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.to_item(self.shards[index])


class ShardedDataModule(L.LightningDataModule):
    """Train/val/test splits streamed from the shard folder `shards` (a folder or an object store URL
    litdata reads: `s3://`, `gs://`, ...; `storage_options` go to its client, `cache_dir` holds downloaded
    chunks). Items are `MultiEventDataset`'s, so any video-text module trains on it unchanged.

    Args:
        shards: the folder `lit-retrieval shard --out` wrote.
        num_frames, image_size, sampling, trim_to_annotation: when given, the shards must have been written
            with these (the model's settings); a folder of other settings is refused.
        shuffle_seed: seed of the training order (with the epoch).
        item_shuffle_window: litdata's in-chunk shuffle block (items); fixed here so that no environment
            variable changes the order.
        normalize_on_device: items carry uint8 frames, normalised once on the device (as
            `VideoTextDataModule`'s option).
    """

    def __init__(
        self,
        shards: str,
        batch_size: int = 16,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        train_split: str = "train",
        val_split: str | None = None,
        test_split: str = "test",
        shuffle_seed: int = 0,
        item_shuffle_window: int = 256,
        num_frames: int | None = None,
        image_size: int | None = None,
        sampling: Literal["exact", "keyframe"] | None = None,
        trim_to_annotation: bool | None = None,
        mean: tuple[float, float, float] = CLIP_MEAN,
        std: tuple[float, float, float] = CLIP_STD,
        normalize_on_device: bool = False,
        cache_dir: str | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        check_at_least("data", 1, batch_size=batch_size)
        check_at_least("data", 0, num_workers=num_workers, item_shuffle_window=item_shuffle_window)
        self.shards = shards.rstrip("/")
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.num_workers = num_workers
        self.splits = {"train": train_split, "val": val_split, "test": test_split}
        self.shuffle_seed = shuffle_seed
        self.item_shuffle_window = item_shuffle_window
        wanted = {"num_frames": num_frames, "size": image_size, "sampling": sampling}  # the cache's key names
        wanted["trim_to_annotation"] = trim_to_annotation
        self.wanted = {k: v for k, v in wanted.items() if v is not None}
        self.normalize = NormalizeFrames(mean, std)
        self.normalize_on_device = normalize_on_device
        self.options = {"cache_dir": cache_dir, "storage_options": storage_options}
        self.manifest: dict[str, Any] | None = None
        self.train_loader: ResumableLoader | None = None
        self.resume: dict[str, Any] | None = None

    def location(self, split: str) -> str:
        return f"{self.shards}/{split}"

    def setup(self, stage: str | None = None) -> None:
        """Read and check the manifest and every configured split's index (a missing, foreign, truncated
        or differently sampled shard is refused here, in one line); the stage's own split must be there."""
        self.manifest = read_manifest(self.shards, self.options["storage_options"])
        check_settings(self.shards, self.manifest, self.wanted)
        needed = {"fit": "train", "validate": "val", "test": "test"}.get(stage or "", "")
        for role, split in self.splits.items():
            if split is not None:
                self._check_split(split, required=role == needed)

    def _check_split(self, split: str, required: bool) -> None:
        assert self.manifest is not None
        if split not in self.manifest["splits"]:
            if required:
                raise ShardError(f"{self.shards}: no split {split!r} (written: {sorted(self.manifest['splits'])})")
            return
        if is_url(self.shards):
            return  # litdata's client reads (and checks) the chunks it downloads
        folder = Path(self.location(split))
        from lit_retrieval.data.streaming.chunks import check_chunks

        check_chunks(folder)

    def _to_item(self) -> ToItem:
        return ToItem(self.normalize, uint8_frames=self.normalize_on_device)

    def train_dataloader(self) -> ResumableLoader:
        from litdata import StreamingDataLoader

        split = self.splits["train"]
        options = {k: v for k, v in self.options.items() if v is not None}
        dataset = streaming_dataset(
            self.location(split),
            True,
            self.shuffle_seed,
            self.item_shuffle_window,
            transform=self._to_item(),
            **options,
        )
        loader = StreamingDataLoader(
            dataset,
            batch_size=self.batch_size,
            num_workers=self.num_workers,
            collate_fn=collate_items,
            drop_last=True,
            persistent_workers=False,
            worker_init_fn=worker_init_fn(),
        )
        trainer = self.trainer
        self.train_loader = ResumableLoader(loader, lambda: trainer.current_epoch if trainer is not None else 0)
        if self.resume is not None:
            self._apply_resume()
        return self.train_loader

    def _eval_loader(self, role: str) -> DataLoader | list:
        split = self.splits[role]
        if split is None or self.manifest is None or split not in self.manifest["splits"]:
            if role == "val":
                return []
            raise ConfigError(f"no {role} split configured (set data.{role}_split)")
        options = {k: v for k, v in self.options.items() if v is not None}
        return DataLoader(
            ShardItems(self.location(split), self._to_item(), **options),
            batch_size=self.eval_batch_size,
            num_workers=self.num_workers,
            collate_fn=collate_items,
            worker_init_fn=worker_init_fn(),
        )

    def val_dataloader(self) -> DataLoader | list:
        return self._eval_loader("val")

    def test_dataloader(self) -> DataLoader | list:
        return self._eval_loader("test")

    def state_dict(self) -> dict[str, Any]:
        """The training loader's state after the batches trained so far in this epoch (none at an epoch's
        start or end) and the topology it belongs to."""
        trainer = self.trainer
        if trainer is None or self.train_loader is None:
            return {}
        batches = trainer.fit_loop.epoch_loop.batch_progress.current.ready
        state = self.train_loader.state_at(batches)
        if state is None:
            return {}
        topology = {"world_size": trainer.world_size, "num_workers": self.num_workers, "batch_size": self.batch_size}
        return {"batches": batches, "loader": state, "topology": topology}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not state_dict:
            return
        self.resume = state_dict
        if self.train_loader is not None:  # built before the checkpoint was read (P1, DeepSpeed)
            self._apply_resume()

    def _apply_resume(self) -> None:
        assert self.resume is not None and self.train_loader is not None
        saved = self.resume["topology"]
        trainer = self.trainer
        now = {
            "world_size": trainer.world_size if trainer is not None else 1,
            "num_workers": self.num_workers,
            "batch_size": self.batch_size,
        }
        changed = [f"{k} {saved[k]} -> {now[k]}" for k in now if saved.get(k) != now[k]]
        if changed:
            raise ConfigError(
                f"{self.shards}: the checkpoint stopped mid-epoch with another topology ({', '.join(changed)}); "
                "litdata's elastic resume can drop or repeat the samples of the last global batch, so it is "
                "refused: resume with the saved topology, or from a checkpoint written at an epoch's end"
            )
        self.train_loader.restore(self.resume["loader"])
        self.resume = None

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """With `normalize_on_device`, the batch's uint8 frames become normalised floats where they are."""
        frames = batch.get("frames") if isinstance(batch, dict) else None
        if self.normalize_on_device and frames is not None and frames.dtype == torch.uint8:
            batch["frames"] = self.normalize.tensor(frames)
        return batch
