"""A tiny random Qwen2.5-VL (about 0.1 M parameters) with a character-level tokenizer, built from
parameters alone and written with `save_pretrained`: the offline stand-in for Qwen2.5-VL-3B/7B in
tests, the CPU quick start and benchmarks. Loading it back goes through the same
`from_pretrained` path as a real checkpoint.

The tokenizer maps printable ASCII characters one to one and carries Qwen's special tokens; the
chat template reproduces Qwen2.5-VL's layout (default system turn, role headers, vision
placeholders, generation prompt). Geometry follows the real model: 14-pixel patches, 2-frame
temporal patches, 2 x 2 spatial merge (Qwen2.5-VL's published configuration).
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2_5_VLProcessor,
    Qwen2TokenizerFast,
    Qwen2VLImageProcessor,
    Qwen2VLVideoProcessor,
)

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
CHAT_TEMPLATE = (
    "{% for m in messages %}{% if loop.first and m['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}{% else %}"
    "{% for c in m['content'] %}{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif c['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tiny_processor(min_pixels: int = 4 * 28 * 28, max_pixels: int = 16 * 28 * 28) -> Qwen2_5_VLProcessor:
    """Character-level tokenizer plus Qwen2-VL image and video processors (pixel bounds per frame)."""
    chars = ["[UNK]", "\n"] + [chr(c) for c in range(32, 127)]
    backend = Tokenizer(models.WordLevel(vocab={c: i for i, c in enumerate(chars)}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = Qwen2TokenizerFast(
        tokenizer_object=backend,
        unk_token="[UNK]",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS,
    )
    size = {"shortest_edge": min_pixels, "longest_edge": max_pixels}
    return Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessor(size=size),
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(size=size),
        chat_template=CHAT_TEMPLATE,
    )


def special_token_ids(processor: Qwen2_5_VLProcessor) -> dict[str, int]:
    """The config's special-token ids (vision markers, bos/eos/pad) in `processor`'s tokenizer."""
    ids = {t: processor.tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    return dict(
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )


def tiny_config(processor: Qwen2_5_VLProcessor, hidden_size: int = 32, layers: int = 2) -> Qwen2_5_VLConfig:
    """A Qwen2.5-VL config with the real geometry and a `hidden_size`-wide, `layers`-deep LLM."""
    heads = 4
    head_dim = hidden_size // heads
    quarter = head_dim // 2 // 4
    return Qwen2_5_VLConfig(
        vocab_size=len(processor.tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=2,
        max_position_embeddings=16384,
        rope_scaling={"type": "mrope", "mrope_section": [head_dim // 2 - 2 * quarter, quarter, quarter]},
        vision_config=dict(
            depth=2,
            hidden_size=32,
            intermediate_size=64,
            num_heads=4,
            out_hidden_size=hidden_size,
            patch_size=14,
            spatial_merge_size=2,
            temporal_patch_size=2,
            window_size=112,
            fullatt_block_indexes=[1],
            tokens_per_second=2,
        ),
        **special_token_ids(processor),
        tie_word_embeddings=False,
    )


def save_tiny_qwen25vl(
    out_dir: str | Path,
    seed: int = 0,
    hidden_size: int = 32,
    layers: int = 2,
    min_pixels: int = 4 * 28 * 28,
    max_pixels: int = 16 * 28 * 28,
) -> Path:
    """Write a random tiny Qwen2.5-VL and its processor to `out_dir`; returns the directory."""
    out = Path(out_dir)
    processor = tiny_processor(min_pixels, max_pixels)
    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(tiny_config(processor, hidden_size, layers))
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out
