"""`ShardedDataModule` under DDP (2 ranks, gloo, loader workers): every training item at most once per epoch
over both ranks, and a run stopped mid-epoch and resumed through the Trainer gives each rank the batches the
uninterrupted run gave it next, under DDP and under DeepSpeed ZeRO-2 on its CPU engine; a resume on 1 rank of
a 2-rank mid-epoch checkpoint is refused with the reason."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from helpers.cli_server import run_script
from helpers.fit_configs import clean_launch_env
from helpers.shard_runs import shard

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

SCRIPT = """
import sys
import lightning as L
from helpers.resume_probes import RecordBatches, SaveAndStopAt, WriteBatches
from lit_retrieval.data import ShardedDataModule

shards, out, devices, stop, ckpt, strategy, resume = sys.argv[1:8]
callbacks = [WriteBatches(out)] + ([SaveAndStopAt(int(stop), ckpt)] if int(stop) else [])
if strategy == "deepspeed":  # ZeRO-2 on DeepSpeed's CPU accelerator; it restores after the loaders are built
    from lit_retrieval.strategies import DeepSpeedStrategy
    strategy = DeepSpeedStrategy(stage=2)
trainer = L.Trainer(
    accelerator="cpu", devices=int(devices), strategy=strategy if int(devices) > 1 else "auto", max_epochs=2,
    logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    default_root_dir=out, callbacks=callbacks,
)
data = ShardedDataModule(shards, batch_size=2, num_workers=2, shuffle_seed=3)
trainer.fit(RecordBatches(), datamodule=data, ckpt_path=resume or None)
"""


def run(
    tmp_path: Path, shards: Path, name: str, devices: int, stop: int = 0, resume: str = "", strategy: str = "ddp"
) -> dict:
    out = tmp_path / name
    out.mkdir()
    script = tmp_path / "fit_shards.py"
    script.write_text(textwrap.dedent(SCRIPT))
    ckpt = str(tmp_path / f"mid-{strategy}.ckpt")
    args = [str(shards), str(out), str(devices), str(stop), ckpt, strategy, resume]
    env = {**clean_launch_env(str(Path(__file__).resolve().parents[2])), "DS_ACCELERATOR": "cpu"}
    done = run_script(script, args, tmp_path, env, timeout=300)  # `python SCRIPT ARGS`, its ranks as Lightning's
    batches = {
        int(p.stem[4:]): [json.loads(line) for line in p.read_text().splitlines()] for p in out.glob("rank*.jsonl")
    }
    return {"code": done.returncode, "err": done.stderr, "batches": batches}


def test_two_ranks_resumed_mid_epoch_continue_as_the_uninterrupted_run(corpus, tmp_path):
    shards = tmp_path / "shards"
    assert shard(corpus, shards, "--part-size", "4", "--chunk-bytes", "8KB", "--splits", "train") == 0
    whole = run(tmp_path, shards, "whole", 2)
    assert whole["code"] == 0, whole["err"][-2000:]
    per_epoch = len(whole["batches"][0]) // 2
    assert per_epoch == len(whole["batches"][1]) // 2 >= 3
    epoch = [i for rank in (0, 1) for b in whole["batches"][rank][:per_epoch] for i in b]
    assert len(epoch) == len(set(epoch)) and 17 - len(epoch) < 2 * 2 * 2  # at most drop_last's tail
    stop = per_epoch + 1
    # DDP, and DeepSpeed ZeRO-2, whose strategy restores the checkpoint after the loaders were built
    for strategy in ("ddp", "deepspeed"):
        first = run(tmp_path, shards, f"first-{strategy}", 2, stop=stop, strategy=strategy)
        assert first["code"] == 0, first["err"][-2000:]
        mid = str(tmp_path / f"mid-{strategy}.ckpt")
        resumed = run(tmp_path, shards, f"resumed-{strategy}", 2, resume=mid, strategy=strategy)
        assert resumed["code"] == 0, resumed["err"][-2000:]
        for rank in (0, 1):
            assert first["batches"][rank] == whole["batches"][rank][:stop], strategy
            assert resumed["batches"][rank] == whole["batches"][rank][stop:], strategy
    refused = run(tmp_path, shards, "one_rank", 1, resume=str(tmp_path / "mid-ddp.ckpt"))
    assert refused["code"] != 0
    assert "another topology (world_size 2 -> 1)" in refused["err"]
