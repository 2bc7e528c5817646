"""Shots under several ranks (issue 57, item 7): `prepare_data` detected every split's shots on
rank 0 while the other ranks waited at a barrier that NCCL times out after 30 minutes. Under
several ranks the data module now detects nothing and refuses, on every rank, a run whose shot
cache lacks videos, in one line naming the `lit-retrieval shots` commands (one process, Slurm
array) and a list of the missing videos; the command it names fills the cache, and the run starts."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from lit_retrieval.cli import main
from lit_retrieval.data import MultiEventDataModule
from lit_retrieval.data.media.shots import ShotConfig
from lit_retrieval.errors import ConfigError


def data_module(corpus, cache, rank: int, world: int) -> MultiEventDataModule:
    dm = MultiEventDataModule(
        str(corpus / "annotations.json"),
        num_frames=4,
        image_size=32,
        shots=ShotConfig(cache_dir=str(cache), progress=False),
    )
    dm.trainer = SimpleNamespace(world_size=world, global_rank=rank)  # what a DDP trainer tells its data module
    return dm


def test_several_ranks_refuse_an_incomplete_shot_cache_and_run_once_the_named_command_filled_it(corpus, tmp_path):
    cache = tmp_path / "shots"
    videos = json.loads((corpus / "annotations.json").read_text())["videos"]
    wanted = {str(corpus / v["path"]) for v in videos if v["split"] in ("train", "test")}  # the configured splits
    for rank in (1, 0):
        dm = data_module(corpus, cache, rank, world=2)
        dm.prepare_data()
        assert not cache.exists() or not list(cache.glob("*.json"))  # nothing detected behind a barrier
        with pytest.raises(ConfigError) as refused:
            dm.setup("fit")
    message = str(refused.value)
    assert "\n" not in message and f"{len(wanted)} of {len(wanted)} video(s) have no shots" in message
    listing = cache / "uncached_videos.txt"
    assert set(listing.read_text().split()) == wanted
    single = message.split("`lit-retrieval ")[1].split("`")[0]
    array = message.split("`lit-retrieval slurm array.sbatch --set ")[1].split("`")[0]
    assert shlex.split(array)[0] == f"COMMAND={single.removesuffix(' --workers N')}"
    fit_yaml = tmp_path / "FIT.yaml"
    fit = yaml.safe_load((Path(__file__).resolve().parents[3] / "configs" / "quickstart.yaml").read_text())
    fit["data"]["init_args"]["shots"] = {"cache_dir": str(cache), "progress": False}  # a whole training config
    fit_yaml.write_text(yaml.safe_dump(fit))
    args = shlex.split(single.replace("FIT.yaml", str(fit_yaml)).replace("--workers N", "--workers 2"))
    with pytest.raises(SystemExit) as done:
        main(args)
    assert done.value.code == 0
    dm = data_module(corpus, cache, 1, world=2)
    dm.prepare_data()
    dm.setup("fit")
    assert len(dm.datasets["train"]) + len(dm.datasets["test"]) == len(wanted)
