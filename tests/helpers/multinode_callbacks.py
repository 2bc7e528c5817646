"""A callback for the multi-node Slurm tests (tests/launch/test_slurm_multinode.py): what each rank of a job was
told by Slurm and Lightning, and which samples it trained on."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import lightning as L

SLURM_KEYS = ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS", "SLURM_NODELIST", "SLURM_JOB_ID")


class RecordRank(L.Callback):
    """At the end of fit writes `<out>/rank<global rank>.json`: Lightning's global/local/node rank and world
    size, the Slurm variables they came from, MASTER_ADDR/MASTER_PORT, the hostname, the address the rank's
    hostname resolves to, and per epoch the sample ids of each batch it trained on."""

    def __init__(self, out: str) -> None:
        self.out = out
        self.epochs: dict[int, list[list[str]]] = {}

    def on_train_batch_start(self, trainer: L.Trainer, module: L.LightningModule, batch, batch_idx: int) -> None:
        ids = batch.get("ids") or batch.get("video_id")
        self.epochs.setdefault(trainer.current_epoch, []).append([str(i) for i in ids])

    def on_fit_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        host = socket.gethostname()
        record = {
            "global_rank": trainer.global_rank,
            "local_rank": trainer.local_rank,
            "node_rank": trainer.node_rank,
            "world_size": trainer.world_size,
            "num_nodes": trainer.num_nodes,
            "hostname": host,
            "address": socket.gethostbyname(host),
            "master_addr": os.environ.get("MASTER_ADDR"),
            "master_port": os.environ.get("MASTER_PORT"),
            "slurm": {key: os.environ.get(key) for key in SLURM_KEYS},
            "epochs": {str(epoch): batches for epoch, batches in self.epochs.items()},
        }
        Path(self.out).mkdir(parents=True, exist_ok=True)
        (Path(self.out) / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))
