"""One writer per output: real processes hold `OutputLock`s while `index`, `shots` and `uvrb` are
started on the same output (refused, one line naming the holder, exit 2); a lock left by a killed
process, or by a process whose pid was reused, is taken over; racing processes get one winner."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from lit_retrieval.cli import main
from lit_retrieval.locking import OutputLock, OutputLocked

ROOT = Path(__file__).resolve().parents[1]

HOLDER = """
import sys, time
from pathlib import Path
from lit_retrieval.cli import main
from lit_retrieval.locking import OutputLock, OutputLocked

folder, name, go, hold = sys.argv[1], sys.argv[2], Path(sys.argv[3]), float(sys.argv[4])
print("ready", flush=True)
while not go.exists():
    time.sleep(0.005)
try:
    lock = OutputLock(folder, name)
    lock.acquire()
except OutputLocked:
    print("refused", flush=True)
    sys.exit(3)
print("held", flush=True)
if hold < 0:
    sys.stdin.read()  # until the test closes our stdin
else:
    time.sleep(hold)
lock.release()
"""


@pytest.fixture()
def holder_script(tmp_path) -> Path:
    script = tmp_path / "hold_output.py"
    script.write_text(HOLDER)
    return script


def start_holder(script: Path, folder: Path, name: str, go: Path, hold: float = -1) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, str(script), str(folder), name, str(go), str(hold)],
        env=env,
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def held(script: Path, folder: Path, name: str, tmp_path: Path) -> subprocess.Popen:
    go = tmp_path / f"go-{name}"
    go.touch()
    process = start_holder(script, folder, name, go)
    assert [process.stdout.readline().strip() for _ in range(2)] == ["ready", "held"]
    return process


def commands(tmp_path: Path) -> dict[str, tuple[list[str], Path, str]]:
    """command -> (arguments writing into `out`, the folder it locks, the lock's name)."""
    videos = tmp_path / "videos"
    videos.mkdir(exist_ok=True)
    (videos / "a.mp4").write_bytes(b"not decoded: the lock comes first")
    out = tmp_path / "out"
    return {
        "index": (
            ["index", "--model", str(tmp_path / "no-model"), "--videos", str(videos), "--out", str(out)],
            out,
            "index",
        ),
        "shots": (["shots", str(videos / "a.mp4"), "--cache", str(out)], out, "shots"),
        "uvrb": (["uvrb", "--model", str(tmp_path / "no-model"), "--out", str(out)], out, "uvrb"),
    }


@pytest.mark.parametrize("command", ["index", "shots", "uvrb"])
def test_a_second_writer_is_refused_with_the_holder_named(tmp_path, holder_script, command, capsys, monkeypatch):
    args, folder, name = commands(tmp_path)[command]
    monkeypatch.chdir(ROOT)  # uvrb's default task list
    holder = held(holder_script, folder, name, tmp_path)
    try:
        with pytest.raises(SystemExit) as refused:  # this test's process is the second writer
            main(args)
    finally:
        holder.communicate("")  # close its stdin: it releases the lock and exits
    stderr = capsys.readouterr().err
    assert refused.value.code == 2 and "Traceback" not in stderr
    line = stderr.strip().splitlines()[-1]
    assert line.startswith(f"lit-retrieval {command}: {folder}: being written by another process")
    assert f"host {socket.gethostname()}, pid {holder.pid}, since 20" in line and "hold_output.py" in line
    assert holder.returncode == 0 and not (folder / f".{name}.lock").exists()  # released on exit


def test_the_holder_in_the_lock_file_is_this_process(tmp_path):
    with OutputLock(tmp_path / "out", "index") as lock:
        holder = json.loads((tmp_path / "out" / ".index.lock").read_text())
        assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname() and holder == lock.holder
        stat = Path(f"/proc/{os.getpid()}/stat").read_text()
        assert holder["pid_start"] == stat[stat.rindex(")") + 2 :].split()[19]  # proc(5): field 22, starttime
        with pytest.raises(OutputLocked, match="being written by another process"):
            OutputLock(tmp_path / "out", "index").acquire()  # a second lock, even in the same process
        OutputLock(tmp_path / "out", "index-s1").acquire()  # another name is another lock
    assert not (tmp_path / "out" / ".index.lock").exists()


def test_a_lock_left_by_a_killed_process_is_taken_over(tmp_path, holder_script):
    holder = held(holder_script, tmp_path / "out", "shots", tmp_path)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    left = json.loads((tmp_path / "out" / ".shots.lock").read_text())
    assert left["pid"] == holder.pid  # nothing removed it
    with OutputLock(tmp_path / "out", "shots"):
        assert json.loads((tmp_path / "out" / ".shots.lock").read_text())["pid"] == os.getpid()


def test_a_reused_pid_is_not_taken_for_the_holder(tmp_path):
    (tmp_path / ".x.lock").write_text(
        json.dumps(
            {
                "host": socket.gethostname(),
                "pid": os.getppid(),
                "pid_start": "1",
                "command": "lit-retrieval index",
                "started": "earlier",
            }
        )
    )
    with OutputLock(tmp_path, "x"):  # the pid runs, but it started at another time: another process
        assert json.loads((tmp_path / ".x.lock").read_text())["pid"] == os.getpid()


def test_a_holder_on_another_host_is_refused_and_the_file_to_remove_named(tmp_path):
    other = {
        "host": "gpu-node-17",
        "pid": 1,
        "pid_start": "5",
        "command": "lit-retrieval index --out x",
        "started": "2026-01-01 10:00:00 UTC",
    }
    (tmp_path / ".index.lock").write_text(json.dumps(other))
    with pytest.raises(OutputLocked) as refused:
        OutputLock(tmp_path, "index").acquire()
    assert str(refused.value) == (
        f"{tmp_path}: being written by another process (host gpu-node-17, pid 1, since 2026-01-01 10:00:00 UTC: "
        f"lit-retrieval index --out x); wait for it to finish, or remove {tmp_path / '.index.lock'} "
        "if that process is gone"
    )


def test_racing_processes_over_a_stale_lock_get_one_winner(tmp_path, holder_script):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / ".index.lock").write_text(
        json.dumps({"host": socket.gethostname(), "pid": int(dead), "command": "gone"})
    )
    go = tmp_path / "go"
    racers = [start_holder(holder_script, tmp_path / "out", "index", go, hold=2.0) for _ in range(4)]
    assert [racer.stdout.readline().strip() for racer in racers] == ["ready"] * 4  # all waiting for the signal
    go.touch()
    outcomes = sorted(racer.communicate(timeout=60)[0].strip() for racer in racers)
    assert outcomes == ["held", "refused", "refused", "refused"]
