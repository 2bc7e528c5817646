"""GVE embedder on a tiny random Qwen2.5-VL: pooling, LoRA placement, every input format, frame
sampling, token cap, and equality with plain transformers for a released (merged) checkpoint."""

from __future__ import annotations

import importlib.machinery
import importlib.util

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

from lit_retrieval.data.items import ItemError, MediaItem
from lit_retrieval.errors import ConfigError
from lit_retrieval.data.media.video import VideoDecodeError
from lit_retrieval.models.gve import InputConfig, AdapterConfig, last_token_pool
from lit_retrieval.models.gve.embedder import resolve_attention, resolve_dtype
from helpers.gve_embedder import SMALL, embedder, items, media, perturb_lora  # noqa: F401 (media: a fixture)
from helpers.media import full_decode
from helpers.mrope_reference import batch_reference_positions


def test_last_token_pool_takes_last_attended_position():
    hidden = torch.arange(2 * 5 * 1, dtype=torch.float).reshape(2, 5, 1)
    right = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    left = torch.tensor([[0, 0, 1, 1, 1], [0, 1, 1, 1, 1]])
    assert last_token_pool(hidden, right).flatten().tolist() == [2.0, 9.0]
    assert last_token_pool(hidden, left).flatten().tolist() == [4.0, 9.0]


def test_pooled_token_is_end_of_text_and_padding_side_does_not_matter(tiny_qwen, media):  # noqa: F811
    model = embedder(tiny_qwen, lora=None).eval()
    batch = model.process(items(media), "Find the video.")
    eod = model.processing.tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert batch["input_ids"][:, -1].tolist() == [eod] * 5  # left padding: the last column
    with torch.no_grad():
        left = model(batch)
        right_model = embedder(
            tiny_qwen, lora=None, inputs=InputConfig(**{**SMALL.__dict__, "padding_side": "right"})
        ).eval()
        right_batch = right_model.process(items(media), "Find the video.")
        right = right_model(right_batch)
        single = torch.cat([model(model.process([item], "Find the video.")) for item in items(media)])
    lengths = right_batch["attention_mask"].sum(1)
    assert (right_batch["input_ids"][torch.arange(5), lengths - 1] == eod).all()
    torch.testing.assert_close(left, right, atol=1e-5, rtol=0)
    torch.testing.assert_close(left, single, atol=1e-5, rtol=0)
    torch.testing.assert_close(left.norm(dim=-1), torch.ones(5))


def test_lora_touches_only_language_model_projections(tiny_qwen):
    model = embedder(tiny_qwen, lora=AdapterConfig())
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n and ".language_model." in n for n in trainable)
    wrapped = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in trainable}
    assert wrapped == {"q_proj", "k_proj", "v_proj", "up_proj", "down_proj", "gate_proj"}
    layers = model.base_model.config.text_config.num_hidden_layers
    assert len(trainable) == layers * 6 * 2  # A and B per wrapped projection
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    assert any(".visual." in n for n in frozen) and any("embed_tokens" in n for n in frozen)
    assert not any(".visual." in n and "lora_" in n for n, _ in model.named_parameters())
    lora = model.base_model.model.language_model.layers[0].self_attn.q_proj
    assert lora.r["default"] == 16 and lora.scaling["default"] == 2.0 and lora.lora_dropout["default"].p == 0.1


def test_every_input_format_embeds_with_right_video_geometry(tiny_qwen, media):  # noqa: F811
    model = embedder(tiny_qwen, lora=AdapterConfig(r=4))
    batch = model.process(items(media))
    video_pad = model.processing.tokenizer.convert_tokens_to_ids("<|video_pad|>")
    grids = batch["video_grid_thw"]
    assert int((batch["input_ids"] == video_pad).sum()) == int(grids.prod(-1).sum()) // 4
    assert batch["pixel_values_videos"].shape[0] == int(grids.prod(-1).sum())
    assert "mm_token_type_ids" in batch  # transformers 5 builds 3-D M-RoPE positions from it
    # max_frames 4 (min_frames 32 above it): 4 of the 48 frames (8 fps), 4 of the 25 frames in [1 s, 4 s];
    # sampled fps = 4 / frames in the window x 8
    assert grids[:, 0].tolist() == [2, 2]
    torch.testing.assert_close(batch["second_per_grid_ts"].float(), torch.tensor([2 / (4 / 48 * 8), 2 / (4 / 25 * 8)]))
    out = model(batch)
    assert out.shape == (5, model.dim) and torch.isfinite(out).all()
    assert len({tuple(row.tolist()) for row in out.round(decimals=5)}) == 5


@pytest.mark.parametrize(("seconds", "frames"), [(0.4, 2), (3.5, 2), (5.0, 4), (7.9, 6), (60.0, 8)])
def test_frame_count_rounds_to_temporal_patches(tiny_qwen, seconds, frames):
    """qwen-vl-utils' smart_nframes worked by hand: with min_frames 2, fps x seconds floored to even
    within [2, 8]; with the authors' min_frames 32 (the default) always max_frames."""
    model = embedder(tiny_qwen, lora=None, inputs=InputConfig(min_frames=2))
    assert model.processing.frame_count(seconds) == frames
    assert embedder(tiny_qwen, lora=None, inputs=InputConfig()).processing.frame_count(seconds) == 8


def test_over_long_text_is_cut_to_the_cap_and_counted(tiny_qwen, media):  # noqa: F811
    cap = InputConfig(**{**SMALL.__dict__, "max_tokens": 120})
    model = embedder(tiny_qwen, lora=None, inputs=cap)
    long = MediaItem(text="word " * 200, video=media["video"])
    with pytest.warns(UserWarning, match="truncated"):
        batch = model.process([long, MediaItem(text="short")])
    assert batch["input_ids"].shape[1] == 120 and model.processing.truncated == 1
    assert batch["input_ids"][0, -1] == model.processing.tokenizer.convert_tokens_to_ids("<|endoftext|>")
    tight = embedder(tiny_qwen, lora=None, inputs=InputConfig(**{**SMALL.__dict__, "max_tokens": 20}))
    with pytest.raises(ItemError, match="even without its text"):
        tight.process([MediaItem(text="x", video=media["video"])])


def test_bad_media_errors_name_the_file(tiny_qwen, media, tmp_path):  # noqa: F811
    model = embedder(tiny_qwen, lora=None)
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(b"\x00" * 500)
    with pytest.raises(VideoDecodeError, match="broken.mp4"):
        model.process([MediaItem(video=str(broken))])
    bad_image = tmp_path / "bad.png"
    bad_image.write_text("not an image")
    with pytest.raises(ItemError, match="bad.png"):
        model.process([MediaItem(image=str(bad_image))])


def plain_transformers_embeddings(path, texts_and_videos, instruction):
    """The released-model recipe with transformers alone (prompt, <|endoftext|>, last token: GVE A.7)."""
    from transformers.video_utils import VideoMetadata

    processor = AutoProcessor.from_pretrained(str(path))
    processor.tokenizer.padding_side = "left"
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(
        str(path), dtype=torch.float32, attn_implementation="sdpa"
    ).eval()
    prompts, videos, metadata = [], [], []
    for text, video in texts_and_videos:
        content = ([{"type": "video"}] if video else []) + [{"type": "text", "text": text}]
        messages = [{"role": "system", "content": instruction}, {"role": "user", "content": content}]
        prompts.append(
            processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + "<|endoftext|>"
        )
        if video:
            frames = full_decode(video)[1]  # 48 frames at 8 fps; qwen-vl-utils: round(linspace(0, 47, 4))
            videos.append(frames[np.round(np.linspace(0, len(frames) - 1, 4)).astype(int)])
            metadata.append(VideoMetadata(total_num_frames=4, fps=4 / len(frames) * 8, frames_indices=list(range(4))))
    size = {"shortest_edge": SMALL.video_min_pixels, "longest_edge": SMALL.video_max_pixels}
    batch = processor(
        text=prompts,
        videos=videos,
        padding=True,
        return_tensors="pt",
        videos_kwargs={
            "do_sample_frames": False,
            "video_metadata": metadata,
            "size": size,
            "cap_pixels_per_frame": True,
        },
    )
    positions = batch_reference_positions(batch, model.config)  # the release-era M-RoPE rule GVE was trained with
    with torch.no_grad():
        hidden = model(**batch, position_ids=torch.tensor(positions), output_hidden_states=True).hidden_states[-1]
    return F.normalize(hidden[:, -1].float(), dim=-1)


def test_released_checkpoint_embeds_as_with_plain_transformers(tiny_qwen, media, tmp_path):  # noqa: F811
    trained = embedder(tiny_qwen, lora=AdapterConfig(r=4))
    perturb_lora(trained)
    release = tmp_path / "gve_release"
    trained.save_merged(release)
    cases = [("a dog on a beach", None), ("what happens here", media["video"])]
    ours = embedder(release, lora=None).embed([MediaItem(text=t, video=v) for t, v in cases], "Find the video.")
    reference = plain_transformers_embeddings(release, cases, "Find the video.")
    torch.testing.assert_close(ours, reference, atol=1e-5, rtol=0)
    with torch.no_grad():  # the merged release equals the adapter it came from
        torch.testing.assert_close(
            trained.embed([MediaItem(text=t, video=v) for t, v in cases], "Find the video."), ours, atol=1e-5, rtol=0
        )


def test_adapter_saves_alone_and_reloads(tiny_qwen, media, tmp_path):  # noqa: F811
    trained = embedder(tiny_qwen, lora=AdapterConfig(r=4))
    perturb_lora(trained, seed=3)
    trained.save_adapter(tmp_path / "adapter")
    saved = sorted(p.name for p in (tmp_path / "adapter").iterdir())
    assert {"adapter_config.json", "adapter_model.safetensors"} <= set(saved) and "model.safetensors" not in saved
    reloaded = embedder(tiny_qwen, lora=None, adapter_path=str(tmp_path / "adapter"))
    probe = items(media)[:3]
    torch.testing.assert_close(trained.embed(probe), reloaded.embed(probe), atol=1e-6, rtol=0)
    assert not any(p.requires_grad for p in reloaded.parameters())


def test_release_in_the_old_key_layout_with_a_custom_class_name_loads(tiny_qwen, media, tmp_path):  # noqa: F811
    """GVE's hub checkpoints use the pre-4.52 layout (`model.layers.*`, `visual.*`) and name the
    remote class `Qwen25VLForEmbedding`; the native class must load them without remote code."""
    import json
    import re
    import shutil

    from safetensors.torch import load_file, save_file

    release = tmp_path / "gve_hub_layout"
    shutil.copytree(tiny_qwen, release)
    weights = load_file(str(tiny_qwen / "model.safetensors"))
    renamed = {
        re.sub(r"^model\.language_model", "model", re.sub(r"^model\.visual", "visual", k)): v
        for k, v in weights.items()
    }
    assert "visual.patch_embed.proj.weight" in renamed and "model.layers.0.mlp.up_proj.weight" in renamed
    save_file(renamed, str(release / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((release / "config.json").read_text())
    config.update(architectures=["Qwen25VLForEmbedding"], auto_map={"AutoModel": "modeling_gve.Qwen25VLForEmbedding"})
    (release / "config.json").write_text(json.dumps(config))
    probe = items(media)[:3]
    torch.testing.assert_close(
        embedder(release, lora=None).embed(probe), embedder(tiny_qwen, lora=None).embed(probe), atol=0, rtol=0
    )


# ---- dtype and attention `auto`: resolved from where the model runs (issue 57, item 3) ----------
@pytest.fixture
def gpu_node_with_flash_attn(monkeypatch):
    """A node with a bf16-capable GPU and flash-attn installed, as torch and importlib report them
    (neither is here: both are faked)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    find_spec = importlib.util.find_spec
    flash = importlib.machinery.ModuleSpec("flash_attn", None)
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: flash if name == "flash_attn" else find_spec(name, *a)
    )


def test_auto_resolves_from_the_target_device_and_dtype_not_from_a_visible_gpu(gpu_node_with_flash_attn):
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert resolve_dtype("auto", cpu) == torch.float32
    assert resolve_dtype("auto", cuda) == torch.bfloat16
    assert resolve_attention("auto", cpu, torch.float32) == "sdpa"
    assert resolve_attention("auto", cpu, torch.bfloat16) == "sdpa"
    assert resolve_attention("auto", cuda, torch.bfloat16) == "flash_attention_2"
    # flash-attention computes in fp16/bf16 only: float32 weights never get it
    assert resolve_attention("auto", cuda, torch.float32) == "sdpa"
    assert resolve_attention("eager", cuda, torch.bfloat16) == "eager"  # an explicit choice is kept


def test_a_cpu_placed_model_on_a_gpu_node_loads_fp32_with_sdpa(tiny_qwen, media, gpu_node_with_flash_attn):  # noqa: F811
    """`index`/`uvrb`/`serve`/`mine-negatives --device cpu` (their default) on a GPU node with flash-attn:
    the model they place on the CPU loads in float32 with SDPA and embeds (flash-attention there failed
    at its first forward)."""
    from lit_retrieval.search.loading import ModelSpec, load_item_embedder

    loaded = load_item_embedder(ModelSpec(model=str(tiny_qwen), device="cpu")).embedder
    assert loaded.base_model.config._attn_implementation == "sdpa"
    assert {p.dtype for p in loaded.parameters()} == {torch.float32}
    out = loaded.embed(items(media)[:2], "Find the video.")
    assert out.shape == (2, loaded.dim) and torch.isfinite(out).all()


def test_a_module_built_from_a_config_inside_placed_on_follows_that_device(tiny_qwen, gpu_node_with_flash_attn):
    """A GVE training config that `search.loading` builds for `--device cpu` (through the config parser)."""
    from lit_retrieval.models.gve.embedder import placed_on
    from lit_retrieval.modules.gve import EmbedderConfig

    with placed_on("cpu"):
        built = EmbedderConfig(str(tiny_qwen), lora=None, gradient_checkpointing=False).build()
    assert built.base_model.config._attn_implementation == "sdpa"
    assert {p.dtype for p in built.parameters()} == {torch.float32}


def test_full_training_trains_every_weight_and_refuses_lora(tiny_qwen):
    full = embedder(tiny_qwen, lora=None, full_training=True)
    names = [n for n, _ in full.named_parameters()]
    assert any(".visual." in n for n in names) and any("embed_tokens" in n for n in names)
    assert all(p.requires_grad for p in full.parameters())
    with pytest.raises(ConfigError, match="full_training"):
        embedder(tiny_qwen, lora=AdapterConfig(r=4), full_training=True)


def test_base_checkpoint_loads_a_full_run_as_transformers_loads_its_weights(tiny_qwen, media, tmp_path):  # noqa: F811
    """A full-training checkpoint (Lightning layout, every weight under `embedder.model.`) used as
    the base equals, embedding for embedding, the same weights saved and loaded by transformers."""
    import shutil

    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(tiny_qwen), dtype=torch.float32)
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.05)
    reference_dir = tmp_path / "trained_base"
    shutil.copytree(tiny_qwen, reference_dir)
    model.save_pretrained(str(reference_dir))
    ckpt = tmp_path / "base.ckpt"
    torch.save({"state_dict": {f"embedder.model.{k}": v for k, v in model.state_dict().items()}}, ckpt)
    probe = items(media)[:3]
    based = embedder(tiny_qwen, lora=None, base_checkpoint=str(ckpt))
    torch.testing.assert_close(based.embed(probe), embedder(reference_dir, lora=None).embed(probe), atol=1e-5, rtol=0)
    assert not torch.allclose(based.embed(probe), embedder(tiny_qwen, lora=None).embed(probe), atol=1e-3)
    with_lora = embedder(tiny_qwen, lora=AdapterConfig(r=4), base_checkpoint=str(ckpt))  # LoRA B = 0: the base
    torch.testing.assert_close(with_lora.embed(probe), based.embed(probe), atol=1e-5, rtol=0)
    assert all(".lora_" in n for n, p in with_lora.named_parameters() if p.requires_grad)


def test_base_checkpoint_without_every_weight_is_refused(tiny_qwen, tmp_path):
    lora_only = tmp_path / "lora.ckpt"
    torch.save({"state_dict": {"embedder.model.base_model.model.lora_A.weight": torch.zeros(1)}}, lora_only)
    with pytest.raises(ConfigError, match=r"lora\.ckpt lacks \d+ .*embedder\.full_training"):
        embedder(tiny_qwen, lora=None, base_checkpoint=str(lora_only))
    not_ckpt = tmp_path / "notes.txt"
    not_ckpt.write_text("hello")
    with pytest.raises(ConfigError, match=r"notes\.txt is not a Lightning checkpoint"):
        embedder(tiny_qwen, lora=None, base_checkpoint=str(not_ckpt))
