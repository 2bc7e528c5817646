"""Stand-ins for Slurm's commands, for the `grid --slurm` tests that need no real cluster."""

from __future__ import annotations

import os
from pathlib import Path


def fake_slurm(tmp_path: Path, queued: str = "") -> dict[str, str]:
    """`sbatch` that records its arguments and answers like Slurm; `srun` that records its own;
    `squeue` that lists `queued` (array tasks as JOB_TASK)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "sbatch").write_text(
        f'#!/bin/bash\necho "$@" >> "{tmp_path}/sbatch.log"\necho "Submitted batch job 777"\n'
    )
    (bin_dir / "srun").write_text(f'#!/bin/bash\necho "$@" >> "{tmp_path}/srun.log"\n')
    (bin_dir / "squeue").write_text(f"#!/bin/bash\necho '{queued}' | tr ' ' '\\n'\n")
    for tool in ("sbatch", "srun", "squeue"):
        (bin_dir / tool).chmod(0o755)
    (tmp_path / "venv" / "bin").mkdir(parents=True, exist_ok=True)
    (tmp_path / "venv" / "bin" / "activate").write_text("")
    return {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SLURM_ARRAY_TASK_ID": "2",
        "SLURM_ARRAY_JOB_ID": "777",
        "SLURM_JOB_NODELIST": "gpu01",
    }
