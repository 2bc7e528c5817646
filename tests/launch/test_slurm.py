"""Slurm templates rendered and run under a fake `srun`/`scontrol`: the launch command, the
variables Lightning's SLURMEnvironment reads, resume arguments, and the SIGUSR1 requeue path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch
import pytest
import yaml

from lit_retrieval.errors import UsageError
from lit_retrieval.launch.templates import (
    integer_expression,
    log_folders,
    render_template,
    template_text,
    template_variables,
)
from helpers.doc_commands import documented_command, replaced
from helpers.fit_configs import clip_fit_config

ROOT = Path(__file__).resolve().parents[2]
SBATCH = ROOT / "lit_retrieval" / "launch" / "sbatch"  # the shipped Slurm templates
FIT = dict(CONFIG="configs/gve/train.yaml", ACCOUNT="proj", PARTITION="a100")
FIT_SET = [f"{k}={v}" for k, v in FIT.items()]


def fake_tools(tmp_path: Path) -> dict[str, str]:
    """`srun` and `scontrol` that record their arguments, and an empty venv to activate."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("srun", "scontrol"):
        script = bin_dir / tool
        script.write_text(f'#!/bin/bash\necho "$@" >> "{tmp_path}/{tool}.log"\n')
        script.chmod(0o755)
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "activate").write_text("")
    return {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": "gpu[01-02]",
    }


def run_job(tmp_path: Path, template: str, values: dict) -> list[str]:
    job = tmp_path / "job.sbatch"
    job.write_text(
        render_template(
            (SBATCH / template).read_text(),
            {**values, "VENV": str(tmp_path / "venv")},
        )
    )
    log = tmp_path / "srun.log"
    log.unlink(missing_ok=True)
    env = {
        **os.environ,
        "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": "gpu[01-02]",
    }
    subprocess.run(["bash", str(job)], env=env, check=True, capture_output=True)
    return log.read_text().split() if log.exists() else []


def test_every_template_declares_what_it_uses_and_renders():
    for template in sorted((SBATCH).glob("*.sbatch")):
        declared = template_variables(template.read_text())
        required = {k: "x" for k, v in declared.items() if v is None}
        script = render_template(template.read_text(), required)
        assert "{{" not in script and "#@" not in script and script.startswith("#!/bin/bash")


def render_fit(cwd: Path, *settings: str) -> subprocess.CompletedProcess:
    """`lit-retrieval slurm fit.sbatch --set SETTINGS` run in `cwd`, as a user types it."""
    command = [
        sys.executable,
        "-m",
        "lit_retrieval",
        "slurm",
        str(SBATCH / "fit.sbatch"),
        "--set",
        *settings,
    ]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True)


def test_rendering_makes_the_log_folders_slurm_opens_before_the_script_runs(tmp_path):
    """`lit-retrieval slurm fit.sbatch --set ... --out job.sbatch && sbatch job.sbatch` must run
    as printed: Slurm opens `--output` before the script's own `mkdir`, so the renderer makes it."""
    run_dir = tmp_path / "runs" / "gve-3b_r1.5"
    out = render_fit(tmp_path, *FIT_SET, f"RUN_DIR={run_dir}", "--out", "j")
    assert out.returncode == 0, out.stderr
    assert (run_dir / "slurm").is_dir()
    relative = render_fit(tmp_path, *FIT_SET, "RUN_DIR=rel")  # printed, not written: made all the same
    assert relative.returncode == 0 and (tmp_path / "rel" / "slurm").is_dir()


def test_log_folders_follow_slurms_option_forms_and_chdir(tmp_path):
    script = "\n".join(
        [
            "#!/bin/bash",
            "#SBATCH --chdir=/work/job",
            "#SBATCH --output=logs/out/%x-%j.out",
            "#SBATCH -e errs/%j.err",
            "#SBATCH --error /abs/err/x.err",
            "#SBATCH -o/abs/o/y.out",
            "#SBATCH --output=by-user-%u/x.out",
            "#SBATCH --open-mode=append",
            "# SBATCH --output=commented/x.out",
            "echo --output=not/a/directive",
        ]
    )
    expected = [Path("/work/job/logs/out"), Path("/work/job/errs"), Path("/abs/err"), Path("/abs/o")]
    assert log_folders(script, tmp_path) == expected
    assert log_folders("#SBATCH --output=x.out\n", tmp_path) == [tmp_path]


def test_renderer_errors_name_the_variables():
    text = (SBATCH / "fit.sbatch").read_text()
    with pytest.raises(ValueError, match=r"missing required variable\(s\) \['RUN_DIR'\]"):
        render_template(text, FIT)
    with pytest.raises(ValueError, match="unknown variable"):
        render_template(text, {**FIT, "RUN_DIR": "r", "GPU": "4"})
    settings = {"COMMAND": "shots --list v.txt", "ACCOUNT": "a", "PARTITION": "p", "LOG_DIR": "l", "SHARDS": "12"}
    array = render_template((SBATCH / "array.sbatch").read_text(), settings)
    assert "#SBATCH --array=0-11" in array


def test_set_values_are_verbatim_and_only_a_templates_own_defaults_compute():
    """Issue 24: `--set TIME=2-00` (two days) was computed to `--time=2` (minutes), `ACCOUNT=123-45`
    to 78, `JOB_NAME=2024-01` a traceback and `9**9**9` was evaluated."""
    text = (SBATCH / "array.sbatch").read_text()
    base = {"COMMAND": "shots --list v.txt", "ACCOUNT": "a", "PARTITION": "p", "LOG_DIR": "l"}
    for key, value in [
        ("TIME", "2-00"),
        ("TIME", "1-12"),
        ("ACCOUNT", "123-45"),
        ("JOB_NAME", "2024-01"),
        ("JOB_NAME", "9**9**9"),
        ("JOB_NAME", "{{TIME}}"),
    ]:
        script = render_template(text, {**base, key: value})
        option = {"TIME": "time", "ACCOUNT": "account", "JOB_NAME": "job-name"}[key]
        assert f"#SBATCH --{option}={value}\n" in script, (key, value)
    assert "#SBATCH --array=0-6" in render_template(text, {**base, "SHARDS": "7"})  # LAST_SHARD={{SHARDS}} - 1
    assert "#SBATCH --array=0-15" in render_template(text, base)
    with pytest.raises(ValueError, match=r"LAST_SHARD .*needs integers.*'x - 1'"):
        render_template(text, {**base, "SHARDS": "x"})
    with pytest.raises(ValueError, match="needs integers"):
        render_template(text, {**base, "SHARDS": "9**9**9"})


@pytest.mark.parametrize(
    ("expression", "value"),
    [("16 - 1", 15), ("2*3+4", 10), ("2 + 3 * 4 - 1", 13), ("-3 + 5", 2), ("4 * -2", -8), ("007", 7)],
)
def test_integer_expression_follows_arithmetic(expression, value):
    assert integer_expression(expression) == value


@pytest.mark.parametrize("expression", ["", "3 -", "* 2", "2 ** 3", "9**9**9", "1.5", "1/2", "(1)", "x", "1e9"])
def test_integer_expression_refuses_anything_else(expression):
    with pytest.raises(ValueError, match="not an integer expression"):
        integer_expression(expression)


def test_fit_job_launches_one_task_per_gpu_and_resumes(tmp_path):
    run_dir = tmp_path / "run"
    values = {**FIT, "RUN_DIR": str(run_dir), "NODES": "2", "GPUS": "4", "EXTRA": "--trainer.max_epochs 3"}
    script = render_template((SBATCH / "fit.sbatch").read_text(), values)
    assert (
        "#SBATCH --nodes=2" in script and "#SBATCH --ntasks-per-node=4" in script and "#SBATCH --gres=gpu:4" in script
    )
    assert "#SBATCH --signal=SIGUSR1@300" in script and "#SBATCH --requeue" in script
    fake_tools(tmp_path)
    args = run_job(tmp_path, "fit.sbatch", values)
    assert args[:6] == [
        "--kill-on-bad-exit=1",
        "lit-retrieval",
        "fit",
        "--config",
        "configs/gve/train.yaml",
        "--trainer.num_nodes",
    ]
    assert args[6:13] == [
        "2",
        "--trainer.devices",
        "4",
        "--trainer.accelerator",
        "gpu",
        "--trainer.default_root_dir",
        str(run_dir),
    ]
    # which checkpoint `newest` picks is tested with real fits (test_newest_checkpoint.py, test_slurm_cluster.py)
    assert args[13:15] == ["--ckpt_path", "newest"] and args[-2:] == ["--trainer.max_epochs", "3"]


def test_slurm_environment_reads_rank_and_world_size(monkeypatch):
    from lightning.fabric.plugins.environments import SLURMEnvironment

    env = {
        "SLURM_NTASKS": "8",
        "SLURM_NTASKS_PER_NODE": "4",
        "SLURM_PROCID": "5",
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "1",
        "SLURM_NODELIST": "gpu[01-02]",
        "SLURM_JOB_NAME": "lit-retrieval-fit",
        "SLURM_JOB_ID": "4242",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert SLURMEnvironment.detect()
    slurm = SLURMEnvironment()
    assert (slurm.world_size(), slurm.global_rank(), slurm.local_rank(), slurm.node_rank()) == (8, 5, 1, 1)
    assert slurm.main_address == "gpu01" and 10000 <= slurm.main_port <= 20000


@pytest.mark.slow
def test_sigusr1_saves_an_hpc_checkpoint_requeues_and_the_requeued_job_resumes(
    tmp_path, tiny_clip, corpus, monkeypatch
):
    from lit_retrieval.cli import main

    env = fake_tools(tmp_path)
    monkeypatch.setenv("PATH", env["PATH"])
    for key, value in {
        "SLURM_NTASKS": "1",
        "SLURM_NTASKS_PER_NODE": "1",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "SLURM_NODELIST": "gpu01",
        "SLURM_JOB_NAME": "lit-retrieval-fit",
        "SLURM_JOB_ID": "4242",
    }.items():
        monkeypatch.setenv(key, value)
    run = tmp_path / "run"
    config = clip_fit_config(
        tiny_clip,
        corpus,
        {
            "devices": 1,
            "max_epochs": 2,
            "limit_val_batches": 0,
            "default_root_dir": str(run),
            "logger": False,
            "callbacks": [{"class_path": "helpers.interrupt_callbacks.SendRequeueSignal"}],
        },
        data={"num_frames": 4},
    )
    path = tmp_path / "fit.yaml"
    path.write_text(yaml.safe_dump(config))
    main(["fit", "--config", str(path)])
    assert (run / "hpc_ckpt_1.ckpt").is_file()
    assert (tmp_path / "scontrol.log").read_text().split() == ["requeue", "4242"]
    assert torch.load(run / "hpc_ckpt_1.ckpt", weights_only=False)["global_step"] == 2
    start = tmp_path / "start.txt"
    config["trainer"]["callbacks"] = [
        {"class_path": "helpers.interrupt_callbacks.RecordStart", "init_args": {"path": str(start)}}
    ]
    path.write_text(yaml.safe_dump(config))
    # the requeued job: no --ckpt_path, Lightning finds the hpc checkpoint. The first fit's end made this
    # process ignore SIGUSR1; this fit gets Lightning's handler again and requeues on it
    config["trainer"]["callbacks"] += [
        {"class_path": "helpers.interrupt_callbacks.SendRequeueSignal", "init_args": {"step": 3}}
    ]
    path.write_text(yaml.safe_dump(config))
    main(["fit", "--config", str(path)])
    assert start.read_text() == "2"
    assert torch.load(run / "hpc_ckpt_2.ckpt", weights_only=False)["global_step"] == 3
    assert (tmp_path / "scontrol.log").read_text().split() == ["requeue", "4242"] * 2


SLURM_TASK = {
    "SLURM_NTASKS": "1",
    "SLURM_NTASKS_PER_NODE": "1",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
    "SLURM_NODELIST": "gpu01",
    "SLURM_JOB_NAME": "lit-retrieval-fit",
    "SLURM_JOB_ID": "4242",
}


@pytest.mark.slow
def test_sigusr1_after_training_ended_and_during_a_test_neither_kills_nor_requeues(tmp_path, tiny_clip, corpus):
    """Issue 45: SIGUSR1 while the final checkpoint is written, after Lightning's teardown (whose
    default disposition killed the rank: srun then failed the job), and during `test`: each process
    goes on and exits 0, writes no hpc checkpoint and calls no `scontrol requeue`."""
    from helpers.fit_configs import clean_launch_env

    env = {**clean_launch_env(str(ROOT / "tests")), **SLURM_TASK}
    env["PATH"] = fake_tools(tmp_path)["PATH"]
    run, log = tmp_path / "run", tmp_path / "signalled.txt"
    trainer = {
        "devices": 1,
        "max_epochs": 1,
        "limit_train_batches": 2,
        "limit_val_batches": 0,
        "default_root_dir": str(run),
        "logger": False,
        "enable_progress_bar": False,
        "callbacks": [
            {"class_path": "helpers.interrupt_callbacks.SignalSelfAtRunEnd", "init_args": {"record": str(log)}}
        ],
    }
    path = tmp_path / "fit.yaml"
    path.write_text(yaml.safe_dump(clip_fit_config(tiny_clip, corpus, trainer, data={"num_frames": 2})))
    printed = ""
    for command in (["fit"], ["test", "--ckpt_path", "newest"]):
        done = subprocess.run(
            [sys.executable, "-m", "lit_retrieval", *command, "--config", str(path)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, (command, done.returncode, done.stderr[-3000:])
        printed += done.stdout + done.stderr
    assert log.read_text().split() == ["train_end", "fit_teardown", "test_start"]
    assert "training ended: SIGUSR1 (Slurm's requeue signal) is ignored from now on" in printed
    assert not list(run.glob("hpc_ckpt_*")) and not (tmp_path / "scontrol.log").exists()
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 2


def test_a_template_name_finds_the_file_then_the_shipped_template_never_a_mistyped_path(tmp_path, monkeypatch):
    """`fit.sbatch` and the older `slurm/fit.sbatch` name the shipped file, byte for byte; a file of one's own
    wins over it; a missing file in another folder (a typo in the path of one's own copy) is refused."""
    monkeypatch.chdir(tmp_path)
    shipped = (SBATCH / "fit.sbatch").read_text()
    assert template_text("fit.sbatch") == ("fit.sbatch (shipped)", shipped)
    assert template_text("slurm/fit.sbatch") == ("fit.sbatch (shipped)", shipped)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "fit.sbatch").write_text("#@ RUN_DIR\necho {{RUN_DIR}}\n")
    assert template_text("mine/fit.sbatch") == ("mine/fit.sbatch", "#@ RUN_DIR\necho {{RUN_DIR}}\n")
    for missing in ("mnie/fit.sbatch", "fitt.sbatch"):
        with pytest.raises(UsageError, match="no such file, and no shipped template of that name"):
            template_text(missing)


def test_the_documented_current_environment_runs_every_template_without_a_venv(tmp_path):
    """docs/slurm.md's `VENV=current` command, copied from the page: rendered and run in a submit folder that has
    no `.venv`, the job launches `lit-retrieval fit` in the environment it inherited; the default `.venv` there
    fails at its first line, naming `activate`. Every template takes the same choice (empty `VENV=` too)."""
    words = documented_command("docs/slurm.md", "VENV=current")
    assert words[:3] == ["lit-retrieval", "slurm", "fit.sbatch"]
    words = replaced(words, USER="me")
    words = [w.replace("/scratch/me", str(tmp_path / "scratch")) for w in words]
    submit = tmp_path / "submit"
    (submit / "configs").mkdir(parents=True)
    env = fake_tools(tmp_path)
    rendered = subprocess.run([sys.executable, "-m", "lit_retrieval", *words[1:]], cwd=submit, capture_output=True)
    assert rendered.returncode == 0, rendered.stderr
    job = subprocess.run(["bash", "quick.sbatch"], cwd=submit, env=env, capture_output=True, text=True)
    assert job.returncode == 0, job.stderr
    assert (tmp_path / "srun.log").read_text().split()[1:5] == [
        "lit-retrieval",
        "fit",
        "--config",
        "configs/quickstart.yaml",
    ]
    default = [w for w in words[1:] if not w.startswith("VENV=")]
    assert subprocess.run([sys.executable, "-m", "lit_retrieval", *default], cwd=submit).returncode == 0
    failed = subprocess.run(["bash", "quick.sbatch"], cwd=submit, env=env, capture_output=True, text=True)
    assert failed.returncode != 0 and ".venv/bin/activate" in failed.stderr
    for template in sorted(SBATCH.glob("*.sbatch")):
        declared = template_variables(template.read_text())
        for venv in ("current", ""):
            required = {k: "x" for k, v in declared.items() if v is None}
            script = render_template(template.read_text(), {**required, "VENV": venv})
            activation = [line for line in script.splitlines() if "activate" in line]
            assert len(activation) == 1, template.name
            shell = subprocess.run(["bash", "-c", activation[0] + "; echo reached"], capture_output=True, text=True)
            assert shell.stdout.strip() == "reached", (template.name, venv, shell.stderr)


def test_a_dot_slash_path_is_a_path_and_a_template_not_utf8_is_refused(tmp_path, monkeypatch, capsys):
    """Issue 56, item 5: `./fit.sbatch` in a folder without it printed the shipped template (exit 0): the user
    named a path, refused like `dir/NAME`; a template that is not UTF-8 was a UnicodeDecodeError traceback."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="no such file, and no shipped template of that name"):
        template_text("./fit.sbatch")
    (tmp_path / "latin.sbatch").write_bytes("#@ RUN_DIR\necho caf\u00e9 {{RUN_DIR}}\n".encode("latin-1"))
    with pytest.raises(UsageError, match=r"latin\.sbatch: not UTF-8 text \(byte 19\)"):
        template_text("latin.sbatch")
    (tmp_path / "fit.sbatch").write_text("#@ RUN_DIR\necho {{RUN_DIR}}\n")
    assert template_text("./fit.sbatch") == ("./fit.sbatch", "#@ RUN_DIR\necho {{RUN_DIR}}\n")


def fit_step_ending(tmp_path: Path, status: int, checkpoint: str = "new", **values: str):
    """`fit.sbatch` (TEST=true) run by bash under a fake `srun` whose step writes nothing, a checkpoint
    (`checkpoint`: "new") or none but an old one ("old", dated 2020), then ends with `status` (a negative
    status: SIGTERM to the batch script first, as `scancel`, a requeue or the time limit send, then 143).
    Returns the script's exit status, its output and the fake `scontrol`'s calls."""
    run_dir, bin_dir = tmp_path / "run", tmp_path / "bin"
    (run_dir / "checkpoints").mkdir(parents=True)
    bin_dir.mkdir()
    old = run_dir / "checkpoints" / "epoch=0.ckpt"
    old.write_text("")
    os.utime(old, (1577836800, 1577836800))
    touch = f'touch "{run_dir}/checkpoints/last.ckpt"' if checkpoint == "new" else ""
    ending = "kill -TERM $PPID; sleep 0.5; exit 143" if status < 0 else f"exit {status}"
    (bin_dir / "srun").write_text(f"#!/bin/bash\n{touch}\n{ending}\n")
    (bin_dir / "scontrol").write_text(f'#!/bin/bash\necho "$@" >> "{tmp_path}/scontrol.log"\n')
    for tool in ("srun", "scontrol"):
        (bin_dir / tool).chmod(0o755)
    job = tmp_path / "job.sbatch"
    settings = {**FIT, "RUN_DIR": str(run_dir), "VENV": "current", "TEST": "true", **values}
    job.write_text(render_template((SBATCH / "fit.sbatch").read_text(), settings))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "n1"}
    done = subprocess.run(["bash", str(job)], env=env, capture_output=True, text=True, timeout=60)
    calls = tmp_path / "scontrol.log"
    return done.returncode, done.stdout, calls.read_text().splitlines() if calls.exists() else []


def test_a_step_that_died_of_a_rank_past_a_new_checkpoint_requeues_the_job(tmp_path):
    """Issue 56: a step killed by a signal (137: a rank's SIGKILL) or a lost peer (1: gloo's error) after a
    checkpoint of this start requeues the job (RETRIES, default 2, per job id), and says so."""
    code, out, calls = fit_step_ending(tmp_path, 137)
    assert (code, calls) == (0, ["requeue 4242"]), out
    assert "the step ended with status 137: requeue 1 of 2 (RETRIES)" in out
    assert (tmp_path / "run" / "slurm" / "retries-4242").read_text() == "137\n"


@pytest.mark.parametrize(
    ("status", "checkpoint", "values", "why"),
    [
        (2, "new", {}, "bad input"),
        (-15, "new", {}, "Slurm stopped the job"),  # scancel, a handled time-limit requeue
        (1, "old", {}, "no checkpoint newer than this start"),
        (137, "new", {"RETRIES": "0"}, "0 of RETRIES=0 requeues done"),
    ],
)
def test_bad_input_a_stop_by_slurm_no_new_checkpoint_or_retries_0_end_the_job(
    tmp_path, status, checkpoint, values, why
):
    code, out, calls = fit_step_ending(tmp_path, status, checkpoint, **values)
    assert calls == [] and code == (143 if status < 0 else status), out
    assert f"not requeued ({why})" in out


def test_the_retries_are_counted_per_job_and_end_at_retries(tmp_path):
    (tmp_path / "run" / "slurm").mkdir(parents=True)
    (tmp_path / "run" / "slurm" / "retries-4242").write_text("137\n1\n")
    code, out, calls = fit_step_ending(tmp_path, 1)
    assert (code, calls) == (1, []) and "not requeued (2 of RETRIES=2 requeues done)" in out


def test_the_grid_task_whose_fit_died_past_a_checkpoint_is_requeued_once_its_run_folder_is_found(tmp_path):
    """grid.sbatch under a fake `lit-retrieval` (its task's fit step died: failed.json naming this job, in the
    run folder, with a checkpoint of this start) and a fake `scontrol`: requeued; another task's run folder
    (another job id in its failed.json) does not count."""
    runs, bin_dir = tmp_path / "runs", tmp_path / "bin"
    bin_dir.mkdir()
    (runs / "slurm").mkdir(parents=True)

    def grid_job(job_id: str) -> tuple[int, str, list[str]]:
        task = runs / "meanp" / "seed1"
        fake = (
            f'#!/bin/bash\nmkdir -p "{task}/checkpoints"\ntouch "{task}/checkpoints/last.ckpt"\n'
            f'echo \'{{"step": "fit", "exit_status": 137, "slurm_job": "{job_id}"}}\' > "{task}/failed.json"\n'
            "exit 137\n"
        )
        (bin_dir / "lit-retrieval").write_text(fake)
        (bin_dir / "scontrol").write_text(f'#!/bin/bash\necho "$@" >> "{tmp_path}/scontrol.log"\n')
        for tool in ("lit-retrieval", "scontrol"):
            (bin_dir / tool).chmod(0o755)
        values = {"PLAN": "plan.yaml", "RUNS_DIR": str(runs), "ARRAY": "0-1", "ACCOUNT": "a", "PARTITION": "p"}
        job = tmp_path / "grid.sbatch"
        job.write_text(render_template((SBATCH / "grid.sbatch").read_text(), {**values, "VENV": "current"}))
        env = {
            **os.environ,
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "SLURM_JOB_ID": "4243",
            "SLURM_ARRAY_JOB_ID": "4242",
            "SLURM_ARRAY_TASK_ID": "1",
            "SLURM_JOB_NODELIST": "n1",
        }
        done = subprocess.run(["bash", str(job)], env=env, capture_output=True, text=True, timeout=60)
        calls = tmp_path / "scontrol.log"
        return done.returncode, done.stdout, calls.read_text().splitlines() if calls.exists() else []

    code, out, calls = grid_job("9999")
    assert (code, calls) == (137, []) and "not requeued (no checkpoint newer than this start)" in out
    code, out, calls = grid_job("4243")
    assert (code, calls) == (0, ["requeue 4243"]) and "requeue 1 of 2 (RETRIES)" in out, out


def test_fit_and_grid_templates_decide_a_retry_alike():
    """The two templates carry one retry decision (a job script must stand alone, so each holds a copy)."""

    def decision(template: str) -> str:
        text = (SBATCH / template).read_text()
        return text[text.index("# A step that died of one rank") : text.index("\n}\n")]

    assert decision("fit.sbatch") == decision("grid.sbatch") and "scontrol requeue" in decision("fit.sbatch")
