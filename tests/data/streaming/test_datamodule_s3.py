"""`ShardedDataModule` on an object store: a shard folder `lit-retrieval shard` wrote, uploaded with boto3 to a
bucket of moto's S3 server on 127.0.0.1 (loopback only), read through `s3://bucket/prefix` with the endpoint and
credentials in `storage_options` (litdata passes them to its boto3 client), gives the batches the local folder
gives for the same seed: training (shuffled, 2 loader workers) and test (index order). The server speaks plain
http, which litdata 0.2.76's own chunk fetch refused (`data/streaming/object_store.py`; docs/datasets.md)."""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers.shard_runs import shard
from lit_retrieval.data import ShardedDataModule
from lit_retrieval.data.streaming.manifest import ShardError

moto_server = pytest.importorskip("moto.server")
boto3 = pytest.importorskip("boto3")

BUCKET, PREFIX = "corpus", "runs/shards"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def s3(monkeypatch):
    """moto's S3 on a free loopback port, stopped at the end; the options a user gives for their own store."""
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    try:
        yield {
            "endpoint_url": f"http://127.0.0.1:{port}",
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
            "region_name": "us-east-1",
        }
    finally:
        server.stop()


def upload(folder: Path, options: dict) -> str:
    client = boto3.client("s3", **options)
    client.create_bucket(Bucket=BUCKET)
    files = [p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")]
    for path in files:
        client.upload_file(str(path), BUCKET, f"{PREFIX}/{path.relative_to(folder).as_posix()}")
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=PREFIX)["Contents"]
    assert len(listed) == len(files) > 3  # the manifest, each split's index and chunks
    return f"s3://{BUCKET}/{PREFIX}"


def batches(shards: str, cache: Path | None, storage_options: dict | None) -> tuple[list[dict], list[dict]]:
    data = ShardedDataModule(
        shards,
        batch_size=3,
        num_workers=2,
        shuffle_seed=7,
        cache_dir=cache and str(cache),
        storage_options=storage_options,
    )
    data.setup("fit")
    train = list(data.train_dataloader())
    data.setup("test")
    return train, list(data.test_dataloader())


def assert_same_batches(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want) >= 3
    for a, b in zip(got, want):
        assert a.keys() == b.keys()
        for key in a:
            if isinstance(a[key], torch.Tensor):
                assert torch.equal(a[key], b[key]), key
            else:  # lists, and frame_times as a float64 array
                assert np.array_equal(a[key], b[key]) if isinstance(a[key], np.ndarray) else a[key] == b[key], key


def test_shards_on_a_loopback_s3_server_stream_the_local_folders_batches(corpus, tmp_path, s3):
    local = tmp_path / "shards"
    assert shard(corpus, local, "--part-size", "4", "--chunk-bytes", "8KB") == 0
    url = upload(local, s3)
    want_train, want_test = batches(str(local), None, None)
    got_train, got_test = batches(url, tmp_path / "cache", s3)
    assert_same_batches(got_train, want_train)
    assert_same_batches(got_test, want_test)
    assert any((tmp_path / "cache").rglob("chunk-*.bin"))  # the chunks came down through the client


def test_a_missing_prefix_on_the_store_is_named(tmp_path, s3):
    boto3.client("s3", **s3).create_bucket(Bucket=BUCKET)
    with pytest.raises(ShardError, match=f"^s3://{BUCKET}/nowhere: no readable shards.json"):
        ShardedDataModule(f"s3://{BUCKET}/nowhere", cache_dir=str(tmp_path), storage_options=s3).setup("fit")
