"""ZeRO-3's gathers on DeepSpeed's CPU accelerator (gloo) with the config `DeepSpeedStrategy` gives DeepSpeed.

Two real processes partition a stack of layers with `deepspeed.zero.Init`, then, many times over,
rank 0 writes known values into each layer under `GatheredParameters(modifier_rank=0)` (what
Lightning's load of full weights does) and every rank gathers the layer again and reads them back.
DeepSpeed's coalesced gather waits for its last all-gather only; under gloo an earlier one can
finish after rank 0 wrote, and the layer keeps its old values (about 1 in 10 gathers here without
`stage3_allgather_sequential`, see lit_retrieval/strategies.py).
"""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.multiprocessing as mp

pytest.importorskip("deepspeed")

pytestmark = [pytest.mark.distributed]
LAYERS, TRIALS, WIDTH = 6, 20, 48


def zero3_config() -> dict:
    """The DeepSpeed config of `DeepSpeedStrategy(stage=3)` on the CPU accelerator, every weight partitioned."""
    from lightning.pytorch.accelerators import CPUAccelerator

    from lit_retrieval.strategies import DeepSpeedStrategy

    strategy = DeepSpeedStrategy(stage=3, param_persistence_threshold=0, accelerator=CPUAccelerator())
    strategy._format_config()  # without a LightningModule: what the config itself says
    return {**strategy.config, "train_micro_batch_size_per_gpu": 1}


def written(trial: int, layer: int) -> tuple[float, float]:
    return trial * 100.0 + layer, -float(trial)


def rank_main(rank: int, port: int, config: dict, results) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2"
    )
    import deepspeed

    deepspeed.init_distributed("gloo", verbose=False)
    with deepspeed.zero.Init(config_dict_or_path=config):
        model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])
    wrong = []
    for trial in range(TRIALS):
        for index, layer in enumerate(model):
            with deepspeed.zero.GatheredParameters(list(layer.parameters()), modifier_rank=0):
                if rank == 0:
                    weight, bias = written(trial, index)
                    layer.weight.data.fill_(weight)
                    layer.bias.data.fill_(bias)
        for index, layer in enumerate(model):
            with deepspeed.zero.GatheredParameters(list(layer.parameters())):
                weight, bias = written(trial, index)
                if not (torch.all(layer.weight == weight) and torch.all(layer.bias == bias)):
                    wrong.append((trial, index))
    results.put((rank, wrong))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_zero3_config_on_cpu_gathers_every_parameter_rank_0_wrote(monkeypatch):
    config = zero3_config()
    assert config["zero_optimization"]["stage3_allgather_sequential"] is True
    context = mp.get_context("spawn")
    results = context.Queue()
    port = free_port()
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")  # the children inherit it
    ranks = [context.Process(target=rank_main, args=(rank, port, config, results)) for rank in range(2)]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join(timeout=240)
    assert [process.exitcode for process in ranks] == [0, 0]
    wrong = dict(results.get(timeout=5) for _ in ranks)
    assert wrong == {0: [], 1: []}, f"gathers that kept old values (trial, layer): {wrong}"


def test_zero3_keeps_a_sequential_gather_the_user_turned_off_and_only_on_cpu():
    from lightning.pytorch.accelerators import CPUAccelerator, CUDAAccelerator

    from lit_retrieval.strategies import DeepSpeedStrategy

    config = {"zero_optimization": {"stage": 3, "stage3_allgather_sequential": False}}
    strategy = DeepSpeedStrategy(config=config, accelerator=CPUAccelerator())
    strategy._format_config()
    assert strategy.config["zero_optimization"]["stage3_allgather_sequential"] is False
    strategy = DeepSpeedStrategy(stage=3, accelerator=CUDAAccelerator())
    strategy._format_config()
    assert "stage3_allgather_sequential" not in strategy.config["zero_optimization"]
