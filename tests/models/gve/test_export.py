"""`lit-retrieval export-gve`: a real GVE training checkpoint -> a directory in the released
Qwen2.5-VL layout, loaded back with plain transformers (`Qwen2_5_VLForConditionalGeneration` +
`AutoProcessor`) and embedding as the training module does. The 4.5x side is checked outside CI
(benchmarks/gve_export_versions.py; docs/gve.md)."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
import yaml
from safetensors import safe_open
from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

from lit_retrieval.commands import run_command
from lit_retrieval.data.items import MediaItem
from lit_retrieval.errors import UsageError
from lit_retrieval.models.gve.processing import GVEProcessing
from helpers.mrope_reference import batch_reference_positions


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_qwen, gve_tasks):
    """A 2-step GVE fit on T->V and TV->V with LoRA; its config and last checkpoint."""
    from lit_retrieval.cli import main

    root = tmp_path_factory.mktemp("gve_export_fit")
    config = yaml.safe_load(open("configs/gve/tiny_cpu.yaml"))
    config["trainer"].update(max_epochs=1, default_root_dir=str(root), limit_val_batches=0, logger=False)
    checkpoint = {"dirpath": str(root / "checkpoints"), "save_last": True, "save_top_k": 0}
    callback = "lightning.pytorch.callbacks.ModelCheckpoint"
    config["trainer"]["callbacks"] = [{"class_path": callback, "init_args": checkpoint}]
    model = config["model"]["init_args"]
    model["embedder"]["model_path"] = str(tiny_qwen)
    model["embedder"]["inputs"]["max_frames"] = 2
    model["optim"]["head_lr"] = 0.05  # LoRA B leaves zero: the merged model must differ from the base
    data = config["data"]["init_args"]
    paths = {s.name: s.path for s in gve_tasks["train"]}
    kept = [t for t in data["tasks"] if t["name"] in ("syn_t2v", "syn_tv2v")]
    tasks = [{**t, "path": paths[t["name"]], "batch_size": 4} for t in kept]
    data.update(steps_per_epoch=2, num_workers=0, val_tasks=[], tasks=tasks)
    path = root / "gve.yaml"
    path.write_text(yaml.safe_dump(config))
    main(["fit", "--config", str(path)])
    return {"config": path, "ckpt": root / "checkpoints" / "last.ckpt", "root": root}


def probe_items(corpus) -> list[MediaItem]:
    video = str(sorted(corpus.rglob("*.mp4"))[0])
    return [
        MediaItem(text="a red circle moves right"),
        MediaItem(video=video),
        MediaItem(text="then it stops", video=video),
    ]


def plain_transformers_embeddings(path, batch) -> torch.Tensor:
    """Embeddings with transformers alone: the released model class, last token, release-era positions."""
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(
        str(path), dtype=torch.float32, attn_implementation="sdpa"
    )
    model.eval()
    positions = batch_reference_positions(batch, model.config)
    with torch.no_grad():
        hidden = model(**batch, position_ids=torch.tensor(positions), output_hidden_states=True).hidden_states[-1]
    return F.normalize(hidden[:, -1].float(), dim=-1)


@pytest.mark.slow
def test_exported_directory_loads_with_plain_transformers_and_embeds_as_the_module(trained, corpus, tmp_path):
    from lit_retrieval.retrieval_cli import build_module
    from lit_retrieval.search.loading import load_checkpoint_weights

    out = tmp_path / "export"
    assert run_command("export-gve", [str(trained["ckpt"]), str(out)]) == 0
    module, _ = build_module(str(trained["config"]))
    load_checkpoint_weights(module, str(trained["ckpt"]))
    embedder = module.embedder.eval()
    items = probe_items(corpus)
    batch = embedder.process(items, "Find the video clip.")
    with torch.no_grad():
        expected = embedder(batch)
    # the exported processor builds the same model inputs as the training module's
    processing = GVEProcessing(AutoProcessor.from_pretrained(str(out)), embedder.processing.config)
    exported = processing(items, "Find the video clip.")
    assert set(exported) == set(batch)
    for key, value in batch.items():
        assert torch.equal(exported[key], value), key
    torch.testing.assert_close(plain_transformers_embeddings(out, batch), expected, atol=1e-5, rtol=0)
    base = plain_transformers_embeddings(module.embedder.model_path, batch)
    assert (base - expected).abs().max() > 1e-3  # the LoRA really is merged in
    # the same export from the training config
    again = tmp_path / "export_from_config"
    assert run_command("export-gve", [str(trained["ckpt"]), str(again), "--config", str(trained["config"])]) == 0
    torch.testing.assert_close(plain_transformers_embeddings(again, batch), expected, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_exported_files_follow_the_released_qwen25vl_layout(trained, tmp_path):
    """What transformers 4.5x needs (the layout of the released Qwen2.5-VL / GVE hub configs)."""
    out = tmp_path / "export"
    run_command("export-gve", [str(trained["ckpt"]), str(out)])
    config = json.loads((out / "config.json").read_text())
    assert "text_config" not in config and "rope_parameters" not in config and "dtype" not in config
    assert config["architectures"] == ["Qwen2_5_VLForConditionalGeneration"] and config["model_type"] == "qwen2_5_vl"
    assert config["hidden_size"] == 32 and config["num_hidden_layers"] == 2 and config["vocab_size"] > 0
    assert config["rope_scaling"] == {"type": "mrope", "mrope_section": [2, 1, 1]}
    assert config["torch_dtype"] == "float32"
    assert config["vision_config"]["tokens_per_second"] == 2
    image = json.loads((out / "preprocessor_config.json").read_text())
    assert image["image_processor_type"] == "Qwen2VLImageProcessor"
    assert image["processor_class"] == "Qwen2_5_VLProcessor"
    assert (image["min_pixels"], image["max_pixels"]) == (image["size"]["shortest_edge"], image["size"]["longest_edge"])
    video = json.loads((out / "video_preprocessor_config.json").read_text())
    assert video["video_processor_type"] == "Qwen2VLVideoProcessor"
    assert not (out / "processor_config.json").exists()
    tokenizer = json.loads((out / "tokenizer_config.json").read_text())
    assert "<|endoftext|>" in tokenizer["additional_special_tokens"] and "extra_special_tokens" not in tokenizer
    assert "<|im_start|>assistant" in (out / "chat_template.jinja").read_text()
    with safe_open(str(out / "model.safetensors"), "pt") as weights:
        keys = list(weights.keys())
    assert any(k.startswith("model.layers.") for k in keys) and any(k.startswith("visual.") for k in keys)
    assert not any("language_model" in k or "lora_" in k for k in keys)
    model, info = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(out), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert model.config.text_config.rope_parameters["mrope_section"] == [2, 1, 1]


def test_bad_inputs_are_refused(tmp_path):
    with pytest.raises(UsageError, match="DeepSpeed"):
        run_command("export-gve", [str(tmp_path), str(tmp_path / "out")])
    bare = tmp_path / "bare.ckpt"
    torch.save({"state_dict": {}}, bare)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(UsageError, match="not an empty directory"):
        run_command("export-gve", [str(bare), str(tmp_path / "full")])
    with pytest.raises(UsageError, match="--config"):
        run_command("export-gve", [str(bare), str(tmp_path / "out")])


def test_release_config_flattens_by_hand_and_refuses_conflicts():
    """A transformers-5 config written by hand -> the released layout (Qwen2.5-VL hub config.json)."""
    from lit_retrieval.models.gve.export import release_config

    rope = {"rope_type": "default", "mrope_section": [16, 24, 24], "rope_theta": 1e6}
    text = {
        "model_type": "qwen2_5_vl_text",
        "hidden_size": 2048,
        "tie_word_embeddings": True,
        "pad_token_id": None,
        "layer_types": ["full_attention"],
        "use_cache": True,
        "rope_parameters": rope,
    }
    saved = {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "model_type": "qwen2_5_vl",
        "dtype": "bfloat16",
        "image_token_id": 7,
        "tie_word_embeddings": True,
        "use_cache": False,
        "vision_config": {"depth": 2},
        "text_config": text,
    }
    assert release_config(saved) == {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "model_type": "qwen2_5_vl",
        "image_token_id": 7,
        "tie_word_embeddings": True,
        "use_cache": True,
        "vision_config": {"depth": 2},
        "hidden_size": 2048,
        "pad_token_id": None,
        "rope_theta": 1e6,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
        "torch_dtype": "bfloat16",
    }
    with pytest.raises(ValueError, match="tie_word_embeddings"):
        release_config({**saved, "tie_word_embeddings": False})
    with pytest.raises(ValueError, match="mrope_section"):
        release_config({**saved, "text_config": {"rope_parameters": {"rope_type": "default"}}})
