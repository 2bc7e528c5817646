"""Shared fixtures: a small synthetic corpus (real mp4 files) and a tiny saved CLIP."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import lightning.pytorch  # noqa: F401  (its log handler binds the real stderr, not a test's capture that closes)
import pytest

from lit_retrieval.data.datasets.synthetic import SynthConfig, generate_corpus
from lit_retrieval.models.encoders.tiny import save_tiny_clip

# Every process the tests start resolves tools as in the venv the Slurm jobs activate (the templates' VENV): the
# venv's own `ninja` first. With the system's ninja (1.11) in local launches and the venv's (1.13) in jobs, the two
# took turns rewriting the build log of DeepSpeed's JIT-compiled CPU op (~/.cache/torch_extensions), so each
# switch rebuilt it: about 38 s of both cores, 9 times in 7 minutes of one suite run.
os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])

SMALL = SynthConfig(num_videos=24, seed=3)
SLURM_START = "bash tests/launch/local_cluster.sh start"


def _start_rank(item: pytest.Item) -> int:
    """0 for the two-node cluster's tests, 1 for the other real-Slurm tests, 2 for the rest."""
    group = item.get_closest_marker("xdist_group")
    if group is not None and group.args == ("multinode",):
        return 0
    return 1 if item.get_closest_marker("slurm") else 2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The real-Slurm tests first, the two-node cluster's before the others, each group in collected order.

    `make test` runs `--dist worksteal`: each worker starts with a contiguous third of this order and idle workers
    steal from the end of another's queue, so the first worker keeps the Slurm tests. They spend minutes waiting on
    the scheduler (the two-node tests one at a time under `cluster_turn`, a requeued job's 2-minute hold), which the
    other workers' tests fill; collected last, they ran at the end with the CPUs idle (docs/benchmarks.md).
    """
    items.sort(key=_start_rank)


def _slurm_partition_up() -> str | None:
    """None when a real Slurm takes jobs here, else why not."""
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        return "no Slurm client (sinfo, sbatch) on PATH"
    try:
        done = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "sinfo did not answer in 20 s"
    states = done.stdout.split()
    if done.returncode != 0 or not any(s.rstrip("*~#").startswith(("idle", "mixed", "alloc")) for s in states):
        return f"no Slurm node takes jobs (sinfo: {done.stdout.strip() or done.stderr.strip()!r})"
    return None


@pytest.fixture(scope="session")
def slurm_cluster() -> None:
    """A real Slurm (slurmctld + slurmd) on this machine, as `tests/launch/local_cluster.sh start` makes it.

    Tests marked `slurm` take this fixture. Without a running cluster they skip here with the reason and
    the command that starts one; under CI (`CI=true`, where `.ci/run` starts it) they fail instead.
    """
    why = _slurm_partition_up()
    if why is None:
        return
    message = f"real Slurm needed: {why}; start it with `{SLURM_START}`"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(autouse=True)
def _process_state_restored():
    """Each test starts with this pytest process's torch/faiss CPU thread counts and signal handlers.
    Commands run in-process set them for their process: the search service its threads (`serve
    --threads`; later tests compare in-process training with subprocess runs bit for bit, and a different
    thread count changes the last bits of a reduction), `grid --task` a SIGUSR1 handler (with one
    installed, Lightning sets no Slurm requeue handler in a later in-process fit)."""
    import signal
    import sys

    import torch

    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)}
    before = torch.get_num_threads()
    faiss = sys.modules.get("faiss")
    faiss_before = faiss.omp_get_max_threads() if faiss else None
    yield
    if torch.get_num_threads() != before:
        torch.set_num_threads(before)
    faiss = sys.modules.get("faiss")
    if faiss is not None and faiss_before is not None and faiss.omp_get_max_threads() != faiss_before:
        faiss.omp_set_num_threads(faiss_before)
    for signum, handler in handlers.items():
        if signal.getsignal(signum) is not handler and handler is not None:
            signal.signal(signum, handler)


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Path:
    """Folder with `annotations.json`, `events.json` and `videos/` of 24 synthetic videos."""
    out = tmp_path_factory.mktemp("corpus")
    generate_corpus(out, SMALL, workers=1, progress=False)
    return out


@pytest.fixture(scope="session")
def event_pool(corpus) -> dict[str, dict]:
    return {e["event_id"]: e for e in json.loads((corpus / "events.json").read_text())}


@pytest.fixture(scope="session")
def tiny_clip(tmp_path_factory) -> Path:
    """A random tiny CLIPModel + character tokenizer written with `save_pretrained`."""
    return save_tiny_clip(tmp_path_factory.mktemp("tiny_clip"), seed=0)


@pytest.fixture(scope="module")
def encoder(tiny_clip):
    """The tiny CLIP loaded as a `CLIPEncoder`, one per test module (heads may hook into it)."""
    from lit_retrieval.models.encoders import CLIPEncoder

    return CLIPEncoder(pretrained=str(tiny_clip))


@pytest.fixture(scope="session")
def tiny_qwen(tmp_path_factory) -> Path:
    """A random tiny Qwen2.5-VL + character tokenizer and processors, via `save_pretrained`."""
    from lit_retrieval.models.gve.tiny import save_tiny_qwen25vl

    return save_tiny_qwen25vl(tmp_path_factory.mktemp("tiny_qwen"), seed=0)


@pytest.fixture(scope="session")
def gve_tasks(corpus, tmp_path_factory):
    """GVE task files (T->V, T->I, I->V, V->V, TV->V) made from the synthetic corpus."""
    from lit_retrieval.data.gve.synthetic import make_gve_tasks

    return make_gve_tasks(corpus, tmp_path_factory.mktemp("gve_tasks"), batch_size=4)
