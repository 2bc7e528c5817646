"""`lit-retrieval shard` (lit_retrieval/data/streaming/writer.py): the shards hold the source data module's
items; a writer killed mid-array and rerun, or split over tasks and workers, writes what one uninterrupted
writer writes; a folder of other settings is refused."""

from __future__ import annotations

import json
import multiprocessing

import pytest
from litdata import StreamingDataset

from helpers.shard_runs import assert_same_item, folder_bytes, shard
from lit_retrieval.cli import main
from lit_retrieval.data import MultiEventDataModule
from lit_retrieval.data.streaming.samples import ToItem
from lit_retrieval.data.media.normalize import NormalizeFrames


@pytest.fixture(scope="module")
def whole(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("shards") / "whole"
    assert shard(corpus, out, "--part-size", "5", "--chunk-bytes", "1KB") == 0
    return out


@pytest.mark.parametrize("encoding", ["frames", "mp4"])
def test_shards_hold_the_source_modules_items_in_index_order(corpus, tmp_path, encoding):
    out = tmp_path / encoding
    assert shard(corpus, out, "--encoding", encoding, "--part-size", "5") == 0
    source = MultiEventDataModule(str(corpus / "annotations.json"), num_frames=2, image_size=32)
    source.setup()
    for role in ("train", "test"):
        stored = StreamingDataset(str(out / role))  # litdata's own reader
        dataset = source.datasets[role]
        assert len(stored) == len(dataset) == {"train": 17, "test": 7}[role]
        for i in range(len(dataset)):
            assert_same_item(ToItem(NormalizeFrames())(stored[i]), dataset[i])
    assert not (out / "parts").exists()  # merged, the parts removed


def _killed_writer(corpus, out, task, tasks):
    """Array task `task` of `tasks`, killed (SIGKILL) in the middle of its second part: its temporary
    folder holds a part's first items."""
    import os
    import signal

    from lit_retrieval.data.streaming import writer

    original = writer.to_sample
    written = []

    def sample_then_die(item, encoding):
        written.append(item["index"])
        if len(written) == 8:
            os.kill(os.getpid(), signal.SIGKILL)
        return original(item, encoding)

    writer.to_sample = sample_then_die
    shard(corpus, out, "--part-size", "5", "--chunk-bytes", "1KB", "--shard", str(task), "--num-shards", str(tasks))


def test_an_array_killed_mid_task_and_rerun_writes_what_one_uninterrupted_writer_writes(corpus, whole, tmp_path):
    out = tmp_path / "array"
    killed = multiprocessing.get_context("fork").Process(target=_killed_writer, args=(corpus, out, 0, 2))
    killed.start()
    killed.join(120)
    assert killed.exitcode == -9
    assert not (out / "train" / "index.json").exists()  # nothing merged from a half-written array
    assert [p.name for p in (out / "parts" / "train").iterdir() if p.name.startswith(".000002.tmp-")]  # a half part
    assert shard(corpus, out, "--part-size", "5", "--chunk-bytes", "1KB", "--shard", "1", "--num-shards", "2") == 0
    assert shard(corpus, out, "--part-size", "5", "--chunk-bytes", "1KB", "--shard", "0", "--num-shards", "2") == 0
    assert folder_bytes(out) == folder_bytes(whole)


def test_local_workers_write_what_one_process_writes(corpus, whole, tmp_path):
    out = tmp_path / "workers"
    assert shard(corpus, out, "--part-size", "5", "--chunk-bytes", "1KB", "--workers", "2") == 0
    assert folder_bytes(out) == folder_bytes(whole)


def test_a_folder_written_with_other_sampling_settings_is_one_line_exit_2(corpus, whole, tmp_path, capsys):
    config = whole.parent / "whole.yaml"
    text = config.read_text().replace("num_frames: 2", "num_frames: 3")
    (tmp_path / "other.yaml").write_text(text)
    with pytest.raises(SystemExit) as exit_:
        main(["shard", "--config", str(tmp_path / "other.yaml"), "--out", str(whole), "--part-size", "5"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"lit-retrieval shard: {whole}: written with other settings")
    assert "params.num_frames: 2 -> 3" in err
    assert json.loads((whole / "shards.json").read_text())["params"]["num_frames"] == 2  # nothing lost
