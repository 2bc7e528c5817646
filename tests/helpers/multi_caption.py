"""`lit-retrieval test` over a multi-caption data set and the shipped dataset configs, for the dataset
tests (MSVD, VATEX)."""

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from helpers.fit_configs import clip_fit_config
from lit_retrieval.cli import main

# CLIP4Clip's README scripts for MSR-VTT, MSVD and LSMDC: --max_frames, --max_words, global --batch_size,
# --lr, --coef_lr, --epochs
CLIP4CLIP_RECIPE = {"max_frames": 12, "max_words": 32, "batch_size": 128, "lr": 1e-4, "coef_lr": 1e-3, "epochs": 5}


def cli_test(root: Path, tiny_clip: Path, data: dict[str, Any]) -> tuple[np.ndarray, dict, dict]:
    """Run `lit-retrieval test` of CLIP4Clip-meanP (the tiny CLIP, untrained) on `data` (a `data:` config
    section) with the test scores saved and CLIP4Clip's group-max V2T rule: (score matrix,
    scores_ids.json, the test metrics)."""
    trainer = {"logger": False, "enable_progress_bar": False, "default_root_dir": str(root)}
    evaluation = {"evaluation": {"save_scores": True, "v2t_rule": "group_max"}}
    config = {**clip_fit_config(tiny_clip, root, trainer, model=evaluation), "data": data}
    (root / "config.yaml").write_text(yaml.safe_dump(config))
    main(["test", "--config", str(root / "config.yaml")])
    metrics = json.loads((root / "metrics.json").read_text())["test"]
    return np.load(root / "scores.npy"), json.loads((root / "scores_ids.json").read_text()), metrics


def shipped_recipe(name: str, capsys) -> tuple[str, dict[str, Any]]:
    """The data module and the CLIP4Clip recipe values (`CLIP4CLIP_RECIPE`'s keys) that
    `lit-retrieval fit --config configs/datasets/NAME --print_config` resolves."""
    with pytest.raises(SystemExit) as done:
        main(["fit", "--config", str(Path(__file__).parents[2] / "configs" / "datasets" / name), "--print_config"])
    assert done.value.code in (0, None)
    config = yaml.safe_load(capsys.readouterr().out)
    model, data = config["model"]["init_args"], config["data"]["init_args"]
    optim = model["optim"]
    recipe = {
        "max_frames": data["num_frames"],
        "max_words": model["encoder"]["init_args"]["max_text_len"],
        "batch_size": data["batch_size"] * config["trainer"]["devices"],
        "lr": optim["head_lr"],
        "coef_lr": pytest.approx(optim["backbone_lr"] / optim["head_lr"]),
        "epochs": config["trainer"]["max_epochs"],
    }
    return config["data"]["class_path"], recipe
