"""The project as users install it (issue 40): the wheel holds every Slurm template and shipped config,
the shipped files are found outside a checkout, the `gpu` extra installs one faiss, and the commands that
do not train import neither Lightning nor transformers. `.ci/wheel_check.sh` (CI) installs the wheel
into a fresh venv and runs the quick start from the packaged config."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_CONFIGS = sorted(
    str(p.relative_to(ROOT)) for p in ROOT.glob("configs/**/*") if p.suffix in (".yaml", ".md") and p.is_file()
)
TEMPLATES = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("slurm/*.sbatch"))


def test_the_wheel_holds_every_template_and_shipped_config(tmp_path):
    subprocess.run(["bash", str(ROOT / ".ci" / "build_wheel.sh"), str(tmp_path)], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("lit_retrieval-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert len(SHIPPED_CONFIGS) > 80 and len(TEMPLATES) == 4
    missing = [path for path in SHIPPED_CONFIGS + TEMPLATES if f"lit_retrieval/{path}" not in names]
    assert not missing
    assert not any(name.endswith(("local_cluster.sh", "slurm/README.md")) for name in names)  # templates only


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lit_retrieval", *args], cwd=cwd, capture_output=True, text=True)


def test_shipped_template_and_configs_outside_a_checkout(tmp_path):
    """From an empty folder: `slurm slurm/fit.sbatch` renders the shipped template, `configs copy` writes
    the files byte for byte under configs/, and a second copy refuses to overwrite (exit 2, one line)."""
    done = run_cli("slurm", "slurm/fit.sbatch", "--set", "CONFIG=configs/quickstart.yaml", "ACCOUNT=proj",
                   "PARTITION=a100", "RUN_DIR=runs/q", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "srun --kill-on-bad-exit=1 lit-retrieval fit --config configs/quickstart.yaml" in done.stdout
    assert "#SBATCH --account=proj" in done.stdout and "{{" not in done.stdout
    listed = run_cli("configs", "list", cwd=tmp_path).stdout.split()
    assert listed == [p.removeprefix("configs/") for p in SHIPPED_CONFIGS]
    assert run_cli("configs", "copy", "quickstart.yaml", "plans", cwd=tmp_path).returncode == 0
    copied = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.glob("configs/**/*") if p.is_file())
    assert copied == [p for p in SHIPPED_CONFIGS if p == "configs/quickstart.yaml" or p.startswith("configs/plans/")]
    assert all((tmp_path / p).read_bytes() == (ROOT / p).read_bytes() for p in copied)
    again = run_cli("configs", "copy", "quickstart.yaml", cwd=tmp_path)
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "configs/quickstart.yaml: exists" in again.stderr


LIGHT_COMMANDS = [["--help"], ["metrics", "--help"], ["report", "--help"], ["slurm", "--help"], ["grid", "--help"],
                  ["configs", "list"]]  # fmt: skip


def test_commands_that_do_not_train_import_neither_lightning_nor_transformers():
    """Each command in a fresh interpreter; what it imported is read from sys.modules."""
    script = (
        "import contextlib, io, json, sys\nfrom lit_retrieval.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n    try:\n        main(json.loads(sys.argv[1]))\n"
        "    except SystemExit as e:\n        assert e.code in (0, None), e.code\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'lightning', 'pytorch_lightning', 'transformers'}))"
    )
    for argv in LIGHT_COMMANDS:
        done = subprocess.run([sys.executable, "-c", script, json.dumps(argv)], capture_output=True, text=True)
        assert done.returncode == 0 and done.stdout.strip() == "[]", (argv, done.stdout, done.stderr[-500:])


def test_the_gpu_extra_installs_one_faiss(tmp_path):
    """pip's resolution of `.[gpu]`'s own requirements (the project's metadata as pip builds it, the extras
    it names expanded), installed with --no-deps into a temp dir: exactly one distribution writes faiss/
    (faiss-cpu beside faiss-gpu-cu12 breaks `import faiss`). The requirements of those distributions are
    not followed (nvidia-* wheels, 600 MB); the full resolution was checked by hand (README)."""
    report = tmp_path / "project.json"
    pip = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed", "--no-deps"]
    done = subprocess.run([*pip, "--report", str(report), ".[gpu]"], cwd=ROOT, capture_output=True, text=True)
    if done.returncode and "connect" in done.stderr.lower():
        pytest.skip(f"the package registry cannot be reached: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr[-2000:]
    requires = [Requirement(r) for r in json.loads(report.read_text())["install"][0]["metadata"]["requires_dist"]]
    assert not [r for r in requires if r.marker is None and r.name.startswith("faiss")]  # no faiss in every install
    extras = {"gpu"}
    while True:  # `lit-retrieval[deepspeed]` inside `gpu`: follow the project's own extras
        active = [r for r in requires if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in extras)]
        more = {e for r in active if r.name == "lit-retrieval" for e in r.extras} - extras
        if not more:
            break
        extras |= more
    # the extras' distributions but DeepSpeed (a source archive whose build imports torch, and holds no faiss)
    wanted = [f"{r.name}{r.specifier}" for r in active if r.marker and r.name not in ("lit-retrieval", "deepspeed")]
    target = tmp_path / "target"
    install = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile", "--target", str(target)]
    done = subprocess.run([*install, *wanted], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    owners = [d.name for d in target.glob("*.dist-info") if "faiss/__init__.py" in (d / "RECORD").read_text()]
    assert len(owners) == 1 and owners[0].startswith("faiss_gpu_cu12"), owners
