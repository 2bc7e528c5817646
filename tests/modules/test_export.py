"""`lit-retrieval export-dual-encoder` (issue 54): a trained CLIP4Clip-meanP on CLIP, SigLIP and open_clip towers
leaves as the towers in their own library's format, loaded here by that library alone in a fresh interpreter
that never imports lit_retrieval: its text and frame embeddings and meanP's retrieval scores equal the
project's; the head's parameters load with safetensors; the model card is read by huggingface_hub's own
`ModelCard`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import yaml

from helpers.fit_configs import clip_fit_config
from helpers.tiny_towers import save_tiny_open_clip, save_tiny_siglip
from lit_retrieval.cli import main

TEXTS = ["a red disc moving left " * 12, "the blue square", "a person"]  # the first past 77 tokens

# Run by the tower's library alone (argv: library, towers folder, inputs .pt, output .pt, max text length).
OUTSIDE = r"""
import sys
import torch
import torch.nn.functional as F

library, towers, inputs, output, max_len = sys.argv[1:6]
data = torch.load(inputs)
frames, texts = data["frames"], data["texts"]  # [V, T, 3, S, S] normalised, every frame valid
with torch.no_grad():
    if library == "open_clip":
        import open_clip

        model = open_clip.create_model("local-dir:" + towers).eval()
        tokenizer = open_clip.get_tokenizer("local-dir:" + towers)
        text = model.encode_text(tokenizer(texts))
        image = model.encode_image(frames.flatten(0, 1))
    else:
        from transformers import AutoModel, AutoTokenizer

        model = AutoModel.from_pretrained(towers, local_files_only=True).eval()
        tokenizer = AutoTokenizer.from_pretrained(towers, local_files_only=True)
        if model.config.model_type == "siglip":  # padded to max_length, no mask, as SigLIP is run
            ids = tokenizer(texts, padding="max_length", truncation=True, max_length=int(max_len), return_tensors="pt")
            text = model.get_text_features(input_ids=ids["input_ids"]).pooler_output
        else:
            ids = tokenizer(texts, padding=True, truncation=True, max_length=int(max_len), return_tensors="pt")
            text = model.get_text_features(**ids).pooler_output
        image = model.get_image_features(pixel_values=frames.flatten(0, 1)).pooler_output
image = image.reshape(*frames.shape[:2], -1)
video = F.normalize(F.normalize(image, dim=-1).mean(1), dim=-1)  # meanP
scores = F.normalize(text, dim=-1) @ video.t()
assert "lit_retrieval" not in sys.modules
torch.save({"text": text, "frames": image, "scores": scores, "logit_scale": float(model.logit_scale)}, output)
"""


def outside(library: str, towers, inputs, output, max_len: int, cwd) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HF_HUB_OFFLINE"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", OUTSIDE, library, str(towers), str(inputs), str(output), str(max_len)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(output)


@pytest.fixture
def encoder_config(request, tmp_path_factory, tiny_clip):
    """The encoder section of the config of each backbone."""
    if request.param in ("clip", "longclip"):  # Long-CLIP: positions stretched past the checkpoint's
        stretched = {"max_text_len": 100} if request.param == "longclip" else {}
        init_args = {"pretrained": str(tiny_clip), **stretched}
        return {"class_path": "lit_retrieval.models.encoders.CLIPEncoder", "init_args": init_args}
    if request.param == "siglip":
        folder, _ = save_tiny_siglip(tmp_path_factory.mktemp("siglip"))
        return {"class_path": "lit_retrieval.models.encoders.SiglipEncoder", "init_args": {"pretrained": str(folder)}}
    pytest.importorskip("open_clip")
    config, checkpoint, _ = save_tiny_open_clip(tmp_path_factory.mktemp("open_clip"))
    return {
        "class_path": "lit_retrieval.models.encoders.OpenCLIPEncoder",
        "init_args": {"model": str(config), "pretrained": str(checkpoint)},
    }


@pytest.mark.parametrize("encoder_config", ["clip", "longclip", "siglip", "openclip"], indirect=True)
def test_an_exported_meanp_loads_with_its_towers_library_alone(encoder_config, corpus, tmp_path, capsys):
    from huggingface_hub import ModelCard
    from safetensors.torch import load_file

    from lit_retrieval.retrieval_cli import build_module

    trainer = {"logger": False, "enable_progress_bar": False, "default_root_dir": str(tmp_path)}
    config = clip_fit_config(tmp_path, corpus, trainer, model={"encoder": encoder_config})
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    # a "trained" checkpoint: the config's initial weights moved, the temperature changed
    module, _ = build_module(str(tmp_path / "config.yaml"))
    torch.manual_seed(1)
    with torch.no_grad():
        for param in module.parameters():
            param.add_(0.01 * torch.randn_like(param))
        module.head.logit_scale.fill_(3.25)
    torch.save({"state_dict": module.state_dict()}, tmp_path / "trained.ckpt")
    metrics = {"test": {"t2v/R@1": 41.5, "t2v/R@5": 70.25, "skipped_videos": 0}}
    (tmp_path / "metrics.json").write_text(json.dumps(metrics))

    out = tmp_path / "export"
    argv = ["export-dual-encoder", str(out), "--config", str(tmp_path / "config.yaml"), "--ckpt"]
    with pytest.raises(SystemExit) as done:
        main([*argv, str(tmp_path / "trained.ckpt"), "--metrics", str(tmp_path / "metrics.json")])
    assert done.value.code == 0
    settings = json.loads((out / "head_config.json").read_text())
    library = settings["towers"]["library"]

    module = module.eval()
    generator = torch.Generator().manual_seed(2)
    frames = torch.randn(2, 3, 3, 32, 32, generator=generator)
    torch.save({"frames": frames, "texts": TEXTS}, tmp_path / "inputs.pt")
    got = outside(
        library, out / "towers", tmp_path / "inputs.pt", tmp_path / "out.pt", settings["text"]["max_length"], tmp_path
    )
    with torch.no_grad():
        text = module.encoder.encode_text(TEXTS)
        video = module.encoder.encode_video(frames, torch.ones(2, 3, dtype=torch.bool))
        scores = module.head.score(module.head.encode_text(text), module.head.encode_video(video))
    tolerance = {"atol": 1e-5, "rtol": 1e-5}
    torch.testing.assert_close(got["text"], text.pooled, **tolerance)
    torch.testing.assert_close(got["frames"], video.frames, **tolerance)
    torch.testing.assert_close(got["scores"], scores, **tolerance)
    assert got["logit_scale"] == pytest.approx(3.25)

    head = load_file(out / "head.safetensors")
    assert set(head) == {"logit_scale"} and head["logit_scale"].item() == pytest.approx(3.25)
    card = ModelCard.load(out / "README.md")
    assert card.data.library_name == library and "video-text-retrieval" in card.data.tags
    results = card.data.eval_results
    assert {(r.metric_type, r.metric_value) for r in results} == {
        ("t2v/R@1", 41.5),
        ("t2v/R@5", 70.25),
        ("skipped_videos", 0.0),
    }
    assert "## Training config" in card.text and "MeanPHead" in card.text


def test_export_refuses_a_used_output_folder(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("")
    with pytest.raises(SystemExit) as done:
        main(["export-dual-encoder", str(tmp_path / "out"), "--config", str(tmp_path / "c.yaml")])
    assert done.value.code == 2
