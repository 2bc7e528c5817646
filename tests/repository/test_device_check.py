"""`benchmarks/device_check.sh --cpu`: the GPU check's own script path at tiny sizes (what a GPU node
runs, less DeepSpeed, which needs CUDA and must say so in the JSON instead of failing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_cpu_path_writes_one_json_object(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "check.json")}
    done = subprocess.run(
        [
            "bash",
            str(ROOT / "benchmarks/device_check.sh"),
            "--cpu",
            "--parts",
            "clip4clip_mea",
            "clip4clip_mea_zero2",
            "--steps",
            "5",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert json.loads((tmp_path / "check.json").read_text()) == result
    assert result["cpu"] is True and "torch" in result["packages"] and "deepspeed" in result["packages"]
    plain, zero2 = result["parts"]["clip4clip_mea"], result["parts"]["clip4clip_mea_zero2"]
    assert "CUDA" in zero2["skipped"]
    assert plain["frames"] == 4 and plain["videos_per_s"] > 0 and plain["tflop_per_video"] > 0
    utilisation = plain["tflop_per_video"] * 1e12 * plain["videos_per_s"] / (plain["peak_tflops"] * 1e12)
    assert plain["model_flop_utilisation"] == pytest.approx(utilisation, rel=1e-2, abs=1e-9)


CASES = ROOT / "benchmarks/device_cases.sh"


def cases(*args: str, work) -> list[str]:
    env = {**os.environ, "PY": sys.executable, "WORK": str(work)}
    done = subprocess.run(["bash", str(CASES), *args], capture_output=True, text=True, env=env, timeout=600)
    return done.stdout.strip().splitlines()


def test_the_device_scripts_parse_and_list_every_gpu_case(tmp_path):
    """Issue 57, item 9: the cases the GPU node runs (benchmarks/device_cases.sh, not yet run on a GPU)."""
    for script in ("device_check.sh", "device_cases.sh", "device_wheels.sh"):
        subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / script)], check=True)
    listed = cases("--list", work=tmp_path)
    assert listed == [
        "fit_test",
        "cuda_states",
        "gpu_vs_cpu",
        "zero3_xclip",
        "gve_attention",
        "commands",
        "faiss_gpu",
        "flash_attn",
    ]
    text = CASES.read_text()
    assert all(f"\n{name}() {{" in text for name in listed)  # each listed case is a function of the script
    assert "--trainer.callbacks+" in text and "val_split test" in text  # validation on in the fit -> test cycle


def test_cases_that_cannot_run_here_say_so_in_one_line_each(tmp_path):
    lines = cases("--cpu", "cuda_states", "faiss_gpu", "flash_attn", "no_such_case", work=tmp_path)
    assert lines[0] == "case cuda_states: skipped (needs CUDA)"
    assert lines[1].startswith("case faiss_gpu: not exercised: faiss-gpu is not installed")
    assert lines[2].startswith("case flash_attn: not exercised: flash-attn is not installed")
    assert lines[3] == "case no_such_case: FAILED (no such case; --list)"
    assert lines[-1].startswith("device cases: not yet run on a GPU")


@pytest.mark.slow
def test_gve_attention_case_runs_on_the_cpu(tmp_path):
    """The GVE case's own code on the CPU: eager and SDPA in fp32, left and right padding, agree."""
    lines = cases("--cpu", "gve_attention", work=tmp_path)
    assert lines[0] == "case gve_attention: ok", (tmp_path / "gve_attention.log").read_text()[-3000:]
