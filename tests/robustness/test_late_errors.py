"""Bad input found only once work has begun, outside cases.py's table: a full disk while `fit` writes
a checkpoint (one line, exit status 2, the previous checkpoint intact), an IVF index of more lists
than the vectors actually embedded (videos that failed to decode leave fewer), and Lightning's
`MisconfigurationException` raised by a module's own code, which is a bug and keeps its traceback."""

from __future__ import annotations

import errno
import os
import subprocess

import lightning as L
import numpy as np
import pytest
from lightning.pytorch.demos.boring_classes import BoringModel

from lit_retrieval.checkpoint_io import read_checkpoint
from lit_retrieval.cli import main
from lit_retrieval.errors import UsageError, input_error_line
from lit_retrieval.search.index import IndexConfig, make_index

from .cases import check, error_line, shared_clip, video_corpus
from .files import dual_encoder, fit_config

pytestmark = pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")


@pytest.fixture()
def small_disk(tmp_path, monkeypatch):
    """A folder on a 4 MiB tmpfs (room for one tiny dual-encoder checkpoint of 2.4 MB, not for its
    replacement beside it: a real ENOSPC); where mounting is not allowed, an ordinary folder whose
    second checkpoint's fsync fails with ENOSPC."""
    folder = tmp_path / "disk"
    folder.mkdir()
    try:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)], capture_output=True)
    except OSError:  # no mount command at all
        mounted = None
    if mounted is not None and mounted.returncode == 0:
        yield folder
        subprocess.run(["umount", str(folder)], check=True)
        return
    real_fsync, calls = os.fsync, []

    def fsync(fd: int) -> None:
        calls.append(fd)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    yield folder


def test_full_disk_while_writing_a_checkpoint_is_one_line_and_keeps_the_previous(
    small_disk, tmp_path, capsys, monkeypatch
):
    monkeypatch.delenv("LIT_RETRIEVAL_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)  # the run's config.yaml goes to its folder (no logger, no default_root_dir)
    last = small_disk / "ckpt" / "last.ckpt"
    callback = {
        "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
        "init_args": {"dirpath": str(last.parent), "save_last": True, "save_top_k": 0},
    }
    config = fit_config(
        tmp_path / "fit.yaml",
        "MultiEventDataModule",
        video_corpus(tmp_path),
        dual_encoder(shared_clip()),
        enable_checkpointing=True,
        callbacks=[callback],
    )
    main(["fit", "--config", str(config)])  # one epoch, one step: last.ckpt fits on the disk
    capsys.readouterr()
    with pytest.raises(SystemExit) as finished:  # the resumed run's last.ckpt does not fit beside it
        main(["fit", "--config", str(config), "--ckpt_path", str(last), "--trainer.max_epochs", "2"])
    assert finished.value.code == 2
    check(error_line(capsys.readouterr().err, "fit"), str(last), "the disk is full; the previous last.ckpt is intact")
    assert read_checkpoint(last)["global_step"] == 1  # the first run's checkpoint, readable
    assert not last.with_name("last.ckpt.partial").exists()


def test_ivf_lists_are_checked_against_the_vectors_embedded():
    vectors = np.random.default_rng(0).standard_normal((5, 4)).astype("float32")
    with pytest.raises(UsageError, match="6 IVF lists need at least 6 vectors to train .* but there are 5"):
        make_index(vectors, IndexConfig(kind="ivf", nlist=6))
    assert make_index(vectors, IndexConfig(kind="ivf", nlist=5)).ntotal == 5  # one vector per list trains


class ReturnsText(BoringModel):
    def training_step(self, batch, batch_idx):
        return "not a loss"


def test_misconfiguration_of_a_modules_code_is_not_an_input_error(tmp_path):
    trainer = L.Trainer(
        default_root_dir=tmp_path, max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False
    )
    with pytest.raises(Exception, match="must return a Tensor, a dict, or None") as raised:
        trainer.fit(ReturnsText())
    assert type(raised.value).__name__ == "MisconfigurationException"
    assert input_error_line(raised.value) is None  # the traceback stays: a bug, not the config's
