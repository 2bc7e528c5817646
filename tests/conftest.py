"""Shared fixtures: a small synthetic corpus (real mp4 files) and a tiny saved CLIP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lit_retrieval.data.synthetic import SynthConfig, generate_corpus
from lit_retrieval.models.encoders.tiny import save_tiny_clip

SMALL = SynthConfig(num_videos=24, seed=3)


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Path:
    """Folder with `annotations.json`, `events.json` and `videos/` of 24 synthetic videos."""
    out = tmp_path_factory.mktemp("corpus")
    generate_corpus(out, SMALL, workers=1, progress=False)
    return out


@pytest.fixture(scope="session")
def event_pool(corpus) -> dict[str, dict]:
    return {e["event_id"]: e for e in json.loads((corpus / "events.json").read_text())}


@pytest.fixture(scope="session")
def tiny_clip(tmp_path_factory) -> Path:
    """A random tiny CLIPModel + character tokenizer written with `save_pretrained`."""
    return save_tiny_clip(tmp_path_factory.mktemp("tiny_clip"), seed=0)


@pytest.fixture(scope="module")
def encoder(tiny_clip):
    """The tiny CLIP loaded as a `CLIPEncoder`, one per test module (heads may hook into it)."""
    from lit_retrieval.models.encoders import CLIPEncoder

    return CLIPEncoder(pretrained=str(tiny_clip))


@pytest.fixture(scope="session")
def tiny_qwen(tmp_path_factory) -> Path:
    """A random tiny Qwen2.5-VL + character tokenizer and processors, via `save_pretrained`."""
    from lit_retrieval.models.gve.tiny import save_tiny_qwen25vl

    return save_tiny_qwen25vl(tmp_path_factory.mktemp("tiny_qwen"), seed=0)


@pytest.fixture(scope="session")
def gve_tasks(corpus, tmp_path_factory):
    """GVE task files (T->V, T->I, I->V, V->V, TV->V) made from the synthetic corpus."""
    from lit_retrieval.data.gve_synthetic import make_gve_tasks

    return make_gve_tasks(corpus, tmp_path_factory.mktemp("gve_tasks"), batch_size=4)
