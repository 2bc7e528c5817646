"""Multi-node training under a REAL two-node Slurm (`bash tests/launch/local_cluster.sh start --nodes 2`): two slurmd
daemons, each in its own network + UTS namespace (lit-node1 = 10.77.0.2, lit-node2 = 10.77.0.3 on a bridge the
script makes), one slurmctld, munge. Every job is one of the shipped templates as `lit-retrieval slurm` renders
it, submitted with sbatch to that cluster (SLURM_CONF, exported to the jobs), on CPU with gloo:

- `fit.sbatch` with NODES=2 TASKS_PER_NODE=2: 4 ranks with their global/local/node ranks from Slurm,
  MASTER_ADDR the first node, gloo across the namespaces; each epoch's videos split over the ranks (none twice,
  the one-process epoch's set); the weights of a one-node 4-rank job (NODES=1 TASKS_PER_NODE=4);
- DeepSpeed ZeRO-2 and ZeRO-3 (configs/strategy/) on 2 nodes: the checkpoint directory holds the shards of
  the ranks of both nodes, `lit-retrieval convert-checkpoint` consolidates it, a second job resumes it;
- a node lost in the middle of a fit (every process of lit-node2 killed, as at a power failure): the job ends
  as Slurm decides (FAILED / NODE_FAIL, or requeued), the node comes back, and the next start resumes from
  the last checkpoint and ends with the uninterrupted 2 x 2 weights (no step trained twice);
- `grid --slurm`: the array's two runs run on different nodes; `cache-frames` and `index --embed-only`
  arrays (`array.sbatch`, 2 shards) on both nodes write what one process writes.

The tests share one cluster (.ci/run starts it): one test at a time uses it (a lock every pytest-xdist worker
takes), and the reference jobs run once per session. Without the cluster they skip (needing root for the
namespaces, or saying how to start it); under CI as root they fail.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from helpers.cli_server import run_cli
from helpers.fit_configs import base_trainer, clean_launch_env, clip_fit_config
from helpers.slurm_jobs import (
    ENDED,
    assert_index_as_one_process,
    job_env,
    output,
    render,
    wait_for,
    wait_for_end,
)

# xdist_group: one worker, once pytest-xdist groups again under pytest 9.2 (`cluster_turn` serialises meanwhile);
# timeout: a test may wait for another worker's test and the shared reference jobs
pytestmark = [
    pytest.mark.slurm,
    pytest.mark.slow,
    pytest.mark.distributed,
    pytest.mark.xdist_group("multinode"),
    pytest.mark.timeout(1500),
]

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parent.parent  # the environment running the tests; the jobs activate it
MULTI_CONF = Path(os.environ.get("LIT_SLURM_MULTI_DIR", "/var/lib/lit-retrieval-slurm-nodes")) / "slurm.conf"
START = "bash tests/launch/local_cluster.sh start --nodes 2"
CLUSTER_SCRIPT = ["bash", "tests/launch/local_cluster.sh"]
PARTITION = "multi"
ADDRESSES = {"lit-node1": "10.77.0.2", "lit-node2": "10.77.0.3"}
NODES = tuple(ADDRESSES)
# GRES=none: no GPU asked for; MEM is per node (both namespaces share this machine's memory)
CPU = {"ACCOUNT": "test", "PARTITION": PARTITION, "TIME": "15", "VENV": str(VENV), "GPUS": "0", "GRES": "none"}
FIT = {**CPU, "ACCELERATOR": "cpu", "CPUS_PER_TASK": "1", "MEM": "4G"}
WAIT = 600  # seconds a job may take here (2 cores; the suite's other worker runs meanwhile)


def slurm_env() -> dict[str, str]:
    """The jobs' environment (this checkout and the tests' callbacks on PYTHONPATH, no rank variables of this
    process) with the two-node cluster's config: for sbatch, which exports it to the jobs, and for every client."""
    return {**job_env(), "SLURM_CONF": str(MULTI_CONF)}


def slurm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), env=slurm_env(), capture_output=True, text=True, timeout=60)


def _cluster_down() -> str | None:
    """None when both nodes of the two-node cluster take jobs, else why not."""
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        return "no Slurm client (sinfo, sbatch) on PATH"
    if not MULTI_CONF.is_file():
        return f"no two-node cluster config ({MULTI_CONF})"
    done = slurm("sinfo", "-h", "-N", "-p", PARTITION, "-o", "%N %T")
    up = sorted(n for n, s in (line.split() for line in done.stdout.splitlines()) if s.startswith(("idle", "mix")))
    if done.returncode != 0 or up != list(NODES):
        said = (done.stdout.strip() or done.stderr.strip() or "nothing").splitlines()[-1]
        return f"its nodes do not all take jobs (sinfo: {said!r})"
    return None


@pytest.fixture(scope="module")
def nodes() -> None:
    """The two-node cluster, started by .ci/run (`tests/launch/local_cluster.sh start --nodes 2`). Without it: a skip,
    saying that it needs root (namespaces, a bridge, the daemons) or how to start it; under CI as root: a failure."""
    why = _cluster_down()
    if why is None:
        return
    if os.geteuid() != 0 and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode != 0:
        pytest.skip(f"two-node Slurm needed ({why}); making its network namespaces needs root")
    message = f"two-node Slurm needed: {why}; start it with `{START}`"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message)
    pytest.skip(message)


def submit(script: Path, *options: str) -> str:
    done = subprocess.run(
        ["sbatch", "--parsable", *options, str(script)], cwd=ROOT, env=slurm_env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def show(job_id: str) -> dict[str, str]:
    """`scontrol show job -o` as a dict (JobState, Restarts, NodeList, ...; the cluster keeps no accounting)."""
    out = slurm("scontrol", "show", "job", "-o", job_id).stdout
    return dict(field.split("=", 1) for field in out.split() if "=" in field)


# the one-node tests' polling, on this cluster's records and wait
wait_until = functools.partial(wait_for, timeout=WAIT, show=show)
wait_end = functools.partial(wait_for_end, timeout=WAIT, show=show)


def timing(name: str, started: float, **facts) -> None:
    print(json.dumps({"slurm_multinode": name, **facts, "wall_s": round(time.monotonic() - started, 1)}))


def checkpoint_callback(run: Path, every_step: bool = False) -> dict:
    init = {"dirpath": str(run / "checkpoints"), "save_last": True, "save_top_k": 0, "enable_version_counter": False}
    if every_step:
        init["every_n_train_steps"] = 1
    return {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint", "init_args": init}


def ddp_config(path: Path, tiny_clip: Path, corpus: Path, run: Path, *callbacks: dict) -> Path:
    """The tiny CLIP fit of 2 epochs of 2 global batches of 8 (4 ranks x 2) with cross-device negatives (the
    global batch decides the loss, so the ranks' layout does not), a checkpoint after every step, each rank's
    record (multinode_callbacks.RecordRank in `run/ranks`)."""
    record = {"class_path": "helpers.multinode_callbacks.RecordRank", "init_args": {"out": str(run / "ranks")}}
    trainer = {
        "max_epochs": 2,
        "logger": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "limit_val_batches": 0,
        "callbacks": [record, *callbacks, checkpoint_callback(run, every_step=True)],
    }
    raw = clip_fit_config(
        tiny_clip, corpus, trainer, model={"cross_device": True}, data={"val_split": "test", "batch_size": 2}
    )
    path.write_text(yaml.safe_dump(raw))
    return path


def fit_script(path: Path, config: Path | str, run: Path, nodes: int, tasks: int, **extra: str) -> Path:
    """fit.sbatch rendered for this cluster: NODES x TASKS_PER_NODE CPU ranks of one thread each; `config` is
    CONFIG (the script's `--config` value: a file, or files joined by ` --config `)."""
    values = {**FIT, "CONFIG": str(config), "RUN_DIR": str(run), "NODES": str(nodes), "TASKS_PER_NODE": str(tasks)}
    return render("fit.sbatch", path, **values, **extra)


def ranks(run: Path, world: int) -> list[dict]:
    return [json.loads((run / "ranks" / f"rank{r}.json").read_text()) for r in range(world)]


def final_weights(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]


def shared_root(tmp_path_factory) -> Path:
    """A folder every pytest-xdist worker of this session sees: the session's base temp (a worker's parent)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextlib.contextmanager
def cluster_turn(root: Path):
    """This session's exclusive use of the two-node cluster (an flock every worker takes). pytest-xdist's
    `xdist_group` cannot keep these tests on one worker under pytest 9.2 (pytest-xdist issue 1386: loadgroup
    no longer groups), and a lost node must not fail another test's job."""
    with open(root / "slurm-multinode.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


@pytest.fixture(autouse=True)
def one_test_at_a_time(nodes, tmp_path_factory):
    with cluster_turn(shared_root(tmp_path_factory)):
        yield


@pytest.fixture(scope="module")
def two_by_two(nodes, tiny_clip, corpus, tmp_path_factory) -> dict[str, Path]:
    """The uninterrupted fit on 2 nodes x 2 ranks, the same fit on 1 node x 4 ranks (both jobs of the
    cluster) and in one process here (batch 8): their run folders, and the model and corpus they used. Run once
    per session (under the cluster's lock; a second worker reads them from `done.json`)."""
    from lit_retrieval.cli import main

    root = shared_root(tmp_path_factory)
    work = root / "multinode_ddp"
    with cluster_turn(root):
        if (work / "done.json").is_file():
            return {k: Path(v) for k, v in json.loads((work / "done.json").read_text()).items()}
        started = time.monotonic()
        work.mkdir(exist_ok=True)
        runs = {name: work / name for name in ("two_by_two", "one_by_four", "one")}
        jobs = {}
        for name, (n, t) in {"two_by_two": (2, 2), "one_by_four": (1, 4)}.items():
            config = ddp_config(work / f"{name}.yaml", tiny_clip, corpus, runs[name])
            jobs[name] = submit(fit_script(work / f"{name}.sbatch", config, runs[name], n, t, JOB_NAME=name))
        one = ddp_config(work / "one.yaml", tiny_clip, corpus, runs["one"])
        main(["fit", "--config", str(one), "--trainer.devices", "1", "--data.init_args.batch_size", "8",
              "--trainer.default_root_dir", str(runs["one"])])  # fmt: skip
        for name, job_id in jobs.items():
            info = wait_end(job_id)
            assert info["JobState"] == "COMPLETED", output(runs[name])[-4000:]
            runs[f"{name}_nodes"] = Path(info["NodeList"])
        runs.update(tiny_clip=tiny_clip, corpus=corpus)
        (work / "done.json").write_text(json.dumps({k: str(v) for k, v in runs.items()}))
        timing("ddp_jobs", started, jobs=2)
        return runs


def test_fit_on_two_nodes_ranks_shards_and_weights(two_by_two):
    """2 nodes x 2 ranks: Slurm's ranks as Lightning read them, MASTER_ADDR lit-node1 for every rank, gloo
    over the bridge; each epoch's 16 training videos split over the 4 ranks (none twice, the one-process
    epoch's set; 17 = 2 x 8 + 1 leaves one over, as in one process); weights = the 1 x 4 job's."""
    started = time.monotonic()
    run = two_by_two["two_by_two"]
    assert str(two_by_two["two_by_two_nodes"]) == "lit-node[1-2]" and "2 x 2 tasks" in output(run)
    got = ranks(run, 4)
    ports = {r["master_port"] for r in got}
    assert len(ports) == 1 and None not in ports
    for rank, record in enumerate(got):
        node, local = divmod(rank, 2)
        host = NODES[node]
        assert (record["global_rank"], record["node_rank"], record["local_rank"]) == (rank, node, local), record
        assert (record["world_size"], record["num_nodes"]) == (4, 2)
        assert record["slurm"]["SLURM_PROCID"] == str(rank) and record["slurm"]["SLURM_NODEID"] == str(node)
        assert record["slurm"]["SLURM_LOCALID"] == str(local) and record["slurm"]["SLURM_NODELIST"] == "lit-node[1-2]"
        assert (record["hostname"], record["address"]) == (host, ADDRESSES[host])
        assert record["master_addr"] == "lit-node1"  # the first node of SLURM_NODELIST
    one = json.loads((two_by_two["one"] / "ranks" / "rank0.json").read_text())
    four = ranks(two_by_two["one_by_four"], 4)
    for epoch in ("0", "1"):
        seen = [video for record in got for batch in record["epochs"][epoch] for video in batch]
        assert len(seen) == len(set(seen)) == 16, epoch  # no video twice in the epoch
        assert set(seen) == {video for batch in one["epochs"][epoch] for video in batch}  # none missing
        for step in range(2):  # each step's global batch: the one-process batch, and the 1 x 4 job's
            batch = sorted(video for record in got for video in record["epochs"][epoch][step])
            assert batch == sorted(one["epochs"][epoch][step])
            assert batch == sorted(video for record in four for video in record["epochs"][epoch][step])
        shards = [set(video for batch in record["epochs"][epoch] for video in batch) for record in got]
        assert all(len(shard) == 4 for shard in shards)  # each rank its own 4 videos
    assert {r["hostname"] for r in four} == {str(two_by_two["one_by_four_nodes"])}
    reference, weights = final_weights(two_by_two["one_by_four"]), final_weights(run)
    assert weights.keys() == reference.keys()
    differences = {name: (weights[name] - value).abs().max().item() for name, value in reference.items()}
    for name, value in reference.items():
        torch.testing.assert_close(weights[name], value, atol=1e-6, rtol=1e-5, msg=name)
    one_weights = final_weights(two_by_two["one"])
    for name, value in one_weights.items():  # and one process's batch of 8, as tests/launch/test_slurm_cluster.py
        torch.testing.assert_close(weights[name], value, atol=2e-5, rtol=1e-4, msg=name)
    timing("ddp_two_nodes", started, max_abs_vs_one_node=max(differences.values()))


def test_a_node_lost_mid_fit_ends_the_job_and_the_next_start_resumes_without_training_a_step_twice(
    two_by_two, tmp_path
):
    """The 2 x 2 fit, paused after step 3 on every rank; then lit-node2 is lost (`local_cluster.sh kill-node 2`:
    SIGKILL to slurmd, the step's slurmstepd and its 2 ranks, as at a power failure) and the ranks of lit-node1
    go on into a collective that cannot complete. Slurm ends or requeues the job as it decides; the node comes
    back (`start-node 2`); the requeued job or, for a FAILED one, the same script submitted again resumes from
    the newest checkpoint on disk (`--ckpt_path newest`) and trains exactly the steps after it: its batches
    are the uninterrupted run's from that step on, and it ends with the uninterrupted 2 x 2 weights."""
    started = time.monotonic()
    run, marker, release, starts = tmp_path / "run", tmp_path / "paused", tmp_path / "release", tmp_path / "starts"
    pause = {
        "class_path": "helpers.interrupt_callbacks.PauseAtStep",
        "init_args": {"step": 3, "marker": str(marker), "release": str(release)},
    }
    start_step = {"class_path": "helpers.interrupt_callbacks.RecordStartStep", "init_args": {"path": str(starts)}}
    model_and_data = two_by_two["tiny_clip"], two_by_two["corpus"]  # the reference's (it may be another worker's)
    config = ddp_config(tmp_path / "fit.yaml", *model_and_data, run, pause, start_step)
    script = fit_script(tmp_path / "fit.sbatch", config, run, 2, 2, JOB_NAME="node_lost")
    first = submit(script)
    wait_until("the fit to pause after step 3", marker.exists, first)
    time.sleep(2)  # every rank is in the pause (they reach it together: step 3's all-reduce joined them)
    lost = subprocess.run([*CLUSTER_SCRIPT, "kill-node", "2"], cwd=ROOT, capture_output=True)
    assert lost.returncode == 0, lost.stderr
    release.touch()
    decided: dict[str, str] = {}

    def slurm_decided() -> bool:
        decided.clear()
        decided.update(show(first))
        state, restarts = decided.get("JobState"), int(decided.get("Restarts", 0))
        return state in ENDED or (restarts >= 1 and state in ("PENDING", "REQUEUED"))

    try:
        wait_until("Slurm to end or requeue the job", slurm_decided, first, timeout=180)
    finally:
        back = subprocess.run([*CLUSTER_SCRIPT, "start-node", "2"], cwd=ROOT, capture_output=True)
    assert back.returncode == 0, back.stderr
    from lit_retrieval.checkpoint_io import checkpoint_step

    resumed_from = checkpoint_step(run / "checkpoints" / "last.ckpt")
    assert resumed_from in (2, 3), resumed_from  # a checkpoint after every step; the loss came after step 3
    requeued = int(decided.get("Restarts", 0)) >= 1
    if requeued:
        # Slurm holds a requeued job back about 2 minutes (its begin time); the test keeps that hold (issue 56).
        # Released at once (`scontrol update StartTime=now`, as this test did), the restart ended FAILED, exit 143,
        # in 2 of 2 runs on a loaded machine: srun's kill of the first run's step could not reach the lost node,
        # slurmctld queued it for retry (REQUEST_SIGNAL_TASKS) and re-sent it about 60 s later, when the requeued
        # job (same job and step ids) ran there again: it killed the new ranks. Within the hold the stale kill
        # finds no step. Released within a second of the requeue (seen once), srun also found 1 node of its 2.
        info = wait_end(first, restarts=1)
    else:
        info = wait_end(submit(script))
    log = output(run)
    assert info["JobState"] == "COMPLETED", log[-4000:]
    # every rank appends its start step: the restart began where the checkpoint was
    assert starts.read_text().split() == ["0"] * 4 + [str(resumed_from)] * 4
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 4
    whole, again = ranks(two_by_two["two_by_two"], 4), ranks(run, 4)
    for rank in range(4):  # the steps after the checkpoint, each once, as the uninterrupted run trained them
        trained = [batch for epoch in sorted(again[rank]["epochs"]) for batch in again[rank]["epochs"][epoch]]
        planned = [batch for epoch in sorted(whole[rank]["epochs"]) for batch in whole[rank]["epochs"][epoch]]
        assert trained == planned[resumed_from:], rank
        assert again[rank]["hostname"] == NODES[rank // 2]
    reference = final_weights(two_by_two["two_by_two"])
    for name, value in final_weights(run).items():
        torch.testing.assert_close(value, reference[name], atol=1e-6, rtol=1e-5, msg=name)
    timing("node_lost", started, slurm=decided.get("JobState"), reason=decided.get("Reason"), requeued=requeued,
           resumed_from=resumed_from, steps_trained_twice=0)  # fmt: skip


def deepspeed_args(stage: int, run: Path, tiny_clip: Path, corpus: Path, epochs: int) -> tuple[str, str]:
    """fit.sbatch's CONFIG (the tiny CLIP fit's config, then the shipped configs/strategy/deepspeed_zero<N>.yaml)
    and EXTRA (fp32 so the stages compare, the frozen text tower kept in checkpoints, no text cache: ZeRO-3
    needs every rank to run the same sub-modules; `epochs` epochs; the start steps recorded)."""
    config = ddp_config(run.with_suffix(".yaml"), tiny_clip, corpus, run)
    raw = yaml.safe_load(config.read_text())
    raw["trainer"]["callbacks"] = [
        raw["trainer"]["callbacks"][0],
        {"class_path": "helpers.interrupt_callbacks.RecordStartStep", "init_args": {"path": str(run / "starts")}},
        checkpoint_callback(run),  # a directory per save: once per epoch, not per step
    ]
    raw["data"]["init_args"]["batch_size"] = 4  # 2 ranks x 4: 2 global batches of 8 per epoch, as the DDP runs
    config.write_text(yaml.safe_dump(raw))
    strategy = ROOT / "configs" / "strategy" / f"deepspeed_zero{stage}.yaml"
    extra = ["--trainer.precision", "32-true", "--trainer.strategy.init_args.exclude_frozen_parameters", "false"]
    extra += ["--model.init_args.encoder.init_args.text_cache_size", "0", "--trainer.max_epochs", str(epochs)]
    return f"{config} --config {strategy}", shlex.join(extra)


def convert_checkpoint(directory: Path, out: Path) -> dict[str, torch.Tensor]:
    """`lit-retrieval convert-checkpoint DIRECTORY OUT`, the command as users run it (forked by the fork server)."""
    done = run_cli(["convert-checkpoint", str(directory), str(out)], ROOT, clean_launch_env(str(ROOT / "tests")), 300)
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(out, map_location="cpu", weights_only=False)["state_dict"]


def test_deepspeed_zero2_and_zero3_across_two_nodes_write_convert_and_resume(nodes, tmp_path, tiny_clip, corpus):
    """ZeRO-2 and ZeRO-3 (the shipped strategy configs, fp32, DeepSpeed's CPU accelerator) on 2 nodes x 1 rank
    (one rank per node keeps the 4 DeepSpeed jobs within the suite's time): a first job trains 1 epoch and writes
    `last.ckpt/`, a directory holding both ranks' shards, rank 1's written on lit-node2; `lit-retrieval
    convert-checkpoint` makes it one file; a second job of the same run with 2 epochs resumes it (`--ckpt_path
    newest`) at step 2 and ends at step 4. Both stages end with the same weights (sharding changes no arithmetic)."""
    pytest.importorskip("deepspeed")
    started = time.monotonic()
    runs = {stage: tmp_path / f"zero{stage}" for stage in (2, 3)}

    def job(stage: int, epochs: int) -> str:
        config, extra = deepspeed_args(stage, runs[stage], tiny_clip, corpus, epochs)
        path = tmp_path / f"zero{stage}.sbatch"
        return submit(fit_script(path, config, runs[stage], 2, 1, EXTRA=extra, JOB_NAME=f"zero{stage}"))

    def completed(job_id: str, stage: int) -> None:
        info = wait_end(job_id)
        assert info["JobState"] == "COMPLETED" and info["NodeList"] == "lit-node[1-2]", output(runs[stage])[-5000:]

    from lit_retrieval.checkpoint_io import checkpoint_step

    first = {stage: job(stage, 1) for stage in runs}
    at_epoch = {}
    for stage, run in runs.items():
        completed(first[stage], stage)
        last = run / "checkpoints" / "last.ckpt"
        assert last.is_dir() and checkpoint_step(last) == 2
        shards = sorted(p.name for p in last.rglob("*optim_states.pt"))
        assert shards == [f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt" for r in range(2)], shards
        assert [r["hostname"] for r in ranks(run, 2)] == list(NODES)
        at_epoch[stage] = convert_checkpoint(last, tmp_path / f"zero{stage}_epoch1.ckpt")
    second = {stage: job(stage, 2) for stage in runs}
    final = {}
    for stage, run in runs.items():
        completed(second[stage], stage)
        assert (run / "starts").read_text().split() == ["0", "0", "2", "2"]  # the second job resumed the directory
        assert checkpoint_step(run / "checkpoints" / "last.ckpt") == 4
        final[stage] = convert_checkpoint(run / "checkpoints" / "last.ckpt", tmp_path / f"zero{stage}.ckpt")
        assert final[stage].keys() == at_epoch[stage].keys()
        assert any(not torch.equal(final[stage][k], at_epoch[stage][k]) for k in final[stage])
    for name, value in final[3].items():
        torch.testing.assert_close(final[2][name], value, atol=2e-6, rtol=1e-5, msg=name)
    timing("deepspeed_zero2_zero3", started, jobs=4)


def test_grid_and_shard_arrays_spread_over_both_nodes(nodes, tmp_path, tiny_clip, corpus, monkeypatch):
    """Arrays on the two nodes (the partition places each task on its least loaded node, LLN=YES):
    - `grid --slurm` of one row x 2 seeds (1 rank each): one array, its 2 tasks on different nodes, each run
      trained and tested (done.json);
    - `cache-frames` and `index --embed-only` as 2-shard `array.sbatch` jobs, a shard on each node: the frame
      cache the shards wrote holds what one process writes, and the index built from the embedded parts holds
      one process's vectors."""

    from lit_retrieval.commands import run_command
    from lit_retrieval.data.media.frame_cache import FrameCache

    started = time.monotonic()
    monkeypatch.chdir(tmp_path)
    env = slurm_env()  # `grid --slurm` runs sbatch/squeue from this process: its environment goes to the jobs
    for key in [k for k in os.environ if k not in env]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    trainer = base_trainer(devices=1, max_epochs=1, train_batches=2)
    Path("base.yaml").write_text(yaml.safe_dump(clip_fit_config(tiny_clip, corpus, trainer, data={"num_workers": 0})))
    plan = {"title": "grid on two nodes", "seeds": [0, 1], "configs": ["base.yaml"], "metrics": ["t2v/R@1"]}
    Path("plan.yaml").write_text(yaml.safe_dump({**plan, "rows": [{"name": "meanp", "label": "meanP"}]}))
    settings = [f"{k}={v}" for k, v in {**CPU, "CPUS_PER_TASK": "1", "MEM": "4G"}.items() if k not in ("GPUS", "GRES")]
    assert run_command("grid", ["plan.yaml", "--out", "runs", "--slurm", "--set", *settings]) == 0
    grid_job = json.loads(Path("runs/slurm/submissions.jsonl").read_text().splitlines()[0])["job"]

    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump(clip_fit_config(tiny_clip, corpus, {"max_epochs": 1})))
    videos, arrays = corpus / "videos", tmp_path / "arrays"
    commands = {
        "frames": f"cache-frames --config {config} --out {arrays / 'frames'}",
        "index": f"index --config {config} --videos {videos} --out {arrays / 'index'} --embed-only",
    }
    jobs = {"grid": grid_job}
    for name, command in commands.items():
        values = {**CPU, "COMMAND": command, "LOG_DIR": str(tmp_path / "logs" / name), "SHARDS": "2", "CPUS": "1"}
        jobs[name] = submit(render("array.sbatch", tmp_path / f"{name}.sbatch", **{**values, "MEM": "4G"}))
    one = tmp_path / "one"  # one process, meanwhile
    assert run_command("cache-frames", ["--config", str(config), "--out", str(one / "frames")]) == 0
    assert run_command("index", ["--config", str(config), "--videos", str(videos), "--out", str(one / "index")]) == 0

    placed = {}
    for name, job_id in jobs.items():
        infos = [wait_end(f"{job_id}_{task}") for task in (0, 1)]
        assert all(i["JobState"] == "COMPLETED" for i in infos), (name, infos)
        placed[name] = [i["NodeList"] for i in infos]
        assert sorted(placed[name]) == list(NODES), (name, placed[name])  # one task on each node
    for seed in (0, 1):
        assert (tmp_path / "runs" / "meanp" / f"seed{seed}" / "done.json").is_file()

    params = json.loads((one / "frames" / "cache.json").read_text())["sampling"]
    merged, single = FrameCache(arrays / "frames", params), FrameCache(one / "frames", params)
    assert merged.entries.keys() == single.entries.keys() and len(single.entries) == 24
    for video, start, end in single.entries:
        assert (merged.get(video, start, end).frames == single.get(video, start, end).frames).all()
    assert_index_as_one_process(config, videos, arrays / "index", one / "index")  # from both shards' parts
    timing("arrays", started, jobs=3, array_tasks=6, nodes=placed)
