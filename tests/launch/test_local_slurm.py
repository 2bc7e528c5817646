"""The test cluster itself (`tests/launch/local_cluster.sh`): a real sbatch array whose srun steps start 2
ranks each."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm


def test_array_with_two_rank_steps(slurm_cluster, tmp_path: Path) -> None:
    script = tmp_path / "job.sbatch"
    script.write_text(
        "#!/bin/bash\n"
        "#SBATCH --array=0-1\n#SBATCH --ntasks=2\n#SBATCH --cpus-per-task=1\n#SBATCH --time=2\n"
        f"#SBATCH --output={tmp_path}/%a.out\n"
        "srun bash -c 'echo rank=$SLURM_PROCID/$SLURM_NTASKS task=$SLURM_ARRAY_TASK_ID'\n"
    )
    done = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, check=True)
    job = done.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 120
    while subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True).stdout.strip():
        assert time.monotonic() < deadline, f"job {job} still queued or running after 120 s"
        time.sleep(1)
    for task in (0, 1):
        lines = sorted((tmp_path / f"{task}.out").read_text().splitlines())
        assert lines == [f"rank=0/2 task={task}", f"rank=1/2 task={task}"]
