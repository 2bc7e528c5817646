"""docs/scale-out.md's recipes on 8, 16 or 32 GPUs: the documented 16-GPU MELON command, copied from the page,
parses as `fit` parses it and keeps the paper's contrastive batch (supp. B.1: 16 pairs); every row of the MELON
and SALI tables multiplies out to its paper batch (GPUs used x per-GPU batch)."""

from __future__ import annotations

import re
from pathlib import Path

from lit_retrieval.retrieval_cli import resolved_training_config
from helpers.doc_commands import documented_command

ROOT = Path(__file__).resolve().parents[2]


def test_the_documented_16_gpu_melon_command_keeps_the_papers_batch(monkeypatch):
    words = documented_command("docs/scale-out.md", "lit-retrieval fit", "--trainer.num_nodes 2")
    configs = [words[i + 1] for i, w in enumerate(words) if w == "--config"]
    flags = [w for i, w in enumerate(words[2:], start=2) if w != "--config" and words[i - 1] != "--config"]
    monkeypatch.chdir(ROOT)
    config = resolved_training_config(configs, flags, "docs/scale-out.md")
    trainer, model, data = config["trainer"], config["model"]["init_args"], config["data"]["init_args"]
    gpus = int(trainer["num_nodes"]) * int(trainer["devices"])  # devices prints as a string
    assert gpus == 16 and model["cross_device"] is True and trainer["accumulate_grad_batches"] == 1
    assert gpus * data["batch_size"] == model["recipe_batch"] == 16


def table_rows(title: str) -> list[list[str]]:
    """The rows of the table that follows the paragraph starting with `title` in docs/scale-out.md."""
    text = (ROOT / "docs" / "scale-out.md").read_text()
    after = text[text.index(title) :]
    table = re.search(r"^\| GPUs .*?\n\n", after, re.S | re.M).group(0)
    return [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:] if line]


def test_every_melon_and_sali_row_multiplies_out_to_the_papers_batch():
    for title, batch in (("MELON (supp. B.1", 16), ("SALI (Sec. 4", 48)):
        rows = table_rows(title)
        assert [row[0] for row in rows] == ["8", "16", "32"]
        for row in rows:
            per_gpu = re.match(r"\d+", row[2])
            nodes = re.search(r"(\d+) x (\d+)", row[1])
            if per_gpu is None:  # a size the GPUs cannot split: the row says which to use instead
                continue
            assert int(nodes.group(1)) * int(nodes.group(2)) * int(per_gpu.group(0)) == batch == int(row[6].split()[0])
            assert row[3] == "true" and row[5] == "1" and row[7] == row[8] == "not measured"


def test_the_documented_8_gpu_gve_command_scales_every_tasks_batch_to_the_papers(monkeypatch, tmp_path):
    """GVE A.8's batch sizes are per GPU on 32 GPUs: on 8, `batch_scale 4` gives each of the 38 tasks 4 x its
    Tab. 6-7 batch (read from configs/gve/data_3b.yaml), so 8 GPUs contrast the paper's 32 x Tab. pairs per task."""
    import yaml
    from jsonargparse import dict_to_namespace

    from lit_retrieval.retrieval_cli import build_datamodule

    words = documented_command("docs/scale-out.md", "lit-retrieval fit", "--data.init_args.batch_scale 4")
    words = [str(tmp_path) if w == "/models/gme-Qwen2-VL-7B-Instruct" else w for w in words]  # the prober's folder
    configs = [words[i + 1] for i, w in enumerate(words) if w == "--config"]
    flags = [w for i, w in enumerate(words[2:], start=2) if w != "--config" and words[i - 1] != "--config"]
    monkeypatch.chdir(ROOT)
    config = resolved_training_config(configs, flags, "docs/scale-out.md")
    gpus = int(config["trainer"]["num_nodes"]) * int(config["trainer"]["devices"])
    assert gpus == 8 and config["model"]["init_args"]["cross_device"] is True
    assert config["model"]["init_args"]["grad_cache"]["video_chunk"] == 4
    data = build_datamodule(dict_to_namespace({"data": config["data"]}))
    paper = yaml.safe_load((ROOT / "configs" / "gve" / "data_3b.yaml").read_text())["data"]["init_args"]["tasks"]
    assert len(paper) == 38 == len(data.specs)
    assert [s.batch_size for s in data.specs] == [t["batch_size"] * 32 // gpus for t in paper]
