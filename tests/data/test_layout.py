"""What users and checkpoints named before the data layer had rooms still resolves."""

from __future__ import annotations

import io
from pathlib import Path

import torch

import lit_retrieval.data as data
from lit_retrieval.checkpoint_io import read_checkpoint
from lit_retrieval.data.text.spans import SpanSplitter


def pre_move_checkpoint(path: Path, spans: SpanSplitter) -> Path:
    """A checkpoint whose pickle names `lit_retrieval.data.spans.SpanSplitter`, the class's module
    before the move (protocol 0 writes a class as `c<module>\\n<name>\\n`, so the path is plain text)."""
    buffer = io.BytesIO()
    checkpoint = {"epoch": 3, "global_step": 12, "state_dict": {}, "hyper_parameters": {"spans": spans}}
    torch.save(checkpoint, buffer, _use_new_zipfile_serialization=False, pickle_protocol=0)
    new, old = b"clit_retrieval.data.text.spans\nSpanSplitter\n", b"clit_retrieval.data.spans\nSpanSplitter\n"
    assert buffer.getvalue().count(new) == 1
    path.write_bytes(buffer.getvalue().replace(new, old))
    return path


def test_a_checkpoint_pickled_before_the_move_loads(tmp_path):
    spans = SpanSplitter(extra_person_words=["circle", "square"], initial_names=False)
    path = pre_move_checkpoint(tmp_path / "old.ckpt", spans)
    assert b"lit_retrieval.data.spans\nSpanSplitter" in path.read_bytes()
    loaded = read_checkpoint(path)["hyper_parameters"]["spans"]
    assert type(loaded) is SpanSplitter and loaded == spans
    assert loaded.split("The circle confronts the square.").relational


def test_the_config_class_paths_of_before_the_move_resolve():
    """YAML and saved config.yaml files name `lit_retrieval.data.<X>DataModule`."""
    for name in (
        "MultiEventDataModule",
        "MELONDataModule",
        "ActivityNetDataModule",
        "DiDeMoDataModule",
        "CondensedMoviesDataModule",
        "MSRVTTDataModule",
        "MultiTaskDataModule",
    ):
        assert getattr(data, name).__name__ == name
