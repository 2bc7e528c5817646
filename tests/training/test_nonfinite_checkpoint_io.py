"""Fault handling: non-finite losses skipped (or stopping the run) with the samples named,
corrupt or partial checkpoints refused clearly, a full disk never spoiling the previous
checkpoint, and metrics synchronised over 2 gloo processes."""

from __future__ import annotations

import errno
import logging
import os

import lightning as L
import pytest
import torch
import torch.distributed as dist
import yaml

from lit_retrieval.checkpoint_io import CorruptCheckpointError, SafeCheckpointIO, read_checkpoint
from lit_retrieval.cli import main
from lit_retrieval.data import MultiEventDataModule
from lit_retrieval.metrics.retrieval import RetrievalMetrics
from lit_retrieval.models.encoders import CLIPEncoder
from lit_retrieval.models.heads import MeanPHead
from lit_retrieval.modules import DualEncoderRetrieval
from lit_retrieval.modules.nonfinite import NonFinitePolicy
from helpers.fit_configs import clip_fit_config
from helpers.forked_ranks import run_ranks


class NaNOnCall(torch.nn.Module):
    """Wraps a loss and returns NaN on its `call`-th use."""

    def __init__(self, loss: torch.nn.Module, call: int) -> None:
        super().__init__()
        self.loss, self.call, self.calls = loss, call, 0

    def forward(self, logits):
        self.calls += 1
        value = self.loss(logits)
        return value * float("nan") if self.calls == self.call else value


def small_fit(tiny_clip, corpus, tmp_path, policy):
    module = DualEncoderRetrieval(CLIPEncoder(pretrained=str(tiny_clip)), MeanPHead(), nonfinite=policy)
    data = MultiEventDataModule(
        annotation=str(corpus / "annotations.json"), num_frames=2, image_size=32, batch_size=4, num_workers=0
    )
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        limit_train_batches=4,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        default_root_dir=str(tmp_path),
    )
    module.objectives.infonce.loss = NaNOnCall(module.objectives.infonce.loss, 2)
    return module, data, trainer


class WatchWeights(L.Callback):
    """Records whether each batch changed the trainable weights."""

    def __init__(self) -> None:
        self.changed: list[bool] = []

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.before = [p.detach().clone() for p in module.parameters() if p.requires_grad]

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        after = [p.detach() for p in module.parameters() if p.requires_grad]
        self.changed.append(any(not torch.equal(a, b) for a, b in zip(self.before, after)))


def test_nonfinite_loss_skips_the_step_and_names_the_videos(tmp_path, tiny_clip, corpus, caplog):
    module, data, trainer = small_fit(tiny_clip, corpus, tmp_path, NonFinitePolicy("skip"))
    watch = WatchWeights()
    trainer.callbacks.append(watch)
    with caplog.at_level(logging.WARNING, logger="lit_retrieval.modules.nonfinite"):
        trainer.fit(module, data)
    assert module.nonfinite.skipped == 1 and watch.changed == [True, False, True, True]
    assert "non-finite loss" in caplog.text and "syn_" in caplog.text and "step skipped (1 so far)" in caplog.text


def test_nonfinite_loss_stops_the_run_under_raise(tmp_path, tiny_clip, corpus):
    module, data, trainer = small_fit(tiny_clip, corpus, tmp_path, NonFinitePolicy("raise"))
    with pytest.raises(FloatingPointError, match=r"non-finite loss .*global step 1; samples on rank 0: \['syn_"):
        trainer.fit(module, data)


def test_corrupt_or_partial_checkpoints_are_refused_clearly(tmp_path, tiny_clip, corpus):
    config = clip_fit_config(
        tiny_clip,
        corpus,
        {
            "max_epochs": 1,
            "limit_train_batches": 2,
            "limit_val_batches": 0,
            "logger": False,
            "default_root_dir": str(tmp_path / "run"),
            "callbacks": [
                {
                    "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                    "init_args": {"dirpath": str(tmp_path / "ckpt"), "save_last": True},
                }
            ],
        },
    )
    path = tmp_path / "fit.yaml"
    path.write_text(yaml.safe_dump(config))
    main(["fit", "--config", str(path)])
    good = tmp_path / "ckpt" / "last.ckpt"
    assert not list((tmp_path / "ckpt").glob("*.partial"))
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(CorruptCheckpointError, match=r"truncated.ckpt: corrupt or partial checkpoint"):
        main(
            ["fit", "--config", str(path), "--ckpt_path", str(truncated), "--debug"]
        )  # --debug: the error itself, not its one-line report
    empty = tmp_path / "empty.ckpt"
    empty.write_bytes(b"")
    with pytest.raises(CorruptCheckpointError, match="empty checkpoint file"):
        read_checkpoint(empty)
    torch.save({"weights": torch.zeros(1)}, tmp_path / "other.pt")
    with pytest.raises(CorruptCheckpointError, match="not a Lightning checkpoint"):
        read_checkpoint(tmp_path / "other.pt")


def test_full_disk_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    io_plugin = SafeCheckpointIO()
    target = tmp_path / "last.ckpt"
    io_plugin.save_checkpoint({"state_dict": {"w": torch.ones(3)}, "global_step": 1}, target)
    real_open = open

    class FullDisk:
        def __init__(self, path, mode):
            self.handle = real_open(path, mode)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def write(self, data):
            self.handle.write(bytes(data)[:100])  # part of it lands, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(
        "builtins.open",
        lambda path, mode="r", *a, **k: (
            FullDisk(path, mode) if str(path).endswith(".partial") else real_open(path, mode, *a, **k)
        ),
    )
    with pytest.raises(OSError, match="the disk is full; the previous last.ckpt is intact"):
        io_plugin.save_checkpoint({"state_dict": {"w": torch.zeros(3)}, "global_step": 2}, target)
    monkeypatch.undo()
    assert not (tmp_path / "last.ckpt.partial").exists()
    restored = io_plugin.load_checkpoint(target)
    assert restored["global_step"] == 1 and torch.equal(restored["state_dict"]["w"], torch.ones(3))


def _metrics_worker(rank: int, world: int, init: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    g = torch.Generator().manual_seed(0)
    scores, targets = torch.randn(10, 7, generator=g), torch.randint(0, 7, (10,), generator=g)
    rows = [0, 2, 4, 6, 8] if rank == 0 else [1, 3, 5, 7, 9, 1]  # a sampler's padding repeats row 1
    metric = RetrievalMetrics()
    metric.update(scores[rows], targets[rows], torch.tensor(rows))
    torch.save(metric.compute(), os.path.join(out, f"rank{rank}.pt"))
    dist.destroy_process_group()


@pytest.mark.distributed
def test_metrics_synchronise_to_the_single_process_values(tmp_path):
    run_ranks(_metrics_worker, (2, f"file://{tmp_path / 'rendezvous'}", str(tmp_path)))
    g = torch.Generator().manual_seed(0)
    scores, targets = torch.randn(10, 7, generator=g), torch.randint(0, 7, (10,), generator=g)
    single = RetrievalMetrics()
    single.update(scores, targets)
    want = single.compute()
    for rank in range(2):
        assert torch.load(tmp_path / f"rank{rank}.pt") == pytest.approx(want)


def test_convert_checkpoint_explains_what_it_needs(tmp_path, capsys):
    import importlib.util

    from lit_retrieval.commands import run_command

    with pytest.raises(SystemExit):
        run_command("convert-checkpoint", [str(tmp_path / "missing"), str(tmp_path / "out.ckpt")])
    assert "not a DeepSpeed checkpoint directory" in capsys.readouterr().err
    if importlib.util.find_spec("deepspeed") is None:  # CI: DeepSpeed is in the `gpu` extra only
        (tmp_path / "ds").mkdir()
        with pytest.raises(SystemExit):
            run_command("convert-checkpoint", [str(tmp_path / "ds"), str(tmp_path / "out.ckpt")])
        assert "converting needs DeepSpeed" in capsys.readouterr().err
