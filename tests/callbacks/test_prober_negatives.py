"""Hard negatives mined at every epoch start with the epoch's prober Psi_t (GVE Sec. 3.3,
`data.negative_mining: prober`, `HardNegativeMining`): after each epoch's mining, every pair's negatives
are the prober's top-ranked non-positive candidates, checked by a brute-force loop over that prober's
cosine scores (epoch 1: the external prober `data.prober_path`; epoch 2: the model being trained)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from helpers.cli_server import run_cli
from helpers.brute_force_negatives import NEGATIVES
from lit_retrieval.cli import main
from lit_retrieval.data import MultiTaskDataModule
from lit_retrieval.data.gve.tasks import TaskSpec
from lit_retrieval.errors import ConfigError
from lit_retrieval.models.gve.tiny import save_tiny_qwen25vl

TOPICS = ["volcano", "violin", "harbour", "glacier", "comet", "orchard", "bakery", "tundra", "lantern", "canyon"]


@pytest.fixture(scope="module")
def text_task(tmp_path_factory):
    folder = tmp_path_factory.mktemp("prober_negatives")
    rows = [
        {
            "id": f"q{i}",
            "query": f"Which passage describes the {topic}?",
            "positive": f"A short passage about the {topic}.",
        }
        for i, topic in enumerate(TOPICS)
    ]
    (folder / "t2t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    extra = [f"A note on the {topic}." for topic in ("volcano", "comet", "meadow", "anvil")]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(t) + "\n" for t in extra))
    return folder


@pytest.fixture(scope="module")
def other_prober(tmp_path_factory):
    """Psi_1: a tiny Qwen2.5-VL with other random weights than the trained model's base."""
    return save_tiny_qwen25vl(tmp_path_factory.mktemp("other_prober"), seed=1)


def gve_config(tmp_path, tiny_qwen, text_task, callbacks, prober_path, mining="prober", workers=0) -> str:
    config = yaml.safe_load(open("configs/gve/tiny_cpu.yaml"))
    config["trainer"].update(max_epochs=2, default_root_dir=str(tmp_path), logger=False, limit_val_batches=0)
    config["trainer"]["callbacks"] = callbacks
    config["trainer"]["enable_checkpointing"] = False
    config["model"]["init_args"]["embedder"]["model_path"] = str(tiny_qwen)
    data = config["data"]["init_args"]
    task = {
        "name": "t2t",
        "path": str(text_task / "t2t.jsonl"),
        "format": "T->T",
        "batch_size": 4,
        "num_negatives": NEGATIVES if mining == "prober" else 0,  # the file has none
        "instruction": "Retrieve the passage.",
        "target_instruction": None,
        "negative_corpus": [str(text_task / "corpus.jsonl")],
    }
    data.update(tasks=[task], val_tasks=[], steps_per_epoch=2, num_workers=workers, negative_mining=mining)
    data["prober_path"] = prober_path
    (tmp_path / "gve.yaml").write_text(yaml.safe_dump(config))
    return str(tmp_path / "gve.yaml")


MINER = {"class_path": "lit_retrieval.callbacks.HardNegativeMining", "init_args": {"batch_size": 4}}
PYRAMID = {"class_path": "lit_retrieval.callbacks.ModalityPyramid", "init_args": {"num_probe_pairs": 4}}


def brute_force_check(tmp_path: Path, other_prober: Path, text_task: Path) -> dict:
    """The `BruteForceNegatives` callback config: re-mines with `other_prober` by a loop, records to checked.txt."""
    record = str(tmp_path / "checked.txt")
    init = {"prober_path": str(other_prober), "corpus": str(text_task / "corpus.jsonl"), "record": record}
    return {"class_path": "helpers.brute_force_negatives.BruteForceNegatives", "init_args": init}


@pytest.mark.parametrize(
    ("curriculum", "workers"), [(True, 0), (False, 0), (True, 1)], ids=["gve", "gve_s", "gve_loader_worker"]
)
def test_each_epoch_mines_the_probers_top_ranked_non_positives(
    tmp_path, tiny_qwen, other_prober, text_task, curriculum, workers
):
    """GVE (with the Modality Pyramid) and GVE-s (without) mine the same way: Psi_1 = `data.prober_path`,
    then the model; candidates include the task's `negative_corpus` file. With a loader worker (GVE Tab. 9's
    1, as the shipped configs run) the worker's batches carry each epoch's mined negatives: the first
    epoch's loader is created when `configure_optimizers` reads `estimated_stepping_batches`, before the
    first mining, and a worker started then held pairs without negatives (refused at its first batch)."""
    check = brute_force_check(tmp_path, other_prober, text_task)
    callbacks = ([PYRAMID] if curriculum else []) + [MINER, check]
    main(["fit", "--config", gve_config(tmp_path, tiny_qwen, text_task, callbacks, str(other_prober), workers=workers)])
    assert (tmp_path / "checked.txt").read_text().split() == ["0:0", "0:1"]


def test_two_process_ddp_mining_equals_the_brute_force_on_every_rank(tmp_path, tiny_qwen, other_prober, text_task):
    """Under DDP (2 CPU processes, gloo) each rank embeds a share of the queries and candidates and the
    shares are gathered: every rank ends up with the brute-force negatives of the whole task."""
    import os

    from helpers.fit_configs import clean_launch_env

    check = brute_force_check(tmp_path, other_prober, text_task)
    config = gve_config(tmp_path, tiny_qwen, text_task, [MINER, check], str(other_prober))
    raw = yaml.safe_load(open(config))
    raw["trainer"].update(devices=2, strategy="ddp")
    raw["data"]["init_args"]["tasks"][0]["batch_size"] = 2
    (tmp_path / "gve.yaml").write_text(yaml.safe_dump(raw))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = run_cli(["fit", "--config", config], root, clean_launch_env(os.path.join(root, "tests")), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted((tmp_path / "checked.txt").read_text().split()) == ["0:0", "0:1", "1:0", "1:1"]


def one_line_refusal(config: str, capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "--config", config])
    assert exit_.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("lit-retrieval")]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(
    ("callbacks", "mining"),
    [([PYRAMID], "offline"), ([MINER], "prober"), ([PYRAMID, MINER], "prober")],
    ids=["pyramid", "miner", "both"],
)
def test_an_unset_first_prober_refuses_to_start(tmp_path, tiny_qwen, text_task, callbacks, mining, capsys):
    line = one_line_refusal(gve_config(tmp_path, tiny_qwen, text_task, callbacks, None, mining), capsys)
    assert "data.init_args.prober_path is not set" in line and "GME-7B" in line


def test_prober_mining_without_the_miner_refuses_to_start(tmp_path, tiny_qwen, text_task, capsys):
    line = one_line_refusal(gve_config(tmp_path, tiny_qwen, text_task, [PYRAMID], "model"), capsys)
    assert "negative_mining: prober needs the HardNegativeMining callback" in line


def test_prober_negatives_need_the_mining_callback(text_task):
    data = MultiTaskDataModule(
        tasks=[TaskSpec("t2t", str(text_task / "t2t.jsonl"), "T->T", batch_size=2, num_negatives=1)],
        negative_mining="prober",
        num_workers=0,
    )
    data.processing = object()
    data.setup("fit")
    assert all(r.negatives == () for r in data.train_data[0].records)  # the file's negatives are not read
    with pytest.raises(ConfigError, match="negative_mining: prober needs the HardNegativeMining callback"):
        next(iter(data.train_dataloader()))
    with pytest.raises(ConfigError, match="data.prober_path: .* is not a model directory"):
        MultiTaskDataModule(tasks=data.specs, prober_path=str(text_task / "t2t.jsonl"))
