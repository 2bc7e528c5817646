"""`lit-retrieval test` over a multi-caption data set, for the dataset tests (MSVD, VATEX)."""

import json
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from lit_retrieval.cli import main


def cli_test(root: Path, tiny_clip: Path, data: dict[str, Any]) -> tuple[np.ndarray, dict, dict]:
    """Run `lit-retrieval test` of CLIP4Clip-meanP (the tiny CLIP, untrained) on `data` (a `data:` config
    section) with the test scores saved and CLIP4Clip's group-max V2T rule: (score matrix,
    scores_ids.json, the test metrics)."""
    config = {
        "seed_everything": 0,
        "trainer": {"accelerator": "cpu", "logger": False, "enable_progress_bar": False, "default_root_dir": str(root)},
        "model": {
            "class_path": "lit_retrieval.modules.DualEncoderRetrieval",
            "init_args": {
                "encoder": {
                    "class_path": "lit_retrieval.models.encoders.CLIPEncoder",
                    "init_args": {"pretrained": str(tiny_clip)},
                },
                "head": {"class_path": "lit_retrieval.models.heads.MeanPHead"},
                "evaluation": {"save_scores": True, "v2t_rule": "group_max"},
            },
        },
        "data": data,
    }
    (root / "config.yaml").write_text(yaml.safe_dump(config))
    main(["test", "--config", str(root / "config.yaml")])
    metrics = json.loads((root / "metrics.json").read_text())["test"]
    return np.load(root / "scores.npy"), json.loads((root / "scores_ids.json").read_text()), metrics


def printed_config(path: Path, capsys) -> dict[str, Any]:
    """The config `lit-retrieval fit --config PATH --print_config` resolves `path` to."""
    try:
        main(["fit", "--config", str(path), "--print_config"])
    except SystemExit as done:
        assert done.code in (0, None)
    return yaml.safe_load(capsys.readouterr().out)


def clip4clip_recipe(config: dict[str, Any]) -> dict[str, Any]:
    """The values of CLIP4Clip's short-clip recipe (README scripts: --max_frames, --max_words, --batch_size,
    --lr, --coef_lr, --epochs) a resolved config holds."""
    model, data = config["model"]["init_args"], config["data"]["init_args"]
    optim = model["optim"]
    return {
        "max_frames": data["num_frames"],
        "max_words": model["encoder"]["init_args"]["max_text_len"],
        "batch_size": data["batch_size"] * config["trainer"]["devices"],
        "lr": optim["head_lr"],
        "coef_lr": optim["backbone_lr"] / optim["head_lr"],
        "epochs": config["trainer"]["max_epochs"],
    }
