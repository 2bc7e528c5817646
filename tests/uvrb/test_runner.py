"""UVRB runner: task files in the documented layout (and renamed fields), metrics against a
brute-force ranking, cache reuse and invalidation, skipped modalities, the report command, and
the MTEB and dual-encoder adapters."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest
import torch

from lit_retrieval.commands import run_command
from lit_retrieval.data.annotations import load_annotations
from lit_retrieval.data.items import MediaItem
from lit_retrieval.models.gve import GVEEmbedder
from lit_retrieval.search.cache import EmbeddingCache
from lit_retrieval.search.embedders import GVEItemEmbedder, MTEBEncoderEmbedder
from lit_retrieval.search.loading import ModelSpec, load_item_embedder
from lit_retrieval.uvrb.runner import run_benchmark
from lit_retrieval.uvrb.tasks import FieldMap, RetrievalTaskSpec, load_retrieval_task
from helpers.doc_commands import documented_command
from helpers.fit_configs import clip_fit_config
from helpers.gve_embedder import SMALL_INPUTS
from helpers.media import write_noise_video


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture(scope="module")
def t2v_task(corpus, tmp_path_factory):
    """A T->V task from the synthetic test videos: each event description retrieves its video."""
    root = tmp_path_factory.mktemp("uvrb") / "MSRVTT"
    root.mkdir()
    videos = [v for v in load_annotations(corpus / "annotations.json") if v.split == "test"][:6]
    write_jsonl(root / "corpus.jsonl", [{"id": v.video_id, "video": str(corpus / v.path)} for v in videos])
    queries, qrels = [], []
    for v in videos:
        for k, event in enumerate(v.events[:2]):
            queries.append({"id": f"{v.video_id}-{k}", "text": event.description})
            qrels.append({"query_id": f"{v.video_id}-{k}", "corpus_id": v.video_id, "score": 1})
    write_jsonl(root / "queries.jsonl", queries)
    write_jsonl(root / "qrels.jsonl", qrels)
    return root


def tiny_gve(tiny_qwen) -> GVEItemEmbedder:
    return GVEItemEmbedder(GVEEmbedder(str(tiny_qwen), lora=None, inputs=SMALL_INPUTS, dtype="float32"), "tiny")


def test_task_loading_with_renamed_fields_and_errors(tmp_path):
    write_jsonl(tmp_path / "corpus.jsonl", [{"vid": "a", "caption": "x"}, {"vid": "b", "caption": "y"}])
    write_jsonl(tmp_path / "queries.jsonl", [{"vid": "q", "caption": "query"}])
    write_jsonl(
        tmp_path / "qrels.jsonl",
        [{"q": "q", "c": "a", "rel": 1}, {"q": "q", "c": "b", "rel": 2}, {"q": "q", "c": "b", "rel": 0}],
    )
    spec = RetrievalTaskSpec(
        "MS-TI", str(tmp_path), fields=FieldMap(id="vid", text="caption", query_id="q", corpus_id="c", score="rel")
    )
    data = load_retrieval_task(spec)
    assert data.relevant == [[0, 1]] and data.corpus[1].text == "y"
    assert spec.metric == "P@1" and spec.prompt.startswith(
        "Find the video clip that corresponds to the given text and the given image"
    )
    write_jsonl(tmp_path / "qrels.jsonl", [{"q": "q", "c": "zzz", "rel": 1}])
    with pytest.raises(Exception, match=r"qrels.jsonl.*line 1.*unknown corpus item 'zzz'"):
        load_retrieval_task(spec)


def test_runner_matches_brute_force_and_caches(tmp_path, tiny_qwen, t2v_task):
    embedder = tiny_gve(tiny_qwen)
    spec = RetrievalTaskSpec("MSRVTT", str(t2v_task))
    results = run_benchmark(embedder, [spec], tmp_path / "out", tmp_path / "cache")
    got = results["datasets"]["MSRVTT"]
    data = load_retrieval_task(spec)
    scores = embedder.embed(data.queries, spec.prompt) @ embedder.embed(data.corpus).t()
    target = torch.tensor([r[0] for r in data.relevant])
    ranks = 1 + (scores > scores.gather(1, target[:, None])).sum(1)
    assert got["metric"] == "R@1" and got["score"] == pytest.approx(float((ranks == 1).double().mean()))
    assert got["R@10"] == pytest.approx(float((ranks <= 10).double().mean())) and got["MnR"] == pytest.approx(
        float(ranks.double().mean())
    )
    assert results["cache"] == {"hits": 0, "misses": 2}
    per_query = json.loads((tmp_path / "out" / "per_query.json").read_text())["MSRVTT"]
    assert per_query["ids"] == data.query_ids and per_query["values"] == (ranks == 1).double().tolist()
    for name in ("results.json", "results.md", "results.png"):
        assert (tmp_path / "out" / name).stat().st_size > 0
    again = run_benchmark(embedder, [spec], tmp_path / "out2", tmp_path / "cache")
    assert again["cache"] == {"hits": 2, "misses": 0} and again["datasets"] == results["datasets"]
    first_video = data.corpus[0].video
    os.utime(first_video, ns=(os.stat(first_video).st_atime_ns, os.stat(first_video).st_mtime_ns + 10**9))
    assert run_benchmark(embedder, [spec], tmp_path / "out3", tmp_path / "cache")["cache"] == {"hits": 1, "misses": 1}
    other_prompt = RetrievalTaskSpec("MSRVTT", str(t2v_task), prompt="Another instruction.")
    assert run_benchmark(embedder, [other_prompt], tmp_path / "out4", tmp_path / "cache")["cache"]["misses"] == 1


def test_cache_key_changes_with_the_model_settings(tmp_path, tiny_qwen):
    items = [MediaItem(text="hello")]
    cache = EmbeddingCache(tmp_path)
    cache.embed(tiny_gve(tiny_qwen), items, None, 4, "t")
    other = GVEItemEmbedder(
        GVEEmbedder(
            str(tiny_qwen), lora=None, inputs=dataclasses.replace(SMALL_INPUTS, max_tokens=999), dtype="float32"
        ),
        "tiny",
    )
    cache.embed(other, items, None, 4, "t")
    assert (cache.hits, cache.misses) == (0, 2)


def test_report_command_prints_abilities(tmp_path, capsys):
    from lit_retrieval.uvrb.datasets import UVRB_DATASETS

    scores = {name: 0.5 for name in UVRB_DATASETS} | {"MSRVTT": 0.8}
    path = tmp_path / "scores.json"
    path.write_text(json.dumps(scores))
    assert run_command("uvrb", ["report", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["CG"] == pytest.approx(0.6) and out["AVG_datasets"] == pytest.approx((15 * 0.5 + 0.8) / 16)


class FakeMTEB:
    """Records what it was asked; embeds text by character counts and videos by mean colour."""

    def __init__(self) -> None:
        self.calls = []

    def encode(self, inputs, *, task_metadata, hf_split, hf_subset, prompt_type=None):
        self.calls.append(prompt_type)
        rows = []
        for batch in inputs:
            if "video" in batch:
                rows += [v.float().mean(dim=(0, 2, 3)).numpy() for v in batch["video"]]
            else:
                rows += [np.array([len(t), t.count("e"), 1.0]) for t in batch["text"]]
        return np.stack(rows)


def test_mteb_adapter_and_skipped_modalities(tmp_path, t2v_task):
    model = FakeMTEB()
    embedder = MTEBEncoderEmbedder(model, "fake", {"T"})
    vectors = embedder.embed([MediaItem(text="abc"), MediaItem(text="eee")], "Find it.", batch_size=1)
    assert vectors.shape == (2, 3) and torch.allclose(vectors.norm(dim=1), torch.ones(2)) and model.calls == ["query"]
    results = run_benchmark(embedder, [RetrievalTaskSpec("MSRVTT", str(t2v_task))], tmp_path / "out")
    assert "the model does not embed ['V'] items" in results["datasets"]["MSRVTT"]["skipped"]
    video_model = MTEBEncoderEmbedder(FakeMTEB(), "fake", {"T", "V"}, num_frames=4)
    scored = run_benchmark(video_model, [RetrievalTaskSpec("MSRVTT", str(t2v_task))], tmp_path / "out2")
    assert 0 <= scored["datasets"]["MSRVTT"]["score"] <= 1


def test_uvrb_command_with_a_dual_encoder_checkpoint(tmp_path, tiny_clip, corpus, t2v_task, capsys):
    import yaml

    from lit_retrieval.cli import main

    config = clip_fit_config(
        tiny_clip,
        corpus,
        {
            "max_epochs": 1,
            "limit_train_batches": 2,
            "limit_val_batches": 0,
            "default_root_dir": str(tmp_path / "run"),
            "logger": False,
            "enable_checkpointing": True,
            "callbacks": [
                {
                    "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                    "init_args": {"dirpath": str(tmp_path / "ckpt"), "save_last": True},
                }
            ],
        },
        data={"num_frames": 4, "batch_size": 8},
    )
    path = tmp_path / "clip.yaml"
    path.write_text(yaml.safe_dump(config))
    main(["fit", "--config", str(path)])
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text(
        yaml.safe_dump(
            {
                "root": str(t2v_task.parent),
                "tasks": [{"name": "MSRVTT", "dir": "MSRVTT"}, {"name": "MS-TI", "dir": "MSRVTT"}],
            }
        )
    )
    code = run_command(
        "uvrb",
        [
            "--config",
            str(path),
            "--ckpt",
            str(tmp_path / "ckpt" / "last.ckpt"),
            "--tasks",
            str(tasks),
            "--out",
            str(tmp_path / "uvrb"),
        ],
    )
    assert code == 0
    results = json.loads((tmp_path / "uvrb" / "results.json").read_text())
    assert results["datasets"]["MSRVTT"]["queries"] == 12 and 0 <= results["datasets"]["MSRVTT"]["score"] <= 1
    assert results["datasets"]["MS-TI"]["metric"] == "P@1"
    assert "| MSRVTT | R@1 |" in capsys.readouterr().out


def test_shipped_uvrb_task_list_names_the_16_datasets(tmp_path):
    from pathlib import Path

    from lit_retrieval.uvrb.tasks import read_task_list
    from lit_retrieval.uvrb.datasets import UVRB_DATASETS

    specs = read_task_list(
        str(Path(__file__).resolve().parents[2] / "configs" / "uvrb" / "uvrb.yaml"), str(tmp_path), None
    )
    assert [s.name for s in specs] == list(UVRB_DATASETS)
    assert all(Path(s.dir).parent == tmp_path and s.prompt == UVRB_DATASETS[s.name].prompt for s in specs)


def test_test_time_frames_and_tokens_per_frame(tmp_path, tiny_qwen, t2v_task, capsys):
    """GVE A.12's test-time settings: `--frames K` embeds exactly K frames per video and
    `--max-frame-tokens N` at most N visual tokens per frame (one token per 28 x 28 pixels), counted
    from the processor's video grid (t, h, w in 14-px patches, 2 frames and 2 x 2 patches per token)."""
    video = write_noise_video(tmp_path / "wide.mp4", seconds=12.0, fps=4, width=320, height=240)

    def frames_and_tokens(**settings):
        embedder = load_item_embedder(ModelSpec(model=str(tiny_qwen), **settings)).embedder
        t, h, w = embedder.processing([MediaItem(video=str(video))], None)["video_grid_thw"][0].tolist()
        return 2 * t, h * w // 4

    frames, tokens = frames_and_tokens()  # GVE Sec. 4.1: 8 frames, under 200 tokens (at least 128: qwen-vl-utils)
    assert frames == 8 and 128 <= tokens <= 200
    frames, tokens = frames_and_tokens(frames=4, frame_tokens=16)
    assert frames == 4 and tokens <= 16
    assert frames_and_tokens(frames=12)[0] == 12
    # the command: each setting has its own cache entries
    args = ["--model", str(tiny_qwen), "--tasks", str(tmp_path / "tasks.yaml"), "--batch-size", "4"]
    (tmp_path / "tasks.yaml").write_text(f"root: {t2v_task.parent}\ntasks: [{{name: MSRVTT, dir: MSRVTT}}]\n")
    cache = ["--cache", str(tmp_path / "cache")]
    assert run_command("uvrb", [*args, *cache, "--out", str(tmp_path / "a"), "--frames", "2"]) == 0
    assert run_command("uvrb", [*args, *cache, "--out", str(tmp_path / "b"), "--frames", "4"]) == 0
    assert json.loads((tmp_path / "b" / "results.json").read_text())["cache"] == {"hits": 0, "misses": 2}
    assert run_command("uvrb", [*args, *cache, "--out", str(tmp_path / "c"), "--frames", "2"]) == 0
    assert json.loads((tmp_path / "c" / "results.json").read_text())["cache"] == {"hits": 2, "misses": 0}


def test_the_documented_uvrb_of_a_trained_run_composes_its_configs_or_reads_the_saved_one(
    tmp_path, tiny_clip, corpus, t2v_task
):
    """docs/gve.md's two `uvrb` commands of a trained run, copied from the page: several `--config` files compose
    as `fit` composes them (a second file used to replace the first: the model section was lost), and the
    config.yaml that LightningCLI saved in the run's log folder is accepted alone; both score the same."""
    import yaml

    from lit_retrieval.cli import main

    trainer = {
        "max_epochs": 1,
        "limit_train_batches": 2,
        "limit_val_batches": 0,
        "default_root_dir": str(tmp_path / "run"),
        "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": str(tmp_path)}},
        "callbacks": [
            {
                "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                "init_args": {"dirpath": str(tmp_path / "ckpt"), "save_last": True},
            }
        ],
    }
    config = clip_fit_config(tiny_clip, corpus, trainer, data={"num_frames": 4, "batch_size": 8})
    files = [tmp_path / "train.yaml", tmp_path / "data.yaml", tmp_path / "ties.yaml"]
    files[0].write_text(yaml.safe_dump({k: v for k, v in config.items() if k != "data"}))
    files[1].write_text(yaml.safe_dump({"data": config["data"]}))
    files[2].write_text(yaml.safe_dump({"model": {"init_args": {"evaluation": {"ties": "average"}}}}))
    main(["fit", *(a for f in files for a in ("--config", str(f)))])
    saved = tmp_path / "lightning_logs" / "version_0" / "config.yaml"
    assert saved.is_file()
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text(yaml.safe_dump({"root": str(t2v_task.parent), "tasks": [{"name": "MSRVTT", "dir": "MSRVTT"}]}))
    given = {
        "configs/gve/train.yaml": str(files[0]),
        "configs/gve/model_3b.yaml": str(files[1]),
        "configs/gve/data_3b.yaml": str(files[2]),
        "runs/gve/logs/version_0/config.yaml": str(saved),
        "runs/gve/checkpoints/last.ckpt": str(tmp_path / "ckpt" / "last.ckpt"),
    }
    scores = {}
    for marker, out in (("configs/gve/model_3b.yaml", "composed"), ("logs/version_0/config.yaml", "saved")):
        words = documented_command("docs/gve.md", "uvrb --config", marker)
        assert words[:2] == ["lit-retrieval", "uvrb"]
        args = [given.get(w, str(tmp_path / out) if w == "runs/uvrb/gve3b_lora" else w) for w in words[2:]]
        assert run_command("uvrb", [*args, "--tasks", str(tasks)]) == 0
        scores[out] = json.loads((tmp_path / out / "results.json").read_text())["datasets"]["MSRVTT"]["score"]
    composed = yaml.safe_load((tmp_path / "composed" / "config.yaml").read_text())
    assert composed["model"]["class_path"] == config["model"]["class_path"]
    assert composed["data"]["class_path"] == config["data"]["class_path"]
    assert composed["model"]["init_args"]["evaluation"]["ties"] == "average"
    assert scores["composed"] == scores["saved"]
