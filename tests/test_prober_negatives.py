"""Hard negatives mined at every epoch start by the Modality Pyramid's prober (GVE Sec. 3.3,
`data.negative_mining: prober`): after each epoch's probing, every pair's negatives are the prober's
top-ranked non-positive targets, checked by a brute-force loop over that prober's cosine scores
(epoch 1: the external prober `prober_path`; epoch 2: the model being trained)."""

from __future__ import annotations

import json

import lightning as L
import pytest
import torch
import yaml

from lit_retrieval.cli import main
from lit_retrieval.data import MultiTaskDataModule
from lit_retrieval.data.tasks import TaskSpec
from lit_retrieval.errors import ConfigError
from lit_retrieval.models.gve import GVEEmbedder

TOPICS = ["volcano", "violin", "harbour", "glacier", "comet", "orchard", "bakery", "tundra", "lantern", "canyon"]
NEGATIVES = 2


class BruteForceNegatives(L.Callback):
    """At each epoch start (after the Modality Pyramid): the negatives of every pair equal the
    `NEGATIVES` highest-cosine distinct targets other than its positive under the epoch's prober."""

    def __init__(self, prober_path: str, record: str) -> None:
        self.prober_path = prober_path
        self.record = record  # the checked epochs, one per line (the CLI builds this class from its own import)

    def on_train_epoch_start(self, trainer, module) -> None:
        epoch = trainer.current_epoch
        data = trainer.datamodule.train_data[0]
        if epoch == 0:
            prober = GVEEmbedder(self.prober_path, lora=None, inputs=module.embedder.processing.config)
        else:
            prober = module.embedder
        targets = list({r.positive.key: r.positive for r in data.records}.values())
        with torch.no_grad():
            queries = prober.embed([r.query for r in data.records], data.spec.instruction).float()
            candidates = prober.embed(targets, data.spec.target_instruction).float()
        for i, record in enumerate(data.records):
            scored = []
            for j, target in enumerate(targets):
                if target.key != record.positive.key:
                    scored.append((float(queries[i] @ candidates[j]), target.key))
            expected = [key for _, key in sorted(scored, reverse=True)[:NEGATIVES]]
            assert [n.key for n in record.negatives] == expected, (epoch, record.record_id)
        with open(self.record, "a") as handle:
            handle.write(f"{epoch}\n")


@pytest.fixture(scope="module")
def text_task(tmp_path_factory):
    path = tmp_path_factory.mktemp("prober_negatives") / "t2t.jsonl"
    rows = [
        {
            "id": f"q{i}",
            "query": f"Which passage describes the {topic}?",
            "positive": f"A short passage about the {topic}.",
        }
        for i, topic in enumerate(TOPICS)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_each_epoch_mines_the_probers_top_ranked_non_positives(tmp_path, tiny_qwen, text_task):
    config = yaml.safe_load(open("configs/gve/tiny_cpu.yaml"))
    config["trainer"].update(max_epochs=2, default_root_dir=str(tmp_path), logger=False, limit_val_batches=0)
    pyramid = {
        "class_path": "lit_retrieval.callbacks.ModalityPyramid",
        "init_args": {"num_probe_pairs": 4, "prober_path": str(tiny_qwen)},
    }
    check = {
        "class_path": "test_prober_negatives.BruteForceNegatives",
        "init_args": {"prober_path": str(tiny_qwen), "record": str(tmp_path / "checked.txt")},
    }
    config["trainer"]["callbacks"] = [pyramid, check]
    config["trainer"]["enable_checkpointing"] = False
    config["model"]["init_args"]["embedder"]["model_path"] = str(tiny_qwen)
    data = config["data"]["init_args"]
    task = {
        "name": "t2t",
        "path": str(text_task),
        "format": "T->T",
        "batch_size": 4,
        "num_negatives": NEGATIVES,
        "instruction": "Retrieve the passage.",
        "target_instruction": None,
    }
    data.update(tasks=[task], val_tasks=[], steps_per_epoch=2, num_workers=0, negative_mining="prober")
    (tmp_path / "gve.yaml").write_text(yaml.safe_dump(config))
    main(["fit", "--config", str(tmp_path / "gve.yaml")])
    assert (tmp_path / "checked.txt").read_text().split() == ["0", "1"]


def test_prober_negatives_need_the_curriculum_callback(text_task):
    data = MultiTaskDataModule(
        tasks=[TaskSpec("t2t", str(text_task), "T->T", batch_size=2, num_negatives=1)],
        negative_mining="prober",
        num_workers=0,
    )
    data.processing = object()
    data.setup("fit")
    assert all(r.negatives == () for r in data.train_data[0].records)  # the file's negatives are not read
    with pytest.raises(ConfigError, match="negative_mining: prober needs the ModalityPyramid callback"):
        next(iter(data.train_dataloader()))
