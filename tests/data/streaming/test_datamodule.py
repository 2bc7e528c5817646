"""`ShardedDataModule` (lit_retrieval/data/streaming/datamodule.py): the streamed items are the source data
module's, evaluation batches are the source's batches, every training epoch takes each item at most once in
a seeded order, and a run stopped mid-epoch and resumed through the Trainer trains on the batches the
uninterrupted run trained on next (also with the checkpoint read after the loader was built, as DeepSpeed
does, and with loader workers); bad shard folders are one line, exit 2."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from helpers.resume_probes import AfterSetup, SaveAndStopAt, recorded_fit
from helpers.shard_runs import assert_same_item, shard
from lit_retrieval.data import MultiEventDataModule, ShardedDataModule
from lit_retrieval.data.streaming.manifest import ShardError

TRAIN = 17  # the corpus's training videos: divides by no batch size, worker or rank count used here


@pytest.fixture(scope="module")
def shards(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("shards") / "shards"
    assert shard(corpus, out, "--part-size", "4", "--chunk-bytes", "8KB") == 0  # several chunks (1 item ~6 KB)
    return out


@pytest.fixture(scope="module")
def source(corpus):
    module = MultiEventDataModule(str(corpus / "annotations.json"), num_frames=2, image_size=32, batch_size=3)
    module.setup()
    return module


def test_test_batches_equal_the_source_modules(shards, source):
    data = ShardedDataModule(str(shards), batch_size=3, num_frames=2, image_size=32)
    data.setup("test")
    got, want = list(data.test_dataloader()), list(source.test_dataloader())
    assert len(got) == len(want) == 3
    for a, b in zip(got, want):
        assert a.keys() == b.keys()
        for key in a:  # metadata stays out of tensors (lists, float64 arrays: precision plugins cast tensors)
            if isinstance(a[key], np.ndarray):
                np.testing.assert_array_equal(a[key], b[key], err_msg=key)
            else:
                assert a[key] == b[key] if isinstance(a[key], list) else torch.equal(a[key], b[key]), key


@pytest.mark.parametrize("workers", [0, 2])
def test_a_training_epoch_streams_source_items_each_at_most_once_in_a_seeded_order(shards, source, workers):
    def epoch(seed: int, epoch: int = 0) -> list[dict]:
        data = ShardedDataModule(str(shards), batch_size=3, num_workers=workers, shuffle_seed=seed)
        data.setup("fit")
        loader = data.train_dataloader()
        loader.epoch = lambda: epoch
        return list(loader)

    batches = epoch(0)
    order = [i for b in batches for i in b["index"].tolist()]
    assert len(order) == len(set(order)) and TRAIN - len(order) < 3 * max(workers, 1)  # drop_last's tail only
    assert sorted(order) != order  # shuffled
    for batch in batches[:2]:
        for j, index in enumerate(batch["index"].tolist()):
            item = {k: batch[k][j] for k in ("index", "video_id", "events", "frames", "frame_mask", "frame_times")}
            want = source.datasets["train"][index]
            assert_same_item({**item, "index": index, "duration": float(batch["duration"][j])}, want)
    again = [i for b in epoch(0) for i in b["index"].tolist()]
    assert again == order
    assert [i for b in epoch(1) for i in b["index"].tolist()] != order
    assert [i for b in epoch(0, epoch=1) for i in b["index"].tolist()] != order


def test_the_order_does_not_follow_the_file_system(shards, monkeypatch):
    """litdata picks its WindowShuffle on NFS/Lustre mounts (LITDATA_POSIX_FAST=1 forces that choice here)."""

    def order() -> list[int]:
        data = ShardedDataModule(str(shards), batch_size=3)
        data.setup("fit")
        return [i for b in data.train_dataloader() for i in b["index"].tolist()]

    local = order()
    monkeypatch.setenv("LITDATA_POSIX_FAST", "1")
    monkeypatch.setenv("LITDATA_ITEM_SHUFFLE_WINDOW", "2")
    assert order() == local


def fit(shards, root, strategy, workers, callbacks=(), ckpt_path=None) -> list[list[int]]:
    data = ShardedDataModule(str(shards), batch_size=3, num_workers=workers, shuffle_seed=5)
    return recorded_fit(data, root, strategy, callbacks, ckpt_path)


@pytest.mark.parametrize(("restore", "workers"), [("before_setup", 0), ("after_setup", 2)])
def test_a_run_resumed_mid_epoch_through_the_trainer_trains_on_the_uninterrupted_runs_next_batches(
    shards, tmp_path, restore, workers
):
    def strategy():
        return AfterSetup(torch.device("cpu")) if restore == "after_setup" else "auto"

    whole = fit(shards, tmp_path / "whole", strategy(), workers)
    per_epoch = len(whole) // 2
    assert per_epoch >= 4 and whole[:per_epoch] != whole[per_epoch:]
    flat = [i for b in whole[:per_epoch] for i in b]
    assert len(flat) == len(set(flat))
    for stop in (2, per_epoch + 2):  # inside the first epoch, and inside the second
        checkpoint = tmp_path / f"mid{stop}.ckpt"
        first = fit(shards, tmp_path / f"first{stop}", strategy(), workers, [SaveAndStopAt(stop, str(checkpoint))])
        assert first == whole[:stop]
        resumed = fit(shards, tmp_path / f"resumed{stop}", strategy(), workers, ckpt_path=str(checkpoint))
        assert resumed == whole[stop:]


def test_a_resume_with_other_workers_is_refused_with_the_reason(shards, tmp_path):
    checkpoint = tmp_path / "mid.ckpt"
    fit(shards, tmp_path / "first", "auto", 2, [SaveAndStopAt(2, str(checkpoint))])
    with pytest.raises(Exception, match=r"another topology \(num_workers 2 -> 1\)"):
        fit(shards, tmp_path / "resumed", "auto", 1, ckpt_path=str(checkpoint))


def test_a_truncated_chunk_is_named(shards, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(shards, copy)
    chunk = sorted((copy / "train").glob("chunk-*.bin"))[1]
    chunk.write_bytes(chunk.read_bytes()[:-10])
    with pytest.raises(ShardError, match=f"^{chunk}: [0-9]+ bytes, [0-9]+ written"):
        ShardedDataModule(str(copy)).setup("fit")


def test_a_foreign_folder_and_other_sampling_settings_are_refused(shards, tmp_path):
    (tmp_path / "index.json").write_text(json.dumps({"chunks": [], "config": {}}))
    with pytest.raises(ShardError, match="not a shard folder of lit-retrieval shard"):
        ShardedDataModule(str(tmp_path)).setup("fit")
    with pytest.raises(ShardError, match=r"other sampling settings \(num_frames: 2 in the shards, 8 asked\)"):
        ShardedDataModule(str(shards), num_frames=8).setup("fit")
