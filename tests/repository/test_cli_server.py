"""The tests' fork server (`tests/helpers/cli_server.py`) against the reference it stands in for: a fresh
`python -m lit_retrieval` (or `python SCRIPT`) process given the same arguments, working directory and environment,
its output captured or appended to a log file."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from helpers import cli_server
from helpers.cli_server import run_cli
from helpers.fit_configs import clean_launch_env, clip_fit_config

ROOT = Path(__file__).resolve().parents[2]


def test_a_forked_command_answers_as_a_fresh_interpreter(tmp_path):
    """Exit status, stdout and stderr are a fresh process's, byte for byte: a printed config (relative path,
    read from the working directory), a refused config (one error line, status 2), a missing file."""
    env = clean_launch_env(str(ROOT / "tests"))
    (tmp_path / "configs").mkdir()
    text = (ROOT / "configs" / "quickstart.yaml").read_text()
    (tmp_path / "configs" / "quick.yaml").write_text(text)
    (tmp_path / "bad.yaml").write_text(text.replace("batch_size: 32", "batchsize: 32"))
    commands = [
        ["fit", "--config", "configs/quick.yaml", "--print_config"],
        ["fit", "--config", "bad.yaml", "--print_config"],
        ["metrics", "nope.npy"],
    ]
    for args in commands:
        forked = run_cli(args, tmp_path, env)
        fresh = subprocess.run(
            [sys.executable, "-m", "lit_retrieval", *args], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert [run_cli(args, tmp_path, env).returncode for args in commands] == [0, 2, 2]


def test_relative_outputs_land_in_the_working_directory_and_the_environment_is_the_callers(tmp_path):
    """`synth --out corpus` writes under the request's directory; an environment variable the command reads at
    run time (LIT_RETRIEVAL_DEBUG: the traceback instead of one line) is the request's."""
    env = {k: v for k, v in os.environ.items() if k != "LIT_RETRIEVAL_DEBUG"}
    synth = ["synth", "--out", "corpus", "--num-videos", "2", "--occurrences", "1", "2", "--seed", "1"]
    done = run_cli(synth, tmp_path, env)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "corpus" / "videos").iterdir()) == ["syn_00000.mp4", "syn_00001.mp4"]
    plain = run_cli(["metrics", "nope.npy"], tmp_path, env)
    debug = run_cli(["metrics", "nope.npy"], tmp_path, {**env, "LIT_RETRIEVAL_DEBUG": "1"})
    assert "Traceback" not in plain.stderr and plain.stderr.strip().startswith("lit-retrieval metrics: ")
    assert "Traceback" in debug.stderr and "FileNotFoundError" in debug.stderr


def _processes_in(folder: Path) -> list[int]:
    """Pids of the processes whose working directory is `folder` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if Path(os.readlink(entry / "cwd")) == folder:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _two_rank_fit(tiny_clip, corpus, folder: Path, callback: str, args: dict) -> subprocess.CompletedProcess:
    """`lit-retrieval fit` of 2 steps on 2 DDP ranks in `folder`, with one `helpers.process_callbacks` callback."""
    callback = {"class_path": f"helpers.process_callbacks.{callback}", "init_args": args}
    trainer = {"devices": 2, "strategy": "ddp", "max_steps": 2, "logger": False, "callbacks": [callback]}
    (folder / "fit.yaml").write_text(yaml.safe_dump(clip_fit_config(tiny_clip, corpus, trainer)))
    return run_cli(["fit", "--config", "fit.yaml"], folder, clean_launch_env(str(ROOT / "tests")), timeout=120)


def test_a_ddp_fits_other_rank_is_forked_with_the_command_a_console_launch_gives_it(tiny_clip, corpus, tmp_path):
    """Lightning's launcher asks for rank 1 as `python -m lit_retrieval.__main__ ARGV` with LOCAL_RANK=1; the
    server forks it (a sibling of rank 0, not its exec'd child) in rank 0's process group and directory, with
    rank 0's arguments, entry module and launch variables: the 2-rank fit trains its steps and exits 0."""
    record = tmp_path / "ranks"
    done = _two_rank_fit(tiny_clip, corpus, tmp_path, "RecordProcess", {"out": str(record)})
    assert done.returncode == 0, done.stderr[-3000:]
    rank0, rank1 = (json.loads((record / f"rank{rank}.json").read_text()) for rank in range(2))
    assert rank1["ppid"] == rank0["ppid"] != rank0["pid"]  # both children of the server
    assert rank1["pgid"] == rank0["pgid"] == rank0["pid"]  # one group: killing it ends every rank
    assert rank1["argv"] == rank0["argv"] == ["fit", "--config", "fit.yaml"]
    assert rank1["main"] == rank0["main"] == "lit_retrieval.__main__" and rank1["cwd"] == rank0["cwd"] == str(tmp_path)
    assert rank1["env"] == {**rank0["env"], "LOCAL_RANK": "1"} and rank0["env"]["WORLD_SIZE"] == "2"
    assert max(torch.load(path, weights_only=False)["global_step"] for path in tmp_path.rglob("*.ckpt")) == 2


def test_a_forked_rank_that_fails_ends_the_launch_with_its_error_and_no_process_left(tiny_clip, corpus, tmp_path):
    """Rank 1 raises before its first step: the launch fails as a console's does (rank 0 ends on gloo's closed
    connection, or is killed by Lightning's process observer, which polls rank 1's exit status), rank 1's error
    is in the output, and no process is left."""
    done = _two_rank_fit(tiny_clip, corpus, tmp_path, "FailOnRank", {"rank": 1})
    assert done.returncode in (1, -9), done.stderr[-3000:]
    assert "rank 1 fails on purpose" in done.stderr
    assert _processes_in(tmp_path) == []


def _rank_socket_of(pid: int) -> str:
    """The path of the unix socket the process `pid` listens on for ranks (from /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            if (link := os.readlink(fd)).startswith("socket:["):
                inodes.add(link[8:-1])
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) == 8 and fields[6] in inodes and "lit-cli-server-" in fields[7]:
            return fields[7]
    raise AssertionError(f"no rank socket held by {pid}")


def test_broken_rank_requests_are_dropped_and_the_server_serves_on(tmp_path):
    """A launcher that ends before its rank request is whole (nothing sent, half a request, a request without its
    3 standard streams) gets no rank, and the server answers the next command at once."""
    env = clean_launch_env(str(ROOT / "tests"))
    assert run_cli(["metrics", "nope.npy"], tmp_path, env).returncode == 2
    path = _rank_socket_of(cli_server._server(env).pid)
    with open(os.devnull) as null:
        for message, fds in ((b"", []), (b'{"argv": ["fit"', [0, 1, 2]), (b'{"argv": []}\n', [null.fileno()])):
            with socket.socket(socket.AF_UNIX) as launcher:
                launcher.connect(path)
                if message:
                    socket.send_fds(launcher, [message], fds)
    assert run_cli(["metrics", "nope.npy"], tmp_path, env, timeout=30).returncode == 2


def test_a_command_past_its_timeout_is_killed_with_its_workers_and_the_server_serves_on(tiny_clip, corpus, tmp_path):
    """A fit paused after its first step (`PauseAtStep`, for up to 60 s, with 2 DataLoader workers) outlives its
    45 s (which leave a loaded machine time to reach the pause): the caller gets `subprocess.TimeoutExpired`, no
    process is left in the run's folder, and the next command runs."""
    run = tmp_path / "run"
    run.mkdir()
    marker = tmp_path / "paused"
    pause = {"class_path": "helpers.interrupt_callbacks.PauseAtStep", "init_args": {"step": 1, "marker": str(marker)}}
    trainer = {"max_steps": 3, "logger": False, "enable_checkpointing": False, "callbacks": [pause]}
    config = clip_fit_config(tiny_clip, corpus, trainer, data={"num_workers": 2})
    (run / "fit.yaml").write_text(yaml.safe_dump(config))
    env = clean_launch_env(str(ROOT / "tests"))
    assert run_cli(["metrics", "nope.npy"], run, env).returncode == 2  # the server is up: the 45 s are the fit's
    with pytest.raises(subprocess.TimeoutExpired):
        run_cli(["fit", "--config", "fit.yaml"], run, env, timeout=45)
    assert marker.read_text() == "1"  # it was in its pause, not still starting
    assert _processes_in(run) == []
    assert run_cli(["metrics", "nope.npy"], run, env).returncode == 2


def _servers_of_this_process() -> set[int]:
    """Pids of this process's children that run the fork server (from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == os.getpid():
                if b"cli_server.py" in (entry / "cmdline").read_bytes():
                    found.add(int(entry.name))
        except OSError:
            continue
    return found


def test_servers_are_shared_across_tests_and_at_most_two_stay_up(tmp_path):
    """Requests that differ only in pytest's per-test variable share one server; a third environment stops the
    least recently used server (its process ends), so a long suite holds at most two of them (0.5-0.9 GB each)."""
    base = clean_launch_env(str(ROOT / "tests"))
    for test in ("a", "b"):
        assert run_cli(["metrics", "nope.npy"], tmp_path, {**base, "PYTEST_CURRENT_TEST": test}).returncode == 2
    shared = _servers_of_this_process()
    for marker in ("1", "2"):
        assert run_cli(["metrics", "nope.npy"], tmp_path, {**base, "LIT_RETRIEVAL_SERVER_TEST": marker}).returncode == 2
    after = _servers_of_this_process()
    assert len(shared) <= 2 and len(after) == 2
    assert len(after - shared) == 2  # both new environments got a server; the two before them ended


def test_a_process_forked_from_the_caller_does_not_keep_a_server_from_ending(tmp_path):
    """A DataLoader worker or a rank forked from the test process inherits its pipes to the servers. While one
    such child still runs, a stopped server sees the end of its input and exits by itself (status 0), rather than
    waiting for the child and being killed."""
    env = {**clean_launch_env(str(ROOT / "tests")), "LIT_RETRIEVAL_SERVER_TEST": "forked-caller"}
    assert run_cli(["metrics", "nope.npy"], tmp_path, env).returncode == 2
    server = cli_server._server(env)  # the one that answered
    child = os.fork()
    if child == 0:
        time.sleep(60)
        os._exit(0)
    try:
        del cli_server._servers[next(key for key, running in cli_server._servers.items() if running is server)]
        cli_server._stop(server)
        assert server.returncode == 0
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)


SCRIPT = """
import os
import sys
import threading
import time

print(__name__, sys.argv[1:], sys.path[0] == os.path.dirname(os.path.abspath(__file__)), os.getcwd(), flush=True)
print("to stderr", file=sys.stderr)
threading.Thread(target=lambda: (time.sleep(0.3), print("joined", flush=True))).start()  # the interpreter waits
sys.exit(int(sys.argv[1]))
"""


def test_a_forked_script_answers_as_a_fresh_interpreter(tmp_path):
    """`run_script` stands in for `python SCRIPT ARGS`: the same stdout, stderr and exit status, the script run as
    `__main__` with its arguments and its own folder first on sys.path, in the caller's directory, and its
    non-daemon thread joined before the process ends."""
    script = tmp_path / "scripts" / "probe.py"
    script.parent.mkdir()
    script.write_text(SCRIPT)
    env = clean_launch_env(str(ROOT / "tests"))
    for code in ("0", "3"):
        forked = cli_server.run_script(script, [code, "x y"], tmp_path, env)
        fresh = subprocess.run(
            [sys.executable, str(script), code, "x y"], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
        assert (
            forked.returncode == int(code) and forked.stdout == f"__main__ ['{code}', 'x y'] True {tmp_path}\njoined\n"
        )


RANKS_SCRIPT = """
import sys

import lightning as L
from lightning.pytorch.demos.boring_classes import BoringModel

from helpers.process_callbacks import RecordProcess

trainer = L.Trainer(
    accelerator="cpu", devices=2, strategy="ddp", max_steps=2, logger=False, enable_checkpointing=False,
    enable_progress_bar=False, enable_model_summary=False, callbacks=[RecordProcess(sys.argv[1])],
)
trainer.fit(BoringModel())
"""


def test_a_scripts_ddp_rank_is_forked_as_python_script_argv(tmp_path):
    """A script's 2-rank fit: Lightning asks for rank 1 as `python SCRIPT ARGV` (the script has no module spec);
    the server forks it beside rank 0, in rank 0's process group, running the same file with the same arguments."""
    script = tmp_path / "fit_two_ranks.py"
    script.write_text(RANKS_SCRIPT)
    record = tmp_path / "ranks"
    done = cli_server.run_script(script, [str(record)], tmp_path, clean_launch_env(str(ROOT / "tests")), timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    rank0, rank1 = (json.loads((record / f"rank{rank}.json").read_text()) for rank in range(2))
    assert rank1["ppid"] == rank0["ppid"] != rank0["pid"] and rank1["pgid"] == rank0["pgid"] == rank0["pid"]
    assert rank1["argv"] == rank0["argv"] == [str(record)] and rank1["main"] is rank0["main"] is None
    assert rank1["main_file"] == rank0["main_file"] == str(script)
    assert rank1["env"] == {**rank0["env"], "LOCAL_RANK": "1"} and rank0["env"]["WORLD_SIZE"] == "2"


def test_a_logged_command_appends_to_its_log_as_the_subprocess_it_stands_in_for(tmp_path):
    """`run_logged` as `subprocess.run(command, stdout=LOG, stderr=STDOUT, cwd=..., env=...)`: the log's earlier
    lines kept, the step's stdout and stderr appended in order, what the caller had not flushed after them, the same
    exit status; a log not opened for appending, and other calls, are subprocess.run's own."""
    (tmp_path / "quick.yaml").write_text((ROOT / "configs" / "quickstart.yaml").read_text())
    entry, env = [sys.executable, "-m", "lit_retrieval"], clean_launch_env(str(ROOT / "tests"))
    steps = [[*entry, "fit", "--config", "quick.yaml", "--print_config"], [*entry, "metrics", "nope.npy"]]
    logs, codes = {}, {}
    cases = [
        ("forked", cli_server.run_logged, "a"),
        ("fresh", subprocess.run, "a"),
        ("written", cli_server.run_logged, "w"),
    ]
    for name, run, mode in cases:
        log = tmp_path / f"{name}.log"
        with log.open(mode) as out:
            out.write("$ header\n")
            out.flush()
            codes[name] = [run(steps[0], stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path, env=env).returncode]
            out.write("$ not flushed\n")
            codes[name] += [run(steps[1], stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path, env=env).returncode]
        logs[name] = log.read_text()
    assert codes["forked"] == codes["fresh"] == codes["written"] == [0, 2]
    assert logs["forked"] == logs["fresh"] == logs["written"]
    assert logs["fresh"].startswith("$ header\n") and logs["fresh"].endswith("$ not flushed\n")
    other = cli_server.run_logged([sys.executable, "-c", "print(7)"], stdout=subprocess.PIPE, text=True)
    assert other.stdout == "7\n"
