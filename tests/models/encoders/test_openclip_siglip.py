"""open_clip and SigLIP backbones (issue 42): tiny models built from configs here, written to local files and
loaded back through `OpenCLIPEncoder` / `SiglipEncoder`; their frame and text features equal the libraries' own
`encode_image` / `encode_text` and `get_image_features` / `get_text_features`; what each backbone cannot host
is refused by name; a LightningCLI fit selects each by `class_path`. Nothing is downloaded: the libraries'
download functions fail the test if called, and the Hugging Face hub is offline."""

from __future__ import annotations

import csv
import json
import math
import sys

import pytest
import torch
import yaml

from helpers.fit_configs import clip_fit_config
from helpers.tiny_towers import (
    OPEN_CLIP_CONFIG,
    OPEN_CLIP_NAME,
    save_tiny_open_clip,
    save_tiny_siglip,
    siglip_tokenizer,
)
from lit_retrieval.errors import ConfigError
from lit_retrieval.models.encoders import OpenCLIPEncoder, SiglipEncoder
from lit_retrieval.models.heads import MeanPHead, SeqTransfHead, TempMeHead, TS2NetHead
from lit_retrieval.modules import DualEncoderRetrieval

TEXTS = ["a red disc!", "a much longer sentence about a blue square moving left", "Person"]
TOLERANCE = {"atol": 1e-5, "rtol": 1e-5}


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """The hub offline, and open_clip's download functions failing the test if called."""
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    try:
        import open_clip.factory
    except ImportError:
        return

    def download(*args, **kwargs):
        raise AssertionError(f"open_clip tried to download: {args} {kwargs}")

    for name in ("download_pretrained", "download_pretrained_from_hf"):
        monkeypatch.setattr(open_clip.factory, name, download)


@pytest.fixture(scope="module")
def tiny_open_clip(tmp_path_factory):
    """(config JSON, checkpoint file, the library's model in eval mode): random weights from the config."""
    pytest.importorskip("open_clip")
    return save_tiny_open_clip(tmp_path_factory.mktemp("open_clip"))


@pytest.fixture(scope="module")
def tiny_siglip(tmp_path_factory):
    """(save_pretrained folder, the library's model loaded from it in eval mode)."""
    return save_tiny_siglip(tmp_path_factory.mktemp("siglip"))


def video_batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Normalised frames `[2, 3, 3, 32, 32]` of two videos, the first with one padded frame."""
    generator = torch.Generator().manual_seed(seed)
    frames = torch.randn(2, 3, 3, 32, 32, generator=generator)
    return frames, torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)


def test_openclip_features_equal_open_clips_own(tiny_open_clip):
    import open_clip

    config, checkpoint, model = tiny_open_clip
    encoder = OpenCLIPEncoder(model=str(config), pretrained=str(checkpoint)).eval()
    frames, mask = video_batch()
    tokenizer = open_clip.get_tokenizer(OPEN_CLIP_NAME)
    with torch.no_grad():
        video = encoder.encode_video(frames, mask, with_patches=True)
        torch.testing.assert_close(video.frames[mask], model.encode_image(frames[mask]), **TOLERANCE)
        assert not video.frames[~mask].any() and not video.patches[~mask].any()
        # patches: every token through ln_post and proj, read here from the visual forward's own token output
        model.visual.output_tokens = True
        _, patch_states = model.visual(frames[mask])
        model.visual.output_tokens = False
        assert video.patches.shape == (2, 3, 16, 32)
        torch.testing.assert_close(video.patches[mask], patch_states @ model.visual.proj, **TOLERANCE)
        text = encoder.encode_text(TEXTS)
        torch.testing.assert_close(text.pooled, model.encode_text(tokenizer(TEXTS)), **TOLERANCE)
    counts = encoder.text_token_counts(TEXTS)
    assert counts == [int(ids.argmax()) + 1 for ids in tokenizer(TEXTS)]  # up to the end of text, the largest id
    assert text.mask.sum(1).tolist() == counts and text.tokens.shape == (3, 77, 32)
    for row, count in enumerate(counts):  # CLIP's argmax pooling: the end-of-text token
        torch.testing.assert_close(text.pooled[row], text.tokens[row, count - 1], **TOLERANCE)
    assert encoder.max_text_len == 77 and encoder.image_size == 32
    assert encoder.backbone_parameter_names() == {n for n, _ in encoder.named_parameters()}
    assert not any("logit" in n for n, _ in encoder.named_parameters())  # the heads keep the temperature
    assert OpenCLIPEncoder(model=str(config)).backbone_parameter_names() == set()  # random init


def test_openclip_loads_nothing_but_local_files(tiny_open_clip, tmp_path):
    config, checkpoint, _ = tiny_open_clip
    refusals = [
        ({"model": "ViT-B-32", "pretrained": "openai"}, "loads local checkpoints only"),
        ({"model": "hf-hub:laion/CLIP-ViT-B-32-laion2B-s34B-b79K"}, "downloads from the Hugging Face hub"),
        ({"model": "no-such-model"}, "neither an open_clip model config name"),
        ({"model": str(config), "pretrained": str(tmp_path / "missing.pt")}, "is not a file"),
        ({"model": "ViT-B-16-SigLIP"}, "give `tokenizer:` a local copy"),
        ({"model": "xlm-roberta-base-ViT-B-32"}, "the Hugging Face model 'xlm-roberta-base'"),
    ]
    shadow = tmp_path / "ViT-B-32.json"  # would replace the built-in config of that name
    shadow.write_text(json.dumps(OPEN_CLIP_CONFIG))
    refusals.append(({"model": str(shadow), "pretrained": str(checkpoint)}, "rename the file"))
    for kwargs, message in refusals:
        with pytest.raises(ConfigError, match=message):
            OpenCLIPEncoder(**kwargs)


def test_openclip_without_the_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "open_clip", None)  # `import open_clip` raises ImportError
    with pytest.raises(ConfigError, match=r"pip install 'lit-retrieval\[openclip\]'"):
        OpenCLIPEncoder(model="ViT-B-32")


def test_openclip_hosts_vision_hooks_and_copies_text_blocks(tiny_open_clip):
    config, checkpoint, model = tiny_open_clip
    frames, mask = video_batch(1)
    plain = OpenCLIPEncoder(model=str(config), pretrained=str(checkpoint), frame_chunk=4).eval()
    hooked = OpenCLIPEncoder(model=str(config), pretrained=str(checkpoint), frame_chunk=4).eval()
    seen = []

    def record(tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        seen.append((tuple(tokens.shape), lengths.tolist()))
        return tokens

    hooked.add_vision_hook(-1, record)
    with torch.no_grad():
        torch.testing.assert_close(hooked.encode_video(frames, mask).frames, plain.encode_video(frames, mask).frames)
    assert seen == [((2, 17, 64), [2]), ((3, 17, 64), [3])]  # whole videos per chunk, class token + 16 patches
    hooked.add_vision_hook(0, lambda tokens, lengths: tokens * 0.5)
    with torch.no_grad():
        assert not torch.allclose(hooked.encode_video(frames, mask).frames, plain.encode_video(frames, mask).frames)

    blocks, positions = plain.text_blocks()  # transformers' CLIPEncoderLayer copies of open_clip's blocks
    states = torch.randn(2, 5, 32)
    with torch.no_grad():
        for layer, block in zip(blocks, model.transformer.resblocks):
            torch.testing.assert_close(layer(states, None), block(states), **TOLERANCE)
    assert positions is plain.model.positional_embedding

    torch.manual_seed(0)
    head = TS2NetHead(select=2, samples=8)  # token shift (hooks), patch selection, text blocks copied
    head.bind(plain)
    with torch.no_grad():
        scores = head.score(
            head.encode_text(plain.encode_text(TEXTS)), head.encode_video(plain.encode_video(frames, mask, True))
        )
    assert scores.shape == (3, 2) and torch.isfinite(scores).all()
    with pytest.raises(ConfigError, match="TempMeHead"):
        plain.set_vision_forward(lambda vision, pixels, lengths: pixels)
    with pytest.raises(ConfigError, match="TempMeHead merges tokens inside Hugging Face CLIP's ViT; OpenCLIPEncoder"):
        TempMeHead().bind(plain)


def test_siglip_features_equal_transformers_own(tiny_siglip):
    folder, model = tiny_siglip
    encoder = SiglipEncoder(pretrained=str(folder)).eval()
    frames, mask = video_batch()
    ids = siglip_tokenizer()(TEXTS, padding="max_length", max_length=16, truncation=True, return_tensors="pt")
    with torch.no_grad():
        video = encoder.encode_video(frames, mask)
        torch.testing.assert_close(
            video.frames[mask], model.get_image_features(pixel_values=frames[mask]).pooler_output, **TOLERANCE
        )
        assert not video.frames[~mask].any()
        text = encoder.encode_text(TEXTS)
        expected = model.get_text_features(input_ids=ids["input_ids"]).pooler_output
        torch.testing.assert_close(text.pooled, expected, **TOLERANCE)
    counts = encoder.text_token_counts(TEXTS)
    assert counts == [5, 11, 2] and text.mask.sum(1).tolist() == counts  # words ('!' unknown) + </s>
    assert text.tokens.shape == (3, 16, 32)  # padded to max_length, as SigLIP was trained
    torch.testing.assert_close(text.pooled, text.tokens[:, -1], **TOLERANCE)  # SigLIP pools the last position
    assert encoder.backbone_parameter_names() == {n for n, _ in encoder.named_parameters()}
    assert not any("logit" in n for n, _ in encoder.named_parameters())


def test_siglip_refuses_what_it_cannot_host(tiny_siglip, tmp_path):
    folder, _ = tiny_siglip
    encoder = SiglipEncoder(pretrained=str(folder))
    frames, mask = video_batch()
    with pytest.raises(ConfigError, match="TS2NetHead, UCoFiAHead"):
        TS2NetHead().bind(encoder)
    with pytest.raises(ConfigError, match="has no patch tokens"):
        encoder.encode_video(frames, mask, with_patches=True)
    with pytest.raises(ConfigError, match="TempMeHead"):  # a schedule for 2 blocks
        TempMeHead(num_frames=3, merge_layers=[1], merge_frames=[3]).bind(SiglipEncoder(pretrained=str(folder)))
    with pytest.raises(ConfigError, match=r"max_text_len must be in 1\.\.16"):
        SiglipEncoder(pretrained=str(folder), max_text_len=64)
    with pytest.raises(ConfigError, match="is not a folder"):
        SiglipEncoder(pretrained=str(tmp_path / "missing"))
    SeqTransfHead().bind(encoder)  # CLIP4Clip's temporal module copies SigLIP's text blocks


@pytest.fixture
def backbone(request):
    """(encoder class, its init_args, data options) of each backbone; SigLIP normalises with 0.5 / 0.5."""
    if request.param == "openclip":
        config, checkpoint, _ = request.getfixturevalue("tiny_open_clip")
        return OpenCLIPEncoder, {"model": str(config), "pretrained": str(checkpoint)}, {}
    folder, _ = request.getfixturevalue("tiny_siglip")
    return SiglipEncoder, {"pretrained": str(folder)}, {"mean": [0.5] * 3, "std": [0.5] * 3}


@pytest.mark.parametrize("backbone", ["openclip", "siglip"], indirect=True)
def test_a_config_fits_meanp_on_the_backbone(backbone, corpus, tmp_path):
    from lit_retrieval.cli import main

    encoder_class, init_args, data = backbone
    encoder_config = {"class_path": f"lit_retrieval.models.encoders.{encoder_class.__name__}", "init_args": init_args}
    trainer = {
        "max_steps": 2,
        "limit_val_batches": 0,
        "log_every_n_steps": 1,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "default_root_dir": str(tmp_path),
        "logger": {
            "class_path": "lightning.pytorch.loggers.CSVLogger",
            "init_args": {"save_dir": str(tmp_path), "name": "logs", "version": "v"},
        },
    }
    # the shared CLIP4Clip-meanP fit config with its CLIPEncoder replaced (no tiny CLIP folder needed)
    config = clip_fit_config(tmp_path, corpus, trainer, model={"encoder": encoder_config}, data=data)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    main(["fit", "--config", str(path)])
    with open(tmp_path / "logs" / "v" / "metrics.csv") as rows:
        losses = [float(row["train/loss"]) for row in csv.DictReader(rows) if row.get("train/loss")]
    assert len(losses) == 2 and all(math.isfinite(loss) for loss in losses)

    # one contrastive step by hand: finite, and a finite gradient reaches every encoder parameter
    module = DualEncoderRetrieval(encoder_class(**init_args), MeanPHead())
    frames, mask = video_batch()
    text, video = module({"events": [[TEXTS[0]], [TEXTS[1]]], "frames": frames, "frame_mask": mask})
    objective = module.objectives.infonce or module.objectives.sigmoid  # SigLIP trains with its sigmoid loss
    loss = objective.loss(module.head.logits(module.head.score(text, video)))
    loss.backward()
    assert math.isfinite(loss.item())
    for name, param in module.encoder.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all() and param.grad.any(), name


def sigmoid_loss_by_hand(similarity: torch.Tensor, scale: float, bias: float) -> float:
    """SigLIP Eq. 1 over every pair: -1/|B| sum_ij log sigmoid(z_ij (t s_ij + b)), z = 1 on the diagonal."""
    size = similarity.shape[0]
    total = 0.0
    for i in range(size):
        for j in range(size):
            z = 1.0 if i == j else -1.0
            total += math.log1p(math.exp(-z * (scale * float(similarity[i, j]) + bias)))
    return total / size


def test_siglip_trains_with_the_sigmoid_loss_from_its_own_temperature_and_bias(tiny_siglip, tmp_path):
    """A SigLIP checkpoint (t' = log 7, b = -3 written into its weights) trains by default with SigLIP's
    Eq. 1 starting from them; the config can start elsewhere, or choose InfoNCE (the head's log 100)."""
    from transformers import SiglipModel

    from lit_retrieval.modules.objectives import ContrastiveConfig

    folder, _ = tiny_siglip
    model = SiglipModel.from_pretrained(folder, local_files_only=True)
    with torch.no_grad():
        model.logit_scale.fill_(math.log(7.0))
        model.logit_bias.fill_(-3.0)
    model.save_pretrained(tmp_path / "siglip")
    siglip_tokenizer().save_pretrained(tmp_path / "siglip")
    torch.manual_seed(0)
    module = DualEncoderRetrieval(SiglipEncoder(pretrained=str(tmp_path / "siglip")), MeanPHead())
    assert module.objectives.infonce is None and module.objectives.sigmoid is not None
    assert module.head.logit_scale.item() == pytest.approx(math.log(7.0), rel=1e-6)
    assert module.objectives.sigmoid.loss.logit_bias.item() == pytest.approx(-3.0)
    frames, mask = video_batch()
    batch = {"events": [[TEXTS[0]], [TEXTS[1]]], "frames": frames, "frame_mask": mask, "video_id": ["a", "b"]}
    out = module.training_step({**batch, "skipped": []}, 0)
    with torch.no_grad():
        similarity = module.head.score(*module(batch))
    assert out["loss_std"].item() == pytest.approx(sigmoid_loss_by_hand(similarity, 7.0, -3.0), rel=1e-5)
    out["loss"].backward()
    assert module.head.logit_scale.grad is not None and module.objectives.sigmoid.loss.logit_bias.grad is not None

    older = {k: v for k, v in module.state_dict().items() if "sigmoid" not in k}  # trained with InfoNCE before
    DualEncoderRetrieval(SiglipEncoder(pretrained=str(tmp_path / "siglip")), MeanPHead()).load_state_dict(older)

    chosen = ContrastiveConfig(logit_scale_init=2.0, logit_bias_init=-5.0)
    module = DualEncoderRetrieval(SiglipEncoder(pretrained=str(tmp_path / "siglip")), MeanPHead(), contrastive=chosen)
    assert module.head.logit_scale.item() == 2.0 and module.objectives.sigmoid.loss.logit_bias.item() == -5.0
    infonce = ContrastiveConfig(loss="infonce")
    module = DualEncoderRetrieval(SiglipEncoder(pretrained=str(tmp_path / "siglip")), MeanPHead(), contrastive=infonce)
    assert module.objectives.sigmoid is None and module.head.logit_scale.item() == pytest.approx(math.log(100.0))


def test_an_open_clip_model_with_a_logit_bias_trains_with_the_sigmoid_loss(tiny_open_clip, tmp_path):
    """open_clip's SigLIP-style models carry `init_logit_bias` in their config: the encoder records the
    model's t' and b, and the module starts its sigmoid loss from them; without a bias it stays InfoNCE."""
    config, _, _ = tiny_open_clip
    biased = tmp_path / "lit-retrieval-tiny-openclip-siglip.json"
    biased.write_text(json.dumps({**OPEN_CLIP_CONFIG, "init_logit_scale": math.log(10.0), "init_logit_bias": -10.0}))
    module = DualEncoderRetrieval(OpenCLIPEncoder(model=str(biased)), MeanPHead())
    assert module.objectives.sigmoid is not None
    assert module.head.logit_scale.item() == pytest.approx(math.log(10.0))
    assert module.objectives.sigmoid.loss.logit_bias.item() == -10.0
    plain = DualEncoderRetrieval(OpenCLIPEncoder(model=str(config)), MeanPHead())
    assert plain.objectives.infonce is not None and plain.objectives.sigmoid is None


def test_unreadable_configs_checkpoints_and_folders_are_one_config_error(tiny_open_clip, tmp_path):
    """Issue 56, item 5: each was three chained tracebacks (exit 1)."""
    config, _, _ = tiny_open_clip
    for name, content, message in (
        ("bad.json", b"{not json", "is not a JSON model config"),
        ("latin.json", '{"caf\u00e9": 1}'.encode("latin-1"), "is not a JSON model config"),
        ("list.json", b"[1, 2]", "is not an open_clip model config"),
    ):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ConfigError, match=rf"{name} {message}"):
            OpenCLIPEncoder(model=str(tmp_path / name))
    (tmp_path / "notes.pt").write_text("not a checkpoint")
    with pytest.raises(ConfigError, match=r"notes\.pt cannot be loaded as an open_clip checkpoint"):
        OpenCLIPEncoder(model=str(config), pretrained=str(tmp_path / "notes.pt"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"empty is not a SiglipModel folder"):
        SiglipEncoder(pretrained=str(tmp_path / "empty"))
