import json
import shutil
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml

from helpers.cli_server import run_cli
from helpers.fit_configs import clean_launch_env, clip_fit_config
from lit_retrieval.cli import main
from lit_retrieval.data import MultiEventDataModule, VideoDecodeError
from lit_retrieval.models.encoders import CLIPEncoder
from lit_retrieval.models.heads import MeanPHead
from lit_retrieval.modules import DualEncoderRetrieval, OptimConfig

ROOT = Path(__file__).resolve().parents[2]


def make_module(tiny_clip, **kwargs):
    optim = OptimConfig(backbone_lr=1e-3, head_lr=1e-3, weight_decay=0.0, warmup_proportion=0.0)
    return DualEncoderRetrieval(
        CLIPEncoder(pretrained=str(tiny_clip)), MeanPHead(logit_scale_init=2.3), optim=optim, **kwargs
    )


def make_data(annotation, **kwargs):
    kwargs = {"num_frames": 4, "image_size": 32, "batch_size": 8, **kwargs}
    return MultiEventDataModule(annotation=str(annotation), **kwargs)


def trainer(tmp_path, **kwargs):
    return L.Trainer(
        accelerator="cpu",
        default_root_dir=tmp_path,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kwargs,
    )


def mean_train_loss(module, data):
    module.eval()
    with torch.no_grad():
        losses = []
        for batch in data.train_dataloader():
            text, video = module(batch)
            losses.append(module.objectives.infonce.loss(module.head.logits(module.head.score(text, video))).item())
    module.train()
    return sum(losses) / len(losses)


@pytest.mark.parametrize("query_mode", ["concat", "events"])
def test_short_fit_lowers_the_loss(tmp_path, corpus, tiny_clip, query_mode):
    torch.manual_seed(0)
    module = make_module(tiny_clip, query_mode=query_mode)
    data = make_data(corpus / "annotations.json")
    data.setup()
    before = mean_train_loss(module, data)
    trainer(tmp_path, max_epochs=30).fit(module, data)
    assert mean_train_loss(module, data) < 0.8 * before


def corrupt_copy(corpus, tmp_path):
    root = tmp_path / "data"
    shutil.copytree(corpus, root)
    annotation = json.loads((root / "annotations.json").read_text())
    bad = next(v for v in annotation["videos"] if v["split"] == "train")
    (root / bad["path"]).write_bytes(b"\x00" * 1000)
    return root / "annotations.json", bad["path"]


def test_bad_video_skip_policy_counts_and_continues(tmp_path, corpus, tiny_clip):
    annotation, bad_path = corrupt_copy(corpus, tmp_path)
    module = make_module(tiny_clip)
    trainer(tmp_path, max_epochs=1).fit(module, make_data(annotation, on_bad_video="skip", batch_size=17))
    assert module.skipped_videos == 1
    assert module.global_step == 1  # one batch of all 17 train videos, the 16 good ones trained on


def test_bad_video_raise_policy_names_the_file(tmp_path, corpus, tiny_clip):
    annotation, bad_path = corrupt_copy(corpus, tmp_path)
    with pytest.raises(VideoDecodeError, match=Path(bad_path).name):
        trainer(tmp_path, max_epochs=1).fit(
            make_module(tiny_clip), make_data(annotation, on_bad_video="raise", batch_size=17)
        )


def test_cli_fit_then_test_writes_metrics(tmp_path, corpus, tiny_clip):
    config = clip_fit_config(
        tiny_clip,
        corpus,
        {
            "max_epochs": 1,
            "default_root_dir": str(tmp_path / "run"),
            "enable_progress_bar": False,
            "logger": {
                "class_path": "lightning.pytorch.loggers.CSVLogger",
                "init_args": {"save_dir": str(tmp_path / "run"), "name": "logs", "version": "v"},
            },
            "callbacks": [
                {
                    "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                    "init_args": {"dirpath": str(tmp_path / "ckpt"), "save_last": True},
                }
            ],
        },
        data={"num_frames": 4, "batch_size": 8, "val_split": "test"},
    )
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    main(["fit", "--config", str(path)])
    main(["test", "--config", str(path), "--ckpt_path", str(tmp_path / "ckpt" / "last.ckpt")])
    metrics = json.loads((tmp_path / "run" / "logs" / "v" / "metrics.json").read_text())
    assert set(metrics) == {"val", "test"}
    assert {"t2v/R@1", "t2v/MdR", "v2t/Rsum", "v2t/MnR"} <= set(metrics["test"])


# MELON parts parse as the rows that compose them (tests/repository/test_configs_melon.py); plans are grids of
# runs, not training configs (tests/grid/test_end_to_end.py)
TRAINING_CONFIGS = sorted(
    str(p.relative_to(ROOT))
    for p in (ROOT / "configs").rglob("*.yaml")
    if not {"uvrb", "melon", "plans"} & set(p.parts)
)


@pytest.mark.parametrize("config", TRAINING_CONFIGS)
def test_every_config_parses(config, capsys, monkeypatch):
    # overlays apply on top of a base config: SALI grid rows and Tab. 2 heads, GVE model/data/ablation parts,
    # E2's overlays, strategies
    bases = {
        "/grid/": ["configs/sali/cm_sali_max.yaml"],
        "configs/sali/cm_xclip.yaml": ["configs/sali/cm_clip4clip.yaml"],
        "configs/sali/cm_ts2net.yaml": ["configs/sali/cm_clip4clip.yaml"],
        "configs/strategy/": ["configs/quickstart.yaml"],
        "configs/gve/model_": ["configs/gve/train.yaml"],
        "configs/gve/data_": ["configs/gve/train.yaml"],
        "configs/gve/ablation_": ["configs/gve/train.yaml", "configs/gve/data_3b.yaml"],
        "configs/gve/train.yaml": ["configs/gve/data_3b.yaml"],
        "configs/gve/e2/": ["configs/gve/tiny_cpu.yaml"],  # E2's overlays (configs/plans/gve_curriculum_negatives.yaml)
        "configs/gve/e2b/": ["configs/gve/tiny_cpu.yaml"],  # E2b's base (configs/plans/gve_e2b_base.yaml)
    }
    base = [arg for key, paths in bases.items() if key in config for path in paths for arg in ("--config", path)]
    if config == "configs/gve/train.yaml":  # the recipe is completed by a data mixture
        base, config = ["--config", config], base[-1]
    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit) as finished:  # in-process: one import of the package for all configs
        main(["fit", *base, "--config", config, "--print_config"])
    out = capsys.readouterr()
    assert finished.value.code in (0, None), out.err[-2000:]
    assert "class_path: lit_retrieval" in out.out


def test_mistyped_key_and_class_list_the_valid_choices(tmp_path):
    text = (ROOT / "configs" / "quickstart.yaml").read_text()
    for wrong, expected in (("batch_size: 32", "valid: batch_size"), ("MeanPHead", "available: MeanPHead")):
        bad = tmp_path / "bad.yaml"
        bad.write_text(text.replace(wrong, wrong.replace("batch_size", "batchsize").replace("MeanPHead", "MeanHead")))
        out = run_cli(["fit", "--config", str(bad), "--print_config"], ROOT, clean_launch_env(str(ROOT / "tests")))
        assert out.returncode != 0 and "Traceback" not in out.stderr
        assert expected in out.stderr


def test_unknown_subcommand_is_a_clear_error():
    out = subprocess.run([sys.executable, "-m", "lit_retrieval", "trian"], capture_output=True, text=True)
    assert out.returncode == 2 and "unknown command 'trian'" in out.stderr and "fit" in out.stderr
