"""Every path of a run under `fit.sbatch`'s RUN_DIR (`lit_retrieval/run_folder.py`), and `--ckpt_path newest`
refusing another config's checkpoint: docs/slurm.md's command, copied from the page, rendered and run with an
`srun` that runs its command here (real `lit-retrieval fit` processes of a tiny model)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from helpers.doc_commands import documented_command
from helpers.fit_configs import clean_launch_env, clip_fit_config

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def row_config(tiny_clip: Path, corpus: Path, average_directions: bool) -> dict:
    """A config that names its own run folder in every path, as the MELON rows and the quick start do; both rows
    of the test name the same one (`runs/shared`)."""
    trainer = {
        "max_steps": 1,
        "limit_val_batches": 0,
        "enable_progress_bar": False,
        "default_root_dir": "runs/shared",
        "logger": {
            "class_path": "lightning.pytorch.loggers.CSVLogger",
            "init_args": {"save_dir": "runs/shared", "name": "logs", "version": "fit"},
        },
        "callbacks": [
            {
                "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                "init_args": {"dirpath": "runs/shared/checkpoints", "save_last": True, "save_top_k": 0},
            }
        ],
    }
    return clip_fit_config(tiny_clip, corpus, trainer, model={"average_directions": average_directions})


def job(submit: Path, config: str, run_dir: Path, name: str) -> subprocess.CompletedProcess:
    """docs/slurm.md's `fit.sbatch` command with `config` and `run_dir`, rendered in `submit` and run there."""
    words = documented_command("docs/slurm.md", "CONFIG=configs/quickstart_mea.yaml")
    assert words[:3] == ["lit-retrieval", "slurm", "fit.sbatch"]
    given = {"CONFIG=configs/quickstart_mea.yaml": f"CONFIG={config}", "quick_mea.sbatch": name}
    args = [given.get(w, f"RUN_DIR={run_dir}" if w.startswith("RUN_DIR=") else w) for w in words[1:]]
    env = clean_launch_env(str(ROOT / "tests"))
    args.insert(args.index("--out"), "VENV=current")  # the tests' environment, docs/slurm.md's other choice
    rendered = subprocess.run([sys.executable, "-m", "lit_retrieval", *args], cwd=submit, env=env)
    assert rendered.returncode == 0
    bin_dir = submit / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "srun").write_text('#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\nexec "$@"\n')
    (bin_dir / "srun").chmod(0o755)
    path = f"{bin_dir}:{Path(sys.executable).parent}:{env['PATH']}"  # `lit-retrieval` beside this interpreter
    env = {**env, "PATH": path, "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "cpu01"}
    return subprocess.run(["bash", name], cwd=submit, env=env, capture_output=True, text=True, timeout=600)


def test_two_configs_naming_one_folder_each_keep_to_their_run_dir_and_newest_refuses_the_other(
    tmp_path, tiny_clip, corpus
):
    submit = tmp_path / "submit"
    submit.mkdir()
    for name, average in (("row_a.yaml", False), ("row_b.yaml", True)):
        (submit / name).write_text(yaml.safe_dump(row_config(tiny_clip, corpus, average)))
    run_a, run_b = tmp_path / "scratch" / "row_a", tmp_path / "scratch" / "row_b"
    first = job(submit, "row_a.yaml", run_a, "a.sbatch")
    assert first.returncode == 0, first.stderr[-3000:]
    second = job(submit, "row_b.yaml", run_b, "b.sbatch")
    assert second.returncode == 0, second.stderr[-3000:]
    assert not (submit / "runs").exists()  # nothing in the folder the configs name
    for run, average in ((run_a, False), (run_b, True)):
        checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False, map_location="cpu")
        assert checkpoint["lit_retrieval_model_config"]["init_args"]["average_directions"] is average
        assert (run / "logs" / "fit" / "config.yaml").is_file() and (run / "logs" / "fit" / "hparams.yaml").is_file()
    assert f"runs/shared/checkpoints -> {run_a / 'checkpoints'}" in first.stdout + first.stderr  # and says so
    # row B submitted into row A's folder: its newest checkpoint is row A's, refused by name
    wrong = job(submit, "row_b.yaml", run_a, "wrong.sbatch")
    assert wrong.returncode != 0
    assert f"written by another run, of --config {submit / 'row_a.yaml'}; this run differs: " in wrong.stderr
    assert "--model.init_args.average_directions True (its: False)" in wrong.stderr
    # row A again (a requeue): its own checkpoint resumes, so the finished fit does nothing more
    again = job(submit, "row_a.yaml", run_a, "a.sbatch")
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"--ckpt_path newest: {run_a / 'checkpoints' / 'last.ckpt'}" in again.stdout + again.stderr
