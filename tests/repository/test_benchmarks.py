"""The benchmark scripts leave the source tree as they found it (issue 54): `benchmarks/decoders.py` writes
its videos under `--work`, or a temporary folder it removes, and still prints its one JSON line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.media import torchcodec_or_skip

ROOT = Path(__file__).parents[2]


def tree(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if "__pycache__" not in p.parts}


def run_decoders(*args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "decoders.py"), "--videos", "tiny", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_decoder_benchmark_writes_its_videos_outside_the_source_tree(tmp_path):
    torchcodec_or_skip()
    before = tree(ROOT / "benchmarks")
    result = run_decoders("--work", str(tmp_path / "work"))
    assert [p.suffix for p in (tmp_path / "work").iterdir()] == [".mp4"]  # kept where asked
    assert len(result["rows"]) == 3 and result["rows"][0]["identical_frames"] and result["rows"][0]["pyav_pool_s"] > 0
    run_decoders()  # a temporary folder, removed
    assert tree(ROOT / "benchmarks") == before
