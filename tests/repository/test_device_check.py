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
