"""Issue 39's error contract for options: a bad test-time evaluation option, a config that adds
weights to a checkpoint's model, a missing DeepSpeed package, untyped DDP options, a zero
accumulation and a missing GVE model directory each end as one `lit-retrieval CMD:` line with exit
status 2 (no traceback), run as the user runs them: `lit-retrieval` in a process of its own (forked from a warm
interpreter with the same environment: tests/helpers/cli_server.py). The CLIP
`config` dict's dotted flags arrive typed. The expected values are CLIPConfig's documented field
types and the documented message, not read back from our code."""

from __future__ import annotations

import ast
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from helpers.cli_server import run_cli
from helpers.fit_configs import clean_launch_env, clip_fit_config
from lit_retrieval.errors import ConfigError
from lit_retrieval.models.encoders.clip import typed_clip_config

ROOT = Path(__file__).resolve().parents[1]
QUIET = {"enable_progress_bar": False, "enable_model_summary": False, "num_sanity_val_steps": 0}
VISION = "--model.init_args.encoder.init_args.config.vision_config"
TINY_CONFIG = {  # a CLIP built from its config alone (no weights file): 1 vision and 1 text layer
    "text_config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2},
    "vision_config": {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "image_size": 32,
        "patch_size": 16,
    },
    "projection_dim": 16,
}


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return run_cli(list(args), cwd, env or clean_launch_env(str(ROOT / "tests")), timeout=420)


def one_error_line(out: subprocess.CompletedProcess, command: str) -> str:
    """The single `lit-retrieval COMMAND:` line of a refused run (exit 2, no traceback)."""
    assert out.returncode == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    lines = [line for line in out.stderr.splitlines() if line.startswith(f"lit-retrieval {command}:")]
    assert len(lines) == 1, out.stderr[-3000:]
    return lines[0]


def trainer(folder: Path, **extra) -> dict:
    logger = {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": str(folder / "run")}}
    logger["init_args"] |= {"name": "logs", "version": "fit"}
    checkpoints = {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint", "init_args": {"save_last": True}}
    return {"default_root_dir": str(folder / "run"), "logger": logger, "callbacks": [checkpoints], **QUIET, **extra}


@pytest.fixture(scope="module")
def config_dict_run(tiny_clip, corpus, tmp_path_factory) -> tuple[Path, Path]:
    """A one-step fit of a CLIP built from a `config` dict, its patch size given as a dotted flag
    (it arrived as the string '8', which transformers' strict config check refused)."""
    folder = tmp_path_factory.mktemp("refusals")
    config = clip_fit_config(tiny_clip, corpus, trainer(folder, max_steps=1, limit_val_batches=0))
    config["model"]["init_args"]["encoder"]["init_args"] = {"config": TINY_CONFIG}
    (folder / "fit.yaml").write_text(yaml.safe_dump(config))
    out = cli("fit", "--config", "fit.yaml", f"{VISION}.patch_size", "8", cwd=folder)
    assert out.returncode == 0, out.stderr[-3000:]
    saved = yaml.safe_load((folder / "run" / "logs" / "fit" / "config.yaml").read_text())
    # the flag merges into the file's dict (jsonargparse alone replaced it by {"patch_size": "8"})
    assert saved["model"]["init_args"]["encoder"]["init_args"]["config"] == {
        **TINY_CONFIG,
        "vision_config": {**TINY_CONFIG["vision_config"], "patch_size": 8},
    }
    return folder, folder / "run" / "logs" / "fit" / "checkpoints" / "last.ckpt"


@pytest.mark.parametrize(
    "options,reason",
    [
        (["--model.init_args.evaluation.rerank", '{"k": 0}'], "evaluation.rerank.k must be >= 1, got 0"),
        (["--model.init_args.evaluation.rerank", '{"k": -3}'], "evaluation.rerank.k must be >= 1, got -3"),
        (["--model.init_args.evaluation.rescore", '{"dsl": {"temperature": 0}}'], "finite number > 0"),
        (
            ["--model.init_args.evaluation.rescore", '{"qbnorm": {"k": 0}}'],
            "rescore.qbnorm.k and bank_size must be >= 1",
        ),
        (
            ["--model.init_args.evaluation.rerank", '{"k": 2, "full_scoring": false}']
            + ["--model.init_args.evaluation.save_scores", "true"],
            "save_scores",
        ),
    ],
    ids=["rerank k 0", "rerank k -3", "dsl temperature 0", "qbnorm k 0", "full_scoring false + save_scores"],
)
def test_a_bad_test_time_evaluation_option_is_one_line(config_dict_run, options, reason):
    folder, ckpt = config_dict_run
    out = cli("test", "--config", "fit.yaml", *options, "--ckpt_path", str(ckpt), cwd=folder)
    assert reason in one_error_line(out, "test")


def test_a_config_that_adds_layers_is_refused_by_name(config_dict_run):
    folder, ckpt = config_dict_run
    out = cli(
        "test",
        *("--config", "fit.yaml", f"{VISION}.patch_size", "8", f"{VISION}.num_hidden_layers", "2"),
        *("--ckpt_path", str(ckpt)),
        cwd=folder,
    )
    line = one_error_line(out, "test")
    assert str(ckpt) in line and "num_hidden_layers" in line and "adds" in line
    assert "encoder.vision.encoder.layers.1." in line  # the second layer's weights, by name


@pytest.mark.parametrize(
    "extra,reason",
    [
        (
            [
                "--config",
                str(ROOT / "configs/strategy/ddp.yaml"),
                "--trainer.strategy.init_args.find_unused_parameters",
                "maybe",
            ],
            "find_unused_parameters",
        ),  # fmt: skip
        (["--trainer.accumulate_grad_batches", "0"], "accumulate_grad_batches must be"),
    ],
    ids=["ddp find_unused_parameters maybe", "accumulate_grad_batches 0"],
)
def test_a_bad_trainer_option_is_one_line(tiny_clip, corpus, tmp_path, extra, reason):
    (tmp_path / "fit.yaml").write_text(yaml.safe_dump(clip_fit_config(tiny_clip, corpus, trainer(tmp_path))))
    assert reason in one_error_line(cli("fit", "--config", "fit.yaml", *extra, cwd=tmp_path), "fit")


def test_deepspeed_without_its_package_names_the_extra(tiny_clip, corpus, tmp_path):
    """`deepspeed` hidden from the interpreter (`sys.modules["deepspeed"] = None`: `import deepspeed` fails
    and `importlib.util.find_spec` finds nothing, as on an install without the extra)."""
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['deepspeed'] = None\n")
    (tmp_path / "fit.yaml").write_text(yaml.safe_dump(clip_fit_config(tiny_clip, corpus, trainer(tmp_path))))
    env = clean_launch_env(f"{hide}{os.pathsep}{ROOT / 'tests'}")
    strategy = str(ROOT / "configs/strategy/deepspeed_zero2.yaml")
    line = one_error_line(cli("fit", "--config", "fit.yaml", "--config", strategy, cwd=tmp_path, env=env), "fit")
    assert "deepspeed" in line and "lit-retrieval[deepspeed]" in line


def test_a_missing_gve_model_directory_is_one_line(tmp_path):
    missing = tmp_path / "no_model"
    out = cli(
        "fit",
        *("--config", str(ROOT / "configs/gve/tiny_cpu.yaml"), "--model.init_args.embedder.model_path", str(missing)),
        cwd=tmp_path,
    )
    line = one_error_line(out, "fit")
    assert str(missing) in line and "is not a model directory" in line


def test_clip_config_strings_take_the_type_of_clipconfigs_fields():
    """CLIPConfig's fields: num_hidden_layers and patch_size are ints, layer_norm_eps a float (transformers docs)."""
    given = {"vision_config": {"num_hidden_layers": "2", "patch_size": "8", "layer_norm_eps": "1e-6"}}
    typed = typed_clip_config(given)["vision_config"]
    assert typed == {"num_hidden_layers": 2, "patch_size": 8, "layer_norm_eps": 1e-6}
    assert type(typed["num_hidden_layers"]) is int and type(typed["layer_norm_eps"]) is float
    with pytest.raises(ConfigError, match=r"config\.vision_config\.patch_size must be an integer, got 'eight'"):
        typed_clip_config({"vision_config": {"patch_size": "eight"}})


ALLOWED = {  # (file, class): why a plain ValueError is right there
    ("lit_retrieval/data/batching/dataset.py", "MultiEventDataset"): "shots vs records: a caller's bug, not an option",
    ("lit_retrieval/data/batching/samplers.py", "TaskBatchSampler"): "rank vs world size: set by the launcher",
}


def test_config_classes_raise_the_projects_config_error():
    """Every class's `__init__`/`__post_init__` that validates options raises ConfigError (one line,
    exit 2), never a plain ValueError/TypeError (chained tracebacks while jsonargparse builds it)."""
    offenders = []
    for path in sorted((ROOT / "lit_retrieval").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for method in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
                if method.name not in ("__init__", "__post_init__"):
                    continue
                for node in ast.walk(method):
                    if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                        name = getattr(node.exc.func, "id", getattr(node.exc.func, "attr", ""))
                        where = (str(path.relative_to(ROOT)), cls.name)
                        if name in ("ValueError", "TypeError") and where not in ALLOWED:
                            offenders.append(f"{where[0]}:{node.lineno} {cls.name}.{method.name} raises {name}")
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize(
    ("overlay", "key", "valid"),
    [
        ({"evaluation": {"rescore": {"is": {}}}}, "model.init_args.evaluation.rescore.is", "dsl, inverted_softmax"),
        ({"bogus": {}}, "model.init_args.bogus", "encoder"),
    ],
)
def test_an_unknown_key_holding_an_empty_mapping_is_refused(tmp_path, overlay, key, valid):
    """jsonargparse flattens `{}` to no option at all, so an unknown key holding it used to vanish
    (`rescore: {is: {}}` ran without any re-scoring); it is refused like any other unknown key."""
    extra = tmp_path / "extra.yaml"
    extra.write_text(yaml.safe_dump({"model": {"init_args": overlay}}))
    out = cli("test", "--config", str(ROOT / "configs" / "quickstart.yaml"), "--config", str(extra), cwd=tmp_path)
    line = one_error_line(out, "test")
    assert f"'{key}' (in {extra}) is not an option; valid there:" in line
    assert valid in line


def test_newest_refuses_another_runs_checkpoint_and_takes_its_own_with_other_run_time_options(tmp_path):
    """`fit --ckpt_path newest`'s check on a checkpoint written with known content (`torch.save`): another head or
    seed is another run (refused, naming its files and the option); other grad-cache chunks, evaluation options or
    a `true` seed (drawn anew at each start) are the same run resumed; a checkpoint without the record is taken."""
    import torch

    from lit_retrieval.retrieval_cli import refuse_another_runs_checkpoint
    from lit_retrieval.errors import UsageError

    model = {"class_path": "M", "init_args": {"head": {"class_path": "MeanP"}, "grad_cache": None, "evaluation": {}}}
    path = tmp_path / "last.ckpt"
    torch.save(
        {
            "global_step": 4,
            "state_dict": {},
            "lit_retrieval_model_config": model,
            "lit_retrieval_config_files": ["/c/train.yaml", "/c/row_a.yaml"],
            "lit_retrieval_seed": 0,
        },
        path,
    )
    resumed = {**model, "init_args": {**model["init_args"], "grad_cache": {"video_chunk": 2}, "evaluation": {"x": 1}}}
    refuse_another_runs_checkpoint(path, ["/c/train.yaml", "/elsewhere/row_a.yaml"], resumed, 0)
    refuse_another_runs_checkpoint(path, [], model, True)
    other_head = {**model, "init_args": {**model["init_args"], "head": {"class_path": "XCLIP"}}}
    with pytest.raises(UsageError, match=r"another run, of --config /c/train.yaml /c/row_a.yaml; .*head.class_path"):
        refuse_another_runs_checkpoint(path, [], other_head, 0)
    with pytest.raises(UsageError, match=r"--seed_everything 1 \(its: 0\)"):
        refuse_another_runs_checkpoint(path, [], model, 1)
    torch.save({"global_step": 4, "state_dict": {}}, path)  # written before the record
    refuse_another_runs_checkpoint(path, [], other_head, 1)
