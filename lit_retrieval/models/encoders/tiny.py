"""Tiny random CLIP checkpoints with a character-level CLIP tokenizer, written offline.

Tests and smoke runs save one with `save_pretrained` and load it back through the real loading
path; nothing is downloaded. The tokenizer is a genuine `CLIPTokenizer` (byte-level BPE with no
merges, so one token per character) with CLIP's start/end tokens.
"""

from __future__ import annotations

from pathlib import Path

from transformers import CLIPConfig, CLIPModel, CLIPTokenizer
from tokenizers.pre_tokenizers import ByteLevel


def char_clip_tokenizer() -> CLIPTokenizer:
    """A `CLIPTokenizer` whose vocabulary is every byte character, with and without `</w>`."""
    chars = sorted(ByteLevel.alphabet())
    vocab = {c: i for i, c in enumerate(chars)}
    vocab.update({c + "</w>": i + len(chars) for i, c in enumerate(chars)})
    vocab["<|startoftext|>"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    return CLIPTokenizer(vocab=vocab, merges=[])


def tiny_clip_config(
    image_size: int = 32,
    patch_size: int = 8,
    width: int = 64,
    layers: int = 2,
    embed_dim: int = 64,
    max_positions: int = 77,
) -> CLIPConfig:
    """A small `CLIPConfig` sized for the character tokenizer above."""
    vocab_size = len(char_clip_tokenizer())
    return CLIPConfig(
        text_config=dict(
            vocab_size=vocab_size,
            hidden_size=width,
            intermediate_size=2 * width,
            num_hidden_layers=layers,
            num_attention_heads=max(1, width // 64),
            max_position_embeddings=max_positions,
            bos_token_id=vocab_size - 2,
            eos_token_id=vocab_size - 1,
            pad_token_id=vocab_size - 1,
        ),
        vision_config=dict(
            hidden_size=width,
            intermediate_size=2 * width,
            num_hidden_layers=layers,
            num_attention_heads=max(1, width // 64),
            image_size=image_size,
            patch_size=patch_size,
        ),
        projection_dim=embed_dim,
    )


def save_tiny_clip(out: str | Path, seed: int = 0, **config_kwargs) -> Path:
    """Write a random tiny `CLIPModel` and its tokenizer to `out` (a `from_pretrained` directory)."""
    import torch

    torch.manual_seed(seed)
    out = Path(out)
    CLIPModel(tiny_clip_config(**config_kwargs)).save_pretrained(out)
    char_clip_tokenizer().save_pretrained(out)
    return out
