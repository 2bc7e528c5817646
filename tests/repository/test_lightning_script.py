"""The `lightning` console script (pyproject [project.scripts]) runs the project's trainer commands,
as the design card's `lightning fit --config FILE` says; the `lightning` package ships none."""

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "lightning"


def run(*args):
    assert SCRIPT.is_file(), f"{SCRIPT} missing: reinstall the project (make install, or pip install -e . --no-deps)"
    return subprocess.run([str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_lightning_fit_prints_the_same_config_as_lit_retrieval():
    out = run("fit", "--config", "configs/quickstart.yaml", "--print_config")
    assert out.returncode == 0, out.stderr[-2000:]
    config = yaml.safe_load(out.stdout)
    expected = yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text())
    assert config["model"]["class_path"] == expected["model"]["class_path"]
    assert config["data"]["class_path"] == expected["data"]["class_path"]
    assert config["trainer"]["max_epochs"] == expected["trainer"]["max_epochs"]
    reference = subprocess.run(
        [sys.executable, "-m", "lit_retrieval", "fit", "--config", "configs/quickstart.yaml", "--print_config"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert yaml.safe_load(reference.stdout) == config


def test_only_trainer_commands_are_offered():
    other = run("metrics", "scores.npy")
    assert other.returncode == 2 and "unknown command 'metrics'" in other.stderr and "lit-retrieval" in other.stderr
    assert run().returncode == 2
    helped = run("--help")
    assert helped.returncode == 0 and "fit,validate,test,predict" in helped.stdout
