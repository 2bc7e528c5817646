"""What Slurm's queue says: the array task this process runs in, whether a task is still held, and
every array task of this user that Slurm still holds (`squeue --array`). A grid's run locks
(`grid.runs.RunLock`) ask it through `SlurmQueue`, and a second `grid --slurm` through `held_tasks`."""

from __future__ import annotations

import getpass
import os
import subprocess

from lit_retrieval.errors import UsageError


class SlurmQueue:
    """Slurm as a `grid.runs.TaskQueue`: tasks are `ARRAYJOB_TASK` strings (`41_0`)."""

    def __init__(self, squeue: str = "squeue") -> None:
        self.squeue = squeue

    def current_task(self) -> str | None:
        """`ARRAYJOB_TASK` of the Slurm array task this process runs in, else None."""
        job, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
        return f"{job}_{task}" if job and task else None

    def task_ended(self, task: str) -> bool:
        """Whether Slurm no longer holds array task `task`: squeue does not list it, or no longer
        knows the job. False when squeue cannot be asked (no Slurm here: a lock stays)."""
        try:
            done = subprocess.run(
                [self.squeue, "--noheader", "--array", "--format=%i", f"--jobs={task.split('_')[0]}"],
                capture_output=True,
                text=True,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
        if done.returncode:
            return "Invalid job id" in done.stderr
        return task not in done.stdout.split()

    def held_tasks(self) -> set[str]:
        """`JOBID_TASK` of every array task of this user that Slurm still holds (pending, running,
        requeued or completing); a `UsageError` when squeue cannot answer."""
        command = [self.squeue, "--noheader", "--array", "--format=%i", f"--user={getpass.getuser()}"]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise UsageError(self.squeue, f"cannot ask Slurm which runs are still queued or running ({err})") from None
        if done.returncode:
            raise UsageError(
                self.squeue, f"cannot ask Slurm which runs are still queued or running: {done.stderr.strip()}"
            )
        return set(done.stdout.split())
