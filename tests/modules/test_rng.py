"""Random states in checkpoints (`lit_retrieval/modules/rng.py`) on GPU geometries, with a stand-in
for torch.cuda (`helpers.fake_cuda`): a checkpoint of an 8-GPU run loads in a 1-GPU process
through every load path (issue 57, item 1), and 2 ranks each save and restore their own states."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch
import torch.distributed as dist
from helpers.fake_cuda import FakeCuda

from lit_retrieval.models.encoders import CLIPEncoder
from lit_retrieval.models.gve import AdapterConfig
from lit_retrieval.models.heads import MeanPHead
from lit_retrieval.modules import DualEncoderRetrieval, EmbedderConfig, GVERetrieval
from lit_retrieval.modules.rng import rng_states, set_rng_states
from lit_retrieval.search.loading import load_checkpoint_weights
from helpers.forked_ranks import run_ranks


def legacy_states_of_an_8_gpu_task(monkeypatch) -> dict:
    """What a rank of `fit.sbatch` on 8 GPUs wrote before per-rank states: every visible device's
    CUDA generator (`torch.cuda.get_rng_state_all()`), beside its CPU states."""
    cuda = FakeCuda(8, current=3).install(monkeypatch).get_rng_state_all()
    kind, keys, position, has_gauss, gauss = np.random.get_state()
    numpy_state = [kind, torch.from_numpy(keys.astype(np.int64)), int(position), int(has_gauss), float(gauss)]
    return {"python": random.getstate(), "numpy": numpy_state, "torch": torch.get_rng_state(), "cuda": cuda}


def test_an_8_gpu_dual_encoder_checkpoint_loads_in_a_1_gpu_process(monkeypatch, tiny_clip):
    states = legacy_states_of_an_8_gpu_task(monkeypatch)
    one_gpu = FakeCuda(1).install(monkeypatch)
    before = one_gpu.get_rng_state(0)
    module = DualEncoderRetrieval(CLIPEncoder(pretrained=str(tiny_clip)), MeanPHead())
    module.on_load_checkpoint({"rng_states": states})  # the hook `test --ckpt_path` runs: no IndexError
    assert torch.equal(one_gpu.get_rng_state(0), before)  # a CPU-placed module touches no GPU generator


def test_an_8_gpu_gve_checkpoint_loads_through_search_loading(monkeypatch, tmp_path, tiny_qwen):
    module = GVERetrieval(EmbedderConfig(str(tiny_qwen), lora=AdapterConfig(r=2, alpha=4), dtype="float32"))
    weights = {k: v for k, v in module.state_dict().items() if k in module.trainable_names()}
    path = tmp_path / "gve.ckpt"
    torch.save({"state_dict": weights, "rng_states": legacy_states_of_an_8_gpu_task(monkeypatch)}, path)
    FakeCuda(1).install(monkeypatch)
    load_checkpoint_weights(module, str(path))  # `index`, `search`, `uvrb`, `grid`'s evaluation load


def test_a_checkpoint_of_2_ranks_loads_in_one_process_without_restoring(monkeypatch):
    gpu = FakeCuda(1).install(monkeypatch)
    saved = {"world_size": 2, "ranks": [{"cuda": torch.zeros(16, dtype=torch.uint8)}] * 2}
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    assert not set_rng_states(saved, 0, 1, torch.device("cuda:0"))
    assert torch.equal(torch.rand(3), expected)
    assert torch.equal(gpu.get_rng_state(0), torch.full((16,), 10, dtype=torch.uint8))


def _draws(seed: int) -> tuple[list[float], float, list[float]]:
    random.seed(seed), np.random.seed(seed), torch.manual_seed(seed)
    return [random.random()], float(np.random.rand()), torch.rand(2).tolist()


def _per_rank_worker(rank: int, world: int, init: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    with pytest.MonkeyPatch.context() as patch:
        gpu = FakeCuda(world, current=rank).install(patch)  # every task sees every GPU, as under fit.sbatch
        device = torch.device(f"cuda:{rank}")
        gpu.set_rng_state(torch.full((16,), 100 + rank, dtype=torch.uint8), device)
        random.seed(rank), np.random.seed(rank), torch.manual_seed(rank)
        saved = rng_states(device)
        random.seed(99), np.random.seed(99), torch.manual_seed(99)  # the states move on
        gpu.states = [torch.zeros(16, dtype=torch.uint8) for _ in range(world)]
        restored = set_rng_states(saved, rank, world, device)
        draws = [random.random()], float(np.random.rand()), torch.rand(2).tolist()
        torch.save({"saved": saved, "restored": restored, "draws": draws, "cuda": gpu.states}, f"{out}/rank{rank}.pt")
    dist.destroy_process_group()


@pytest.mark.distributed
def test_each_rank_saves_and_restores_its_own_device_and_cpu_states(tmp_path):
    run_ranks(_per_rank_worker, (2, f"file://{tmp_path / 'rendezvous'}", str(tmp_path)))
    results = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    assert results[0]["saved"]["world_size"] == 2
    for rank, result in enumerate(results):
        assert result["restored"]
        own = result["saved"]["ranks"][rank]
        assert torch.equal(own["cuda"], torch.full((16,), 100 + rank, dtype=torch.uint8))  # its device's state
        assert result["draws"] == _draws(rank)  # its own CPU generators, not rank 0's
        other = 1 - rank
        assert torch.equal(result["cuda"][rank], own["cuda"])
        assert torch.equal(result["cuda"][other], torch.zeros(16, dtype=torch.uint8))  # no other device touched
    assert os.path.exists(tmp_path / "rank1.pt")
