"""The install as the README prints it, up to what needs CUDA to build (pyproject.toml's extras,
the Makefile's steps; the `gpu` extra's single faiss: test_packaging.py), and the CPU DeepSpeed
strategy's refusal of a GPU accelerator.

What cannot run here: installing the `gpu` extra itself (faiss-gpu-cu12 pulls about 600 MB of
nvidia-* wheels, which pip downloads even for `--dry-run` where the index serves no metadata
files) and building flash-attn (needs CUDA). Their pins are checked against the registry instead:
a release inside each range exists for this Python. The registry checks skip, saying so, when it
cannot be reached."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def make_install(tmp_path: Path, **variables: str) -> list[str]:
    """The commands `make install` would run for a fresh venv in `tmp_path` (`make -n`)."""
    args = [f"{k}={v}" for k, v in {"VENV": str(tmp_path / "venv"), **variables}.items()]
    out = subprocess.run(["make", "-n", "-B", "install", *args], cwd=ROOT, capture_output=True, text=True, check=True)
    return [line for line in out.stdout.splitlines() if " pip install " in line]


def flash_attn_pin() -> str:
    return re.search(r"^FLASH_ATTN \?= (.+)$", (ROOT / "Makefile").read_text(), re.M).group(1)


def test_gpu_install_puts_torch_first_and_never_builds_flash_attn(tmp_path):
    steps = make_install(tmp_path, TORCH="torch==2.6.0 torchvision==0.21.0", EXTRAS="dev,gpu")
    assert steps[0].endswith("pip install --quiet torch==2.6.0 torchvision==0.21.0")
    assert steps[1].startswith("DS_BUILD_OPS=0 ") and steps[1].endswith("-e '.[dev,gpu]'")  # no `cpu`: one faiss
    assert len(steps) == 2  # flash-attn is opt-in: `make install-flash-attn`
    assert not any("flash-attn" in req for reqs in EXTRAS.values() for req in reqs)  # never under build isolation


def test_flash_attn_is_built_against_the_installed_torch_on_request(tmp_path):
    args = [f"VENV={tmp_path / 'venv'}", "MAX_JOBS=2"]
    out = subprocess.run(["make", "-n", "install-flash-attn", *args], cwd=ROOT, capture_output=True, text=True)
    step = [line for line in out.stdout.splitlines() if "pip install --no-build-isolation" in line]
    assert step == [f"MAX_JOBS=2 {tmp_path}/venv/bin/python -m pip install --no-build-isolation '{flash_attn_pin()}'"]


def test_default_install_has_deepspeed_faiss_cpu_and_no_flash_attn(tmp_path):
    steps = make_install(tmp_path)
    assert steps[-1].endswith("-e '.[dev,deepspeed,cpu]'") and not any("flash" in step for step in steps)
    assert any(Requirement(r).name == "deepspeed" for r in EXTRAS["deepspeed"])
    assert [Requirement(r).name for r in EXTRAS["cpu"]] == ["faiss-cpu"]
    assert "lit-retrieval[deepspeed]" in EXTRAS["gpu"]


def pip(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "pip", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    if done.returncode != 0 and re.search(r"Network is unreachable|Could not fetch URL|connection", done.stderr, re.I):
        pytest.skip(f"the package registry cannot be reached: {done.stderr.strip().splitlines()[-1]}")
    return done


def test_default_extras_resolve_with_the_installed_torch(tmp_path):
    """What `make install` resolves after its torch step: nothing may replace that torch."""
    import torch
    import torchvision

    # the public version: `==2.14.1` matches the installed 2.14.1+cu130 (a local label) as the Makefile's pin does
    pins = [f"{m.__name__}=={m.__version__.split('+')[0]}" for m in (torch, torchvision)]
    report = tmp_path / "report.json"
    done = pip("install", "--dry-run", "--quiet", "--report", str(report), *pins, "-e", ".[dev,deepspeed,cpu]")
    assert done.returncode == 0, done.stderr[-2000:]
    planned = {item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"]}
    assert not planned & {"torch", "torchvision"}, planned


@pytest.mark.parametrize("requirement", [*(r for r in EXTRAS["gpu"] if "lit-retrieval" not in r), flash_attn_pin()])
def test_cuda_pins_have_a_release_for_this_python(requirement):
    req = Requirement(requirement)
    done = pip("index", "versions", req.name)
    assert done.returncode == 0, done.stderr[-1000:]
    versions = re.search(r"Available versions: (.+)", done.stdout).group(1).split(", ")
    assert any(req.specifier.contains(v) for v in versions), (requirement, versions[:5])


def test_cpu_run_refuses_a_gpu_deepspeed_accelerator(monkeypatch):
    pytest.importorskip("deepspeed")
    import deepspeed.accelerator

    from lit_retrieval.errors import ConfigError
    from lit_retrieval.strategies import check_deepspeed_accelerator

    check_deepspeed_accelerator()  # this machine: DeepSpeed's CPU accelerator

    class Cuda:
        def device_name(self) -> str:
            return "cuda"

    monkeypatch.setattr(deepspeed.accelerator, "get_accelerator", lambda: Cuda())
    with pytest.raises(ConfigError, match="set DS_ACCELERATOR=cpu"):
        check_deepspeed_accelerator()
