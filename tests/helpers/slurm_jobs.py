"""Jobs on the REAL test Slurm (`tests/launch/local_cluster.sh`), as the `slurm`-marked tests submit them: the
project's templates rendered with `lit-retrieval slurm`, submitted with `sbatch` in this checkout's
environment, and polled with `scontrol show job` (the test cluster keeps no accounting) with bounded waits."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from helpers.fit_configs import clean_launch_env

ROOT = Path(__file__).resolve().parents[2]

VENV = Path(sys.executable).parent.parent  # the environment running the tests; the jobs activate it

ENDED = ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE")

COMMON = {"ACCOUNT": "test", "PARTITION": "local", "TIME": "15", "VENV": str(VENV)}

CPU_FIT = {"GPUS": "0", "TASKS_PER_NODE": "1", "ACCELERATOR": "cpu", "CPUS_PER_TASK": "1", "MEM": "6G"}

WAIT = 900  # seconds a job may take, queueing behind other tests' jobs on 2 CPUs included


def job_env() -> dict[str, str]:
    """What the jobs inherit (sbatch exports the submitter's environment): this checkout and the
    tests' callbacks on PYTHONPATH, no rank or Slurm variables of the test process."""
    env = clean_launch_env(str(ROOT / "tests"))
    env["PYTHONPATH"] = f"{ROOT}:{env['PYTHONPATH']}"
    return env


def render(template: str, out: Path, **values: str) -> Path:
    """`lit-retrieval slurm <template> --set ... --out out` (the command users run: the shipped template)."""
    settings = [f"{k}={v}" for k, v in {**COMMON, **values}.items()]
    subprocess.run(
        [sys.executable, "-m", "lit_retrieval", "slurm", template, "--set", *settings, "--out", str(out)],
        cwd=ROOT,
        env=job_env(),
        check=True,
        capture_output=True,
    )
    return out


def submit(script: Path) -> str:
    done = subprocess.run(
        ["sbatch", "--parsable", str(script)], cwd=ROOT, env=job_env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def job(job_id: str) -> dict[str, str]:
    """`scontrol show job -o` as a dict (JobState, Restarts, ExitCode, ...)."""
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True).stdout
    return dict(field.split("=", 1) for field in out.split() if "=" in field)


def assert_index_as_one_process(config: Path, videos: Path, sharded: Path, single: Path) -> None:
    """`index` builds `sharded` from the embedded parts an array wrote; its vectors equal one process's."""
    import faiss

    from lit_retrieval.commands import run_command
    from lit_retrieval.search.index import VideoIndex

    index_args = ["--config", str(config), "--videos", str(videos), "--out", str(sharded)]
    assert run_command("index", index_args) == 0

    def vectors(path: Path) -> dict[str, np.ndarray]:
        index = VideoIndex.load(path)
        flat = faiss.downcast_index(index.index)
        return dict(zip(index.videos, flat.reconstruct_n(0, flat.ntotal)))

    got, want = vectors(sharded), vectors(single)
    assert got.keys() == want.keys() and len(want) == 24
    for video, vector in want.items():
        np.testing.assert_allclose(got[video], vector, atol=1e-5)


def wait_for(what: str, done, job_id: str, timeout: float = WAIT, show=job) -> None:
    """Poll `done` each second; past `timeout` fail with the job's record (`show`: this cluster's)."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"{what}: not after {timeout} s; job {job_id}: {show(job_id)}"
        time.sleep(1)


def wait_for_end(job_id: str, restarts: int = 0, show=job, timeout: float = WAIT) -> dict[str, str]:
    """The job's record once it has ended after `restarts` requeues."""
    info: dict[str, str] = {}

    def ended() -> bool:
        info.update(show(job_id))
        return info.get("JobState") in ENDED and int(info.get("Restarts", 0)) >= restarts

    wait_for(f"job {job_id} to end", ended, job_id, timeout, show)
    return info


def preempt_once(job_id: str, paused: Path) -> dict[str, str]:
    """Once the fit has written `paused`, SIGUSR1 to the job's step (Lightning saves and requeues), then
    the job's record after it ran again to its end."""
    wait_for(f"the fit to write {paused.name}", paused.exists, job_id)
    subprocess.run(["scancel", "--signal=USR1", job_id], check=True)
    requeued = {"JobState": "PENDING", "Restarts": "1"}
    wait_for("the requeue", lambda: requeued.items() <= job(job_id).items(), job_id)
    start_requeued(job_id)
    return wait_for_end(job_id, restarts=1)


def start_requeued(job_id: str) -> None:
    """Release a job seen pending after its requeue 2 s after it was seen, rather than after Slurm's hold of about 2
    minutes (its begin time). Released at once, slurmd may refuse the launch: its credential dates from the second
    in which the previous run's credential was revoked ("Killing non-startable batch JobId=38: Job credential
    revoked", the job FAILED; seen once on a loaded machine, released 0.7 s after the requeue)."""
    time.sleep(2)
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], capture_output=True)


def output(run: Path) -> str:
    return "".join(p.read_text() for p in sorted((run / "slurm").glob("*.out")))


def fit_job(tmp_path: Path, config: Path, run: Path, **values: str) -> Path:
    values = {**CPU_FIT, "CONFIG": str(config), "RUN_DIR": str(run), **values}
    return render("fit.sbatch", tmp_path / "fit.sbatch", **values)
