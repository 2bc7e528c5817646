"""Test-time options win over the checkpoint's: `lit-retrieval validate/test --ckpt_path` builds the
model from the trained config, then applies the user's `--config` files and `--model...` flags in the
order given (issue: LightningCLI re-parsed the checkpoint's hyper-parameters over them, silently).
Every case runs the real CLI in a process of its own, as the README and docs/sali.md print the commands
(forked from a warm interpreter: tests/helpers/cli_server.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml

from lit_retrieval.data.datasets.synthetic import SynthConfig, generate_corpus
from helpers.cli_server import run_cli
from helpers.doc_commands import documented_command
from helpers.fit_configs import clean_launch_env, clip_fit_config

ROOT = Path(__file__).resolve().parents[1]
QUIET = {"enable_progress_bar": False, "enable_model_summary": False, "num_sanity_val_steps": 0}


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return run_cli(list(args), cwd, clean_launch_env(str(ROOT / "tests")), timeout=420)


def fit(config: dict, folder: Path) -> Path:
    """Fit `config` (written to `folder/fit.yaml`); the path of its last checkpoint."""
    path = folder / "fit.yaml"
    path.write_text(yaml.safe_dump(config))
    out = cli("fit", "--config", str(path), cwd=folder)
    assert out.returncode == 0, out.stderr[-3000:]
    return folder / "run" / "logs" / "fit" / "checkpoints" / "last.ckpt"


def trainer(folder: Path, **extra) -> dict:
    logger = {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": str(folder / "run")}}
    logger["init_args"] |= {"name": "logs", "version": "fit"}
    checkpoints = {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint", "init_args": {"save_last": True}}
    return {"default_root_dir": str(folder / "run"), "logger": logger, "callbacks": [checkpoints], **QUIET, **extra}


def logged_run(folder: Path, version: str) -> tuple[dict, dict, Path]:
    """(saved config, metrics.json, log folder) of the test run logged as `version`."""
    logs = folder / "run" / "logs" / version
    return yaml.safe_load((logs / "config.yaml").read_text()), json.loads((logs / "metrics.json").read_text()), logs


@pytest.fixture(scope="module")
def dual_encoder_run(tiny_clip, corpus, tmp_path_factory):
    """A CLIP4Clip-meanP fit of 2 steps trained with `ties: average`, as in the issue's reproduction."""
    folder = tmp_path_factory.mktemp("options")
    config = clip_fit_config(
        tiny_clip, corpus, trainer(folder, max_steps=2, limit_val_batches=0), model={"evaluation": {"ties": "average"}}
    )
    return folder, fit(config, folder)


def test_model_flags_apply_over_the_checkpoint(dual_encoder_run):
    folder, ckpt = dual_encoder_run
    out = cli(
        "test",
        *("--config", "fit.yaml", "--trainer.logger.init_args.version", "flags"),
        *("--model.init_args.evaluation.save_scores", "true", "--model.init_args.evaluation.ties", "pessimistic"),
        *("--ckpt_path", str(ckpt)),
        cwd=folder,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    config, _, logs = logged_run(folder, "flags")
    evaluation = config["model"]["init_args"]["evaluation"]
    assert evaluation["ties"] == "pessimistic" and evaluation["save_scores"] is True
    assert (logs / "scores.npy").is_file() and (logs / "scores_ids.json").is_file()


def test_configs_and_flags_apply_in_the_order_given(dual_encoder_run, tmp_path):
    folder, ckpt = dual_encoder_run
    optimistic = tmp_path / "optimistic.yaml"
    optimistic.write_text("model: {init_args: {evaluation: {ties: optimistic}}}\n")
    common = ("--config", "fit.yaml", "--ckpt_path", str(ckpt))
    later_file = cli(
        "test",
        *common,
        *("--model.init_args.evaluation.ties", "pessimistic", "--config", str(optimistic)),
        *("--trainer.logger.init_args.version", "file_last"),
        cwd=folder,
    )
    later_flag = cli(
        "test",
        *common,
        *("--config", str(optimistic), "--model.init_args.evaluation.ties", "pessimistic"),
        *("--trainer.logger.init_args.version", "flag_last"),
        cwd=folder,
    )
    assert later_file.returncode == 0 and later_flag.returncode == 0, (later_file.stderr + later_flag.stderr)[-3000:]
    assert logged_run(folder, "file_last")[0]["model"]["init_args"]["evaluation"]["ties"] == "optimistic"
    assert logged_run(folder, "flag_last")[0]["model"]["init_args"]["evaluation"]["ties"] == "pessimistic"


def test_the_checkpoint_alone_rebuilds_the_trained_model(dual_encoder_run, tmp_path):
    """No `model:` section given: the checkpoint's record (head, encoder, trained options) is the model."""
    folder, ckpt = dual_encoder_run
    trained = yaml.safe_load((folder / "fit.yaml").read_text())
    data_only = tmp_path / "data.yaml"
    data_only.write_text(yaml.safe_dump({"data": trained["data"], "trainer": trained["trainer"]}))
    out = cli(
        "test",
        *("--config", str(data_only), "--trainer.logger.init_args.version", "data_only", "--ckpt_path", str(ckpt)),
        cwd=folder,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    config, metrics, _ = logged_run(folder, "data_only")
    model = config["model"]["init_args"]
    assert model["head"]["class_path"] == "lit_retrieval.models.heads.MeanPHead"
    assert model["evaluation"]["ties"] == "average"  # as trained
    assert 0 <= metrics["test"]["t2v/R@1"] <= 100


def test_an_option_that_reshapes_the_weights_is_refused_by_name(tiny_clip, corpus, tmp_path):
    head = {"class_path": "lit_retrieval.models.heads.SeqTransfHead", "init_args": {"layers": 1, "max_frames": 4}}
    fit_trainer = trainer(tmp_path, max_steps=1, limit_val_batches=0)
    config = clip_fit_config(tiny_clip, corpus, fit_trainer, model={"head": head})
    ckpt = fit(config, tmp_path)
    out = cli(
        "test",
        *("--config", "fit.yaml", "--model.init_args.head.init_args.max_frames", "8", "--ckpt_path", str(ckpt)),
        cwd=tmp_path,
    )
    assert out.returncode == 2, out.stderr[-3000:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("lit-retrieval test:")]
    assert len(errors) == 1 and "Traceback" not in out.stderr, out.stderr
    assert "--model.init_args.head.init_args.max_frames 8 (trained: 4)" in errors[0]
    assert "[4, " in errors[0] and "[8, " in errors[0]  # the frame-position table's shapes


@pytest.fixture(scope="module")
def sali_run(tiny_clip, tmp_path_factory):
    """A tiny SALI+max model (Tab. 2's training setting: max with the penalty) on a relational corpus."""
    folder = tmp_path_factory.mktemp("sali_options")
    corpus = folder / "corpus"
    generate_corpus(corpus, SynthConfig(num_videos=16, seed=5, relational_fraction=0.5), workers=1, progress=False)
    head = {"train_operator": "max", "eval_operator": "max", "train_penalty": True, "eval_penalty": False}
    model = {
        "head": {"class_path": "lit_retrieval.models.heads.SALIHead", "init_args": head},
        "spans": {"extra_person_words": ["block", "circle", "disc", "ring", "shape", "square", "triangle"]},
        "evaluation": {"relational": {"stages": ["test"]}},
    }
    data = {"num_frames": 8, "batch_size": 8, "shots": {"cache_dir": str(folder / "shots"), "progress": False}}
    config = clip_fit_config(tiny_clip, corpus, trainer(folder, max_steps=3, limit_val_batches=0), model, data)
    config["model"]["class_path"] = "lit_retrieval.modules.SALIRetrieval"
    return folder, fit(config, folder)


def test_sali_tab3_inference_overlays_change_what_the_test_stage_uses(sali_run):
    """configs/sali/grid/infer_*.yaml reach `test` as `--config` with `--ckpt_path` (SALI Tab. 3: the
    operator is switched at inference on the trained model); each must reach the head."""
    folder, ckpt = sali_run
    runs = {}
    for name, overlays in {"max": ["infer_max"], "ot": ["infer_ot"], "max_pen": ["infer_max", "infer_pen"]}.items():
        configs = [arg for overlay in overlays for arg in ("--config", str(ROOT / f"configs/sali/grid/{overlay}.yaml"))]
        out = cli(
            "test",
            *("--config", "fit.yaml", *configs, "--model.init_args.evaluation.save_scores", "true"),
            *("--trainer.logger.init_args.version", name, "--ckpt_path", str(ckpt)),
            cwd=folder,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        config, metrics, logs = logged_run(folder, name)
        runs[name] = (config["model"]["init_args"]["head"]["init_args"], metrics, np.load(logs / "scores.npy"))
    assert runs["max"][0]["eval_operator"] == "max" and runs["max"][0]["eval_penalty"] is False
    assert runs["ot"][0]["eval_operator"] == "ot" and runs["ot"][0]["eval_penalty"] is False
    assert runs["max_pen"][0]["eval_operator"] == "max" and runs["max_pen"][0]["eval_penalty"] is True
    assert not np.allclose(runs["max"][2], runs["ot"][2])  # the scores the metrics came from differ
    assert runs["max"][1] != runs["ot"][1]


def test_the_documented_ensemble_recipe_writes_its_scores(dual_encoder_run):
    """docs/sali.md's ensembling control: `test ... --model.init_args.evaluation.save_scores true
    --ckpt_path CKPT` per seed, then `metrics --ensemble A/scores.npy B/scores.npy`."""
    folder, ckpt = dual_encoder_run
    recipe = (ROOT / "docs" / "sali.md").read_text()
    assert "--model.init_args.evaluation.save_scores true" in recipe and "metrics --ensemble" in recipe
    out = cli(
        "test",
        *("--config", "fit.yaml", "--trainer.logger.init_args.name", "seed1"),
        *("--trainer.logger.init_args.version", "test", "--model.init_args.evaluation.save_scores", "true"),
        *("--ckpt_path", str(ckpt)),
        cwd=folder,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    saved = folder / "run" / "seed1" / "test" / "scores.npy"
    assert saved.is_file()
    out = cli("metrics", "--ensemble", str(saved), str(saved), cwd=folder)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "R@1" in out.stdout


def test_the_documented_test_of_a_copied_checkpoint_needs_no_warm_start(dual_encoder_run, tmp_path):
    """docs/sali.md's `test --ckpt_path` of a checkpoint copied elsewhere, copied from the page: a run
    warm-started from another run's checkpoint tests after that checkpoint is gone (it used to build the model
    first and fail with FileNotFoundError on the warm start), and the log says the warm start was skipped."""
    folder, ckpt = dual_encoder_run
    warm = tmp_path / "baseline_best.ckpt"
    warm.write_bytes(ckpt.read_bytes())
    config = yaml.safe_load((folder / "fit.yaml").read_text())
    config["trainer"] = trainer(tmp_path, max_steps=1, limit_val_batches=0)
    config["model"]["init_args"]["warm_start"] = str(warm)
    trained = fit(config, tmp_path)
    warm.unlink()
    words = documented_command("docs/sali.md", "test", "/archive/cm_sali/best.ckpt")
    assert words[:2] == ["lit-retrieval", "test"]
    given = {"configs/sali/cm_sali_max.yaml": "fit.yaml", "/archive/cm_sali/best.ckpt": str(trained)}
    out = cli(*(given.get(w, w) for w in words[1:]), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"model.init_args.warm_start {warm} is not loaded" in out.stdout + out.stderr
    assert (tmp_path / "run" / "logs" / "test" / "metrics.json").is_file()
