"""`lit-retrieval grid` and `report`: every shipped plan parses and its rows resolve with the real CLI
parser; a two-row x two-seed plan over the synthetic corpus runs end to end with --local (real
`fit` and `test` subprocesses) and its report equals mean / sample stdev computed here from the
runs' own metrics.json files; --slurm renders and submits one array under a fake `sbatch`/`srun`."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import statistics
from pathlib import Path

import pytest
import yaml

from helpers.fit_configs import base_trainer, clip_fit_config, run_grid_here
from helpers.fake_slurm import fake_slurm
from lit_retrieval.commands import run_command
from lit_retrieval.launch.templates import render_template
from lit_retrieval.errors import UsageError
from lit_retrieval.grid.plan import load_plan, load_published

ROOT = Path(__file__).resolve().parents[2]
SBATCH = ROOT / "lit_retrieval" / "launch" / "sbatch"  # the shipped Slurm templates
PLANS = sorted((ROOT / "configs" / "plans").glob("*.yaml"))
METRICS = ["t2v/R@1", "t2v/R@5", "v2t/R@1", "t2v/MnR"]


@pytest.mark.slow
def test_every_shipped_plan_parses_and_dry_runs(monkeypatch, capsys, tmp_path):
    """Each plan's rows resolve through `fit --print_config` (dry run: nothing written); each
    published-numbers file names its table and place and only rows and metrics of its plan."""
    monkeypatch.chdir(ROOT)
    assert len(PLANS) >= 9
    for path in PLANS:
        plan = load_plan(path)
        for row in plan.rows:
            assert all((ROOT / c).is_file() for c in row.configs + row.test_configs), (path, row.name)
        # GVE's plans need Psi_1 from the user, as their headers show (test_a_gve_plan_without_psi_1_is_refused...)
        prober = ["--override", "data.init_args.prober_path=/models/gme"] if "prober_path=" in path.read_text() else []
        assert run_command("grid", [str(path), "--out", str(tmp_path / path.stem), "--dry-run", *prober]) == 0
        out = capsys.readouterr().out
        assert all(f"] {row.name} seed {plan.seeds[0]}: pending" in out for row in plan.rows), path
        assert not (tmp_path / path.stem).exists()
        if plan.published:
            published = load_published(plan.published)
            assert set(published) <= {r.name for r in plan.rows}, path
            assert all(set(values) <= set(plan.metrics) for values in published.values()), path


def test_a_gve_plan_without_psi_1_is_refused_before_anything_is_submitted(monkeypatch, tmp_path):
    """GVE's rows probe their first epoch with `data.prober_path` (GVE Sec. 3.3); unset, each fit would
    refuse to start on the cluster: `grid` says so in one line instead, and writes nothing."""
    monkeypatch.chdir(ROOT)
    plan = ROOT / "configs" / "plans" / "gve_tab3.yaml"
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch to be reached
    refusal = "row 'gve_i_3b': data.init_args.prober_path is not set, and HardNegativeMining probes the first epoch"
    with pytest.raises(UsageError, match=refusal) as raised:
        run_command("grid", [str(plan), "--out", str(tmp_path / "runs"), "--slurm"])
    assert str(raised.value).endswith("(--override data.init_args.prober_path=DIR)") and "\n" not in str(raised.value)
    assert not (tmp_path / "runs").exists()


def test_melon_tab2_published_numbers_match_the_paper_text():
    """A few cells re-read from the seed paper's Tab. 2 / Tab. 4 text (MELON Sec. 5.2, 5.3)."""
    tab2 = load_published(ROOT / "configs" / "plans" / "published" / "melon_tab2.yaml")
    assert tab2["clip4clip"]["t2v/R@1"] == 52.7 and tab2["pau_mea"]["t2v/R@1"] == 55.4
    assert tab2["mevtr"]["v2t/MnR"] == 18.1 and tab2["xclip_mea"]["v2t/Rsum"] == 228.4
    tab4 = load_published(ROOT / "configs" / "plans" / "published" / "melon_tab4.yaml")
    assert tab4["didemo_tempme_mea"]["v2t/R@1"] == 52.5 and tab4["anet_clip4clip"]["t2v/R@10"] == 84.8


def test_plan_errors_name_the_file_and_entry(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"seeds": [0], "metrics": ["t2v/R@1"], "rows": [{"name": "a b", "configs": []}]}))
    with pytest.raises(UsageError, match=r"bad.yaml: rows\[0\]: 'name' must be a folder name"):
        load_plan(bad)
    bad.write_text(yaml.safe_dump({"seeds": [0, 0], "metrics": ["x"], "rows": [{"name": "a"}]}))
    with pytest.raises(UsageError, match="repeats a seed"):
        load_plan(bad)
    bad.write_text(
        yaml.safe_dump({"seeds": [0], "metrics": ["x"], "rows": [{"name": "a", "configs": ["nowhere.yaml"]}]})
    )
    with pytest.raises(UsageError, match=r"row 'a'.*not found: \['nowhere.yaml'\]"):
        run_command("grid", [str(bad), "--out", str(tmp_path / "r"), "--dry-run"])
    typo = tmp_path / "typo.yaml"
    typo.write_text(yaml.safe_dump({"trainer": {"max_epoch": 3}}))
    bad.write_text(yaml.safe_dump({"seeds": [0], "metrics": ["x"], "rows": [{"name": "a", "configs": [str(typo)]}]}))
    with pytest.raises(UsageError, match=r"row 'a'.*do not parse.*max_epoch"):
        run_command("grid", [str(bad), "--out", str(tmp_path / "r"), "--dry-run"])


@pytest.fixture(scope="module")
def plan_dir(tmp_path_factory, tiny_clip, corpus):
    """A folder with the two-row (meanP, meanP + MEA) x two-seed plan over the test corpus; its base
    config keeps its own run folder (runs/base) that the grid must move per run."""
    work = tmp_path_factory.mktemp("grid")
    base = clip_fit_config(
        tiny_clip,
        corpus,
        base_trainer(devices=1, max_epochs=1, train_batches=2),
        data={"min_events": 2},
    )
    (work / "base.yaml").write_text(yaml.safe_dump(base))
    plan = {
        "title": "synthetic MEA",
        "seeds": [0, 1],
        "configs": ["base.yaml"],
        "metrics": METRICS,
        "published": "paper.yaml",
        "overrides": {"model.init_args.evaluation.save_scores": True},
        "rows": [
            {"name": "meanp", "label": "meanP"},
            {"name": "meanp_mea", "label": "meanP + MEA", "overrides": {"model.init_args.mea": {"weight": 0.5}}},
        ],
        "comparisons": [{"name": "mea", "a": "meanp_mea", "b": "meanp", "k": 5}],
    }
    (work / "plan.yaml").write_text(yaml.safe_dump(plan))
    (work / "paper.yaml").write_text(
        yaml.safe_dump({"table": "test", "page": "none", "rows": {"meanp": {"t2v/R@1": 10.0}}})
    )
    return work


@pytest.fixture(scope="module")
def local_grid(plan_dir, tmp_path_factory):
    """The plan of `plan_dir` run with --local (real `fit` and `test` subprocesses)."""
    work = tmp_path_factory.mktemp("local")
    shutil.copytree(plan_dir, work, dirs_exist_ok=True)
    assert run_grid_here(work, ["plan.yaml", "--out", "runs/grid", "--local"]) == 0
    return work


def _test_metrics(run: Path) -> dict:
    """The run's own test metrics, found by walking its folder (not through the grid's done.json)."""
    found = [
        json.loads(p.read_text())["test"] for p in run.rglob("metrics.json") if "test" in json.loads(p.read_text())
    ]
    assert len(found) == 1, run
    return found[0]


@pytest.mark.slow
def test_local_grid_runs_each_seed_in_its_own_folder(local_grid):
    runs = local_grid / "runs" / "grid"
    for row in ("meanp", "meanp_mea"):
        for seed in (0, 1):
            run = runs / row / f"seed{seed}"
            config = yaml.safe_load((run / "config.yaml").read_text())
            assert config["seed_everything"] == seed and config["trainer"]["default_root_dir"] == str(
                run.relative_to(local_grid)
            )
            assert (
                config["trainer"]["callbacks"][0]["init_args"]["dirpath"] == f"runs/grid/{row}/seed{seed}/checkpoints"
            )
            assert (config["model"]["init_args"].get("mea") or {}).get("weight") == (
                0.5 if row == "meanp_mea" else None
            )
            assert (run / "checkpoints" / "last.ckpt").is_file() and (run / "done.json").is_file()
            assert json.loads((run / "done.json").read_text())["metrics"] == "logs/test/metrics.json"
    assert not (local_grid / "runs" / "base").exists()


@pytest.mark.slow
def test_report_means_and_stds_equal_the_runs_metrics(local_grid, capsys):
    runs = local_grid / "runs" / "grid"
    out = local_grid / "report"
    assert run_command("report", [str(runs), "--out", str(out), "--plan", str(local_grid / "plan.yaml")]) == 0
    table = {(r["row"], r["metric"]): r for r in csv.DictReader((out / "report.csv").open())}
    for row in ("meanp", "meanp_mea"):
        per_seed = [_test_metrics(runs / row / f"seed{s}") for s in (0, 1)]
        for metric in METRICS:
            values = [m[metric] for m in per_seed]
            line = table[(row, metric)]
            assert float(line["mean"]) == pytest.approx(statistics.mean(values), abs=1e-12)
            assert float(line["std_ddof1"]) == pytest.approx(statistics.stdev(values), abs=1e-12)
            assert line["seeds_found"] == "2" and line["complete"] == "True"
    paper = table[("meanp", "t2v/R@1")]
    assert float(paper["difference"]) == pytest.approx(float(paper["mean"]) - 10.0)
    text = (out / "report.md").read_text()
    r1 = [m["t2v/R@1"] for m in (_test_metrics(runs / "meanp" / f"seed{s}") for s in (0, 1))]
    assert f"| meanP | 2/2 | {statistics.mean(r1):.2f} ± {statistics.stdev(r1):.2f} |" in text
    assert "Measured vs published" in text and (out / "report.png").stat().st_size > 0
    # the paired test reads each seed's saved matrix: a side's R@5 is the mean of its runs' own test R@5
    (compared,) = csv.DictReader((out / "comparisons.csv").open())
    for side, row in (("a", "meanp_mea"), ("b", "meanp")):
        r5 = [_test_metrics(runs / row / f"seed{s}")["t2v/R@5"] for s in (0, 1)]
        assert float(compared[f"r_at_k_{side}"]) == pytest.approx(statistics.mean(r5), abs=1e-9)
    assert compared["runs_a"] == compared["runs_b"] == "2" and 0 < float(compared["p_value"]) <= 1


@pytest.mark.slow
def test_rerun_skips_finished_runs_and_missing_seeds_are_marked(local_grid, tmp_path, monkeypatch):
    work = tmp_path / "work"
    shutil.copytree(local_grid, work, symlinks=True)
    monkeypatch.chdir(work)
    runs = Path("runs/grid")
    (runs / "meanp_mea" / "seed1" / "done.json").unlink()  # fit.done stays: only `test` runs again
    assert run_command("report", [str(runs), "--out", "rep", "--plan", "plan.yaml"]) == 0
    lines = (Path("rep") / "report.md").read_text().splitlines()
    assert any(line.startswith("| meanP + MEA | 1/2 incomplete |") for line in lines)
    before = {p: p.stat().st_size for p in runs.rglob("*.log")}
    for key in [
        k for k in os.environ if k.startswith(("SLURM_", "MASTER_", "PL_")) or k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")
    ]:
        monkeypatch.delenv(key)
    assert run_command("grid", ["plan.yaml", "--out", str(runs), "--local"]) == 0
    grown = {p for p in runs.rglob("*.log") if p.stat().st_size != before.get(p)}
    assert grown == {runs / "meanp_mea" / "seed1" / "test.log"}
    assert (runs / "meanp_mea" / "seed1" / "done.json").is_file()


def _copy_grid(local_grid: Path, tmp_path: Path, monkeypatch) -> Path:
    """A copy of the finished local grid to change, as the working directory, with a clean launch env."""
    work = tmp_path / "work"
    shutil.copytree(local_grid, work, symlinks=True)
    monkeypatch.chdir(work)
    for key in [
        k for k in os.environ if k.startswith(("SLURM_", "MASTER_", "PL_")) or k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")
    ]:
        monkeypatch.delenv(key)
    return Path("runs/grid")


@pytest.mark.slow
def test_a_finished_run_whose_metrics_file_is_gone_is_evaluated_again(local_grid, tmp_path, monkeypatch):
    """Issue 24: done.json alone meant done, so a run whose metrics were lost was never repaired."""
    runs = _copy_grid(local_grid, tmp_path, monkeypatch)
    run = runs / "meanp" / "seed0"
    (run / "logs" / "test" / "metrics.json").unlink()
    before = {p: p.stat().st_size for p in runs.rglob("*.log")}
    assert run_command("grid", ["plan.yaml", "--out", str(runs), "--local"]) == 0
    assert {p for p in runs.rglob("*.log") if p.stat().st_size != before.get(p)} == {run / "test.log"}
    done = json.loads((run / "done.json").read_text())
    assert done["checkpoint"] == "checkpoints/last.ckpt" and (run / done["metrics"]).is_file()
    assert "test" in json.loads((run / done["metrics"]).read_text())


@pytest.mark.slow
def test_an_interrupted_fit_resumes_the_newest_of_hpc_and_last_checkpoints(local_grid, tmp_path, monkeypatch):
    """Issue 24: a stale hpc_ckpt_*.ckpt (step 1) hid a newer last.ckpt (step 2): the fit resumed
    from neither (or the hpc one under Slurm). The grid resumes with `--ckpt_path newest`."""
    import torch

    runs = _copy_grid(local_grid, tmp_path, monkeypatch)
    run = runs / "meanp" / "seed1"
    for name in ("done.json", "fit.done"):
        (run / name).unlink()
    last = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    assert last["global_step"] == 2
    torch.save({**last, "global_step": 1}, run / "hpc_ckpt_1.ckpt")
    os.utime(run / "hpc_ckpt_1.ckpt", (1e9, 1e9))
    assert run_command("grid", ["plan.yaml", "--out", str(runs), "--local"]) == 0
    resumed = (run / "fit.log").read_text().rsplit("\n$ lit-retrieval fit", 1)[1]  # this attempt's output
    assert f"--ckpt_path newest: {Path.cwd() / run / 'checkpoints' / 'last.ckpt'}" in resumed
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 2
    assert (run / "done.json").is_file()


@pytest.mark.slow
def test_a_deepspeed_checkpoint_directory_is_converted_before_the_evaluation(local_grid, tmp_path, monkeypatch):
    """Issue 24: DeepSpeed writes last.ckpt as a directory, which the grid handed to `test`/`uvrb`
    as it was. The grid runs `convert-checkpoint` first (once) and evaluates the file it writes.
    The directory is built here in DeepSpeed's layout (`latest`, `<tag>/mp_rank_00_model_states.pt`):
    DeepSpeed is not installed here, so the conversion stops the run with that reason, and the
    evaluation never sees the directory; with DeepSpeed (the `gpu` extra) it converts."""
    import importlib.util

    import torch

    runs = _copy_grid(local_grid, tmp_path, monkeypatch)
    run = runs / "meanp" / "seed0"
    (run / "done.json").unlink()
    checkpoint = run / "checkpoints" / "last.ckpt"
    state = torch.load(checkpoint, weights_only=False)
    checkpoint.unlink()
    (checkpoint / "checkpoint").mkdir(parents=True)
    (checkpoint / "latest").write_text("checkpoint")
    torch.save({**state, "module": state.pop("state_dict")}, checkpoint / "checkpoint" / "mp_rank_00_model_states.pt")
    test_log = (run / "test.log").stat().st_size
    code = run_command("grid", ["plan.yaml", "--out", str(runs), "--local"])
    convert = (run / "convert.log").read_text()
    assert f"$ lit-retrieval convert-checkpoint {checkpoint} {run / 'converted' / 'last.ckpt'}" in convert
    # the directory has DeepSpeed's layout but no ZeRO shards: with DeepSpeed (the default install) the
    # conversion fails on it as without DeepSpeed; real conversions: tests/training/test_deepspeed.py
    assert code == 1 and json.loads((run / "failed.json").read_text())["step"] == "convert-checkpoint"
    assert (run / "test.log").stat().st_size == test_log and not (run / "done.json").exists()
    if importlib.util.find_spec("deepspeed") is None:
        assert "converting needs DeepSpeed" in convert


def finish(run: Path) -> None:
    """Mark `run` finished as the grid does: done.json naming a metrics file that exists."""
    (run / "logs" / "test").mkdir(parents=True, exist_ok=True)
    (run / "logs" / "test" / "metrics.json").write_text(json.dumps({"test": {"t2v/R@1": 50.0}}))
    (run / "done.json").write_text(json.dumps({"metrics": "logs/test/metrics.json"}))


def test_slurm_submits_one_array_of_the_unfinished_runs(plan_dir, tmp_path, monkeypatch):
    """Runs 0 and 3 are finished, so the array holds tasks 1 and 2 only; the config trains on one
    CPU process, so the job asks for 1 task and no GPU (`--gres=none`)."""
    work = tmp_path / "work"
    shutil.copytree(plan_dir, work)
    monkeypatch.chdir(work)
    env = fake_slurm(tmp_path)
    monkeypatch.setenv("PATH", env["PATH"])
    runs = Path("runs/grid")
    for run in ("meanp/seed0", "meanp_mea/seed1"):
        finish(runs / run)
    args = ["plan.yaml", "--out", str(runs), "--slurm", "--set", "ACCOUNT=proj", "PARTITION=a100", "TIME=2-00"]
    assert run_command("grid", [*args, f"VENV={tmp_path / 'venv'}"]) == 0
    submitted = (tmp_path / "sbatch.log").read_text().split()
    script = Path(submitted[-1]).read_text()
    for line in ("--array=1-2%64", "--requeue", "--signal=SIGUSR1@300", "--time=2-00", "--nodes=1"):
        assert f"#SBATCH {line}\n" in script, line
    assert "#SBATCH --ntasks-per-node=1\n" in script and "#SBATCH --gres=none\n" in script
    assert "gpu" not in script.replace("lit-retrieval-grid", "")
    for run in ("meanp/seed1", "meanp_mea/seed0"):
        config = yaml.safe_load((runs / run / "config.yaml").read_text())
        assert config["trainer"]["devices"] == 1 and config["trainer"]["num_nodes"] == 1
        assert config["trainer"]["default_root_dir"] == str(runs / run)
        assert json.loads((runs / run / "slurm.json").read_text())["job"] == "777"
    assert not (runs / "meanp" / "seed0" / "config.yaml").exists()  # a finished run is left as it is
    record = json.loads((runs / "slurm" / "submissions.jsonl").read_text().splitlines()[-1])
    assert record["job"] == "777" and record["array"] == "1-2%64"
    # the task process alone runs in the batch step; it starts fit/test through the launcher (srun)
    launch = (
        f'lit-retrieval grid "{(work / "plan.yaml").resolve()}" --out "{runs.resolve()}" '
        '--task "$SLURM_ARRAY_TASK_ID" --launcher "srun --kill-on-bad-exit=1"'
    )
    # its status goes to the requeue rule, with the run folder whose failed.json names this job
    assert launch in script and script.rstrip().endswith('retry_or_exit "$status" "${failed%/failed.json}"')
    # the task process outlives Slurm's SIGUSR1 (meant for its fit, which saves and requeues)
    finish(runs / "meanp" / "seed1")
    previous = signal.getsignal(signal.SIGUSR1)
    try:
        assert run_command("grid", ["plan.yaml", "--out", str(runs), "--task", "1"]) == 0
        os.kill(os.getpid(), signal.SIGUSR1)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    with pytest.raises(UsageError, match="out of range"):
        run_command("grid", ["plan.yaml", "--out", str(runs), "--task", "4"])


def test_a_second_submission_leaves_queued_and_running_runs_alone(plan_dir, tmp_path, monkeypatch):
    """Issue 24: a second `grid --slurm` while the array runs resubmitted its running runs. Here
    squeue still lists task 1 of job 777: only the other unfinished run is submitted again."""
    work = tmp_path / "work"
    shutil.copytree(plan_dir, work)
    monkeypatch.chdir(work)
    args = ["plan.yaml", "--out", "runs", "--slurm", "--set", "ACCOUNT=proj", "PARTITION=p"]
    monkeypatch.setenv("PATH", fake_slurm(tmp_path, queued="777_0 777_1 12_3")["PATH"])
    assert run_command("grid", args) == 0  # submits 0-3 (nothing had a submission record)
    finish(Path("runs/meanp/seed0"))
    (tmp_path / "sbatch.log").unlink()
    config = Path("runs/meanp/seed1/config.yaml").read_text()
    assert run_command("grid", args) == 0
    script = Path((tmp_path / "sbatch.log").read_text().split()[-1]).read_text()
    assert "#SBATCH --array=2-3%64\n" in script
    assert Path("runs/meanp/seed1/config.yaml").read_text() == config


def one_row_plan(plan_dir: Path, tmp_path: Path, monkeypatch, overrides: dict) -> None:
    """`one.yaml` in a working copy of the plan folder (the cwd): its first row, seed 0, with `overrides`;
    `sbatch` and `squeue` are the recording stand-ins."""
    work = tmp_path / "work"
    shutil.copytree(plan_dir, work)
    monkeypatch.chdir(work)
    monkeypatch.setenv("PATH", fake_slurm(tmp_path)["PATH"])
    plan = yaml.safe_load(Path("plan.yaml").read_text())
    plan.update(seeds=[0], rows=plan["rows"][:1], overrides=overrides, comparisons=[])  # the second row is gone
    Path("one.yaml").write_text(yaml.safe_dump(plan))


@pytest.mark.parametrize(
    ("overrides", "settings", "expected"),
    [
        ({"trainer.devices": 8, "trainer.num_nodes": 4, "trainer.accelerator": "gpu"}, [], (4, 8, "gpu:8")),
        ({"trainer.devices": 8, "trainer.num_nodes": 4, "trainer.accelerator": "gpu"}, ["NODES=4"], (4, 8, "gpu:8")),
        ({"trainer.devices": "auto", "trainer.accelerator": "gpu"}, ["GPUS=4"], (1, 4, "gpu:4")),
        ({"trainer.devices": 2}, [], (1, 2, "none")),
    ],
)
def test_slurm_resources_come_from_the_config(plan_dir, tmp_path, monkeypatch, overrides, settings, expected):
    """Issue 24: GVE Tab. 3 (4 nodes x 8 GPUs) under --slurm trained on 1 GPU unless --set: the
    template's defaults overrode the config. A config that leaves devices open takes --set's."""
    one_row_plan(plan_dir, tmp_path, monkeypatch, overrides)
    assert (
        run_command("grid", ["one.yaml", "--out", "runs", "--slurm", "--set", "ACCOUNT=a", "PARTITION=p", *settings])
        == 0
    )
    script = Path((tmp_path / "sbatch.log").read_text().split()[-1]).read_text()
    nodes, ranks, gres = expected
    assert f"#SBATCH --nodes={nodes}\n" in script and f"#SBATCH --ntasks-per-node={ranks}\n" in script
    assert f"#SBATCH --gres={gres}\n" in script
    config = yaml.safe_load(Path("runs/meanp/seed0/config.yaml").read_text())
    assert int(config["trainer"]["devices"]) == ranks and int(config["trainer"]["num_nodes"]) == nodes


@pytest.mark.parametrize(
    ("overrides", "settings", "message"),
    [
        (
            {"trainer.devices": 8, "trainer.num_nodes": 4, "trainer.accelerator": "gpu"},
            ["GPUS=1"],
            "GPUS=1, but its config trains on trainer.devices=8",
        ),
        (
            {"trainer.devices": 8, "trainer.num_nodes": 4, "trainer.accelerator": "gpu"},
            ["NODES=1"],
            "NODES=1, but its config trains on trainer.num_nodes=4",
        ),
        ({}, ["GPUS=2"], r"GPUS=2, but its config trains on the CPU"),
        ({}, ["GPUS=two"], "GPUS must be a whole number"),
    ],
)
def test_slurm_settings_that_contradict_the_config_are_refused(
    plan_dir, tmp_path, monkeypatch, overrides, settings, message
):
    one_row_plan(plan_dir, tmp_path, monkeypatch, overrides)
    with pytest.raises(UsageError, match=message):
        run_command("grid", ["one.yaml", "--out", "runs", "--slurm", "--set", "ACCOUNT=a", "PARTITION=p", *settings])
    assert not (tmp_path / "sbatch.log").exists()


def test_grid_template_renders_and_rejects_unknown_variables():
    text = (SBATCH / "grid.sbatch").read_text()
    script = render_template(
        text, {"PLAN": "p.yaml", "RUNS_DIR": "r", "ARRAY": "0-5%64", "ACCOUNT": "a", "PARTITION": "p"}
    )
    assert "#SBATCH --array=0-5%64" in script and 'grid "p.yaml" --out "r" --task "$SLURM_ARRAY_TASK_ID"' in script
    assert "#SBATCH --gres=gpu:1\n" in script and "#SBATCH --ntasks-per-node=1\n" in script
    with pytest.raises(ValueError, match="unknown variable"):
        render_template(
            text, {"PLAN": "p", "RUNS_DIR": "r", "ARRAY": "0", "ACCOUNT": "a", "PARTITION": "p", "GPU": "1"}
        )


def test_a_failed_run_is_recorded_never_marked_done_and_listed_again(plan_dir, tmp_path, monkeypatch, capsys):
    """A fit that exits non-zero (its annotation file is missing) leaves failed.json with the step,
    no done.json, exit status 1, and the next dry run lists the run as failed."""
    work = tmp_path / "work"
    shutil.copytree(plan_dir, work)
    monkeypatch.chdir(work)
    plan = yaml.safe_load(Path("plan.yaml").read_text())
    plan.update(seeds=[0], rows=plan["rows"][:1], overrides={"data.init_args.annotation": "missing/annotations.json"})
    plan["comparisons"] = []  # they name the row left out
    Path("one.yaml").write_text(yaml.safe_dump(plan))
    assert run_command("grid", ["one.yaml", "--out", "runs", "--local"]) == 1
    run = Path("runs/meanp/seed0")
    assert json.loads((run / "failed.json").read_text())["step"] == "fit" and not (run / "done.json").exists()
    assert "missing/annotations.json" in (run / "fit.log").read_text()
    capsys.readouterr()
    assert run_command("grid", ["one.yaml", "--out", "runs", "--dry-run"]) == 0
    assert "[0] meanp seed 0: failed" in capsys.readouterr().out


def test_uvrb_plan_compares_tab1_and_the_tab2_abilities_as_published():
    """GVE Tab. 2 cells re-read from the paper text, and the plan's published Tab. 1 scores give the
    published Tab. 2 abilities through the aggregation the runner applies (to rounding)."""
    from lit_retrieval.uvrb.abilities import ABILITIES, ability_scores
    from lit_retrieval.uvrb.datasets import UVRB_DATASETS

    plan = load_plan(ROOT / "configs" / "plans" / "uvrb_gve.yaml")
    assert {"AVG_abilities", *ABILITIES} <= set(plan.metrics)
    published = load_published(plan.published)
    assert published["gve_7b"]["AVG_abilities"] == 0.600 and published["gve_7b"]["LC"] == 0.814
    assert published["gve_3b"]["TXT"] == 0.619 and published["gve_3b"]["PR"] == 0.377
    for row in ("gve_3b", "gve_7b"):
        derived = ability_scores({name: published[row][name] for name in UVRB_DATASETS})
        for key in ("AVG_abilities", *ABILITIES):
            assert abs(derived[key] - published[row][key]) <= 0.0011, (row, key)
