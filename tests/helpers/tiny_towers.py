"""Tiny open_clip and SigLIP models built from configs and written to local files (random weights, nothing
downloaded), for the backbone tests and the export tests."""

from __future__ import annotations

import json
from pathlib import Path

import torch

# our name for the tiny config in open_clip's registry (a JSON file's stem); QuickGELU as OpenAI's CLIP
OPEN_CLIP_NAME = "lit-retrieval-tiny-openclip"
OPEN_CLIP_CONFIG = {
    "embed_dim": 32,
    "quick_gelu": True,
    "vision_cfg": {"image_size": 32, "patch_size": 8, "width": 64, "layers": 2, "head_width": 32},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2},
}
SIGLIP_WORDS = "a an the red blue green disc square moving left right much longer sentence about person".split()


def save_tiny_open_clip(folder: Path):
    """(config JSON, checkpoint file, the library's model in eval mode): random weights from the config,
    the config registered in open_clip under `OPEN_CLIP_NAME`."""
    import open_clip

    config = folder / f"{OPEN_CLIP_NAME}.json"
    config.write_text(json.dumps(OPEN_CLIP_CONFIG))
    open_clip.add_model_config(config)
    torch.manual_seed(0)
    model = open_clip.create_model(OPEN_CLIP_NAME).eval()
    checkpoint = folder / "tiny_open_clip.pt"
    torch.save(model.state_dict(), checkpoint)
    return config, checkpoint, model


def siglip_tokenizer():
    """A word-level fast tokenizer with SigLIP's conventions: `</s>` ends every text and pads (id 1), no start token."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{w: i + 3 for i, w in enumerate(SIGLIP_WORDS)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="</s>", eos_token="</s>", unk_token="<unk>")


def save_tiny_siglip(folder: Path):
    """(save_pretrained folder, the library's model loaded from it in eval mode)."""
    from transformers import SiglipConfig, SiglipModel, SiglipTextConfig, SiglipVisionConfig

    text = SiglipTextConfig(
        vocab_size=len(SIGLIP_WORDS) + 3,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=16,
        pad_token_id=1,
        eos_token_id=1,
        bos_token_id=None,
    )
    vision = SiglipVisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=8
    )
    torch.manual_seed(0)
    SiglipModel(SiglipConfig(text_config=text.to_dict(), vision_config=vision.to_dict())).save_pretrained(folder)
    siglip_tokenizer().save_pretrained(folder)
    return folder, SiglipModel.from_pretrained(folder, local_files_only=True).eval()
