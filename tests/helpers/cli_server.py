"""`lit-retrieval` commands and Lightning scripts in processes forked from a warm interpreter (a fork server, tests
only).

A fresh `python -m lit_retrieval fit|test|validate` spends about 6 s of CPU importing Lightning, torchmetrics and
transformers (about 8 s of CPU in all, measured from the suite's processes), and a test's tiny command runs in a
second or two after that. The server (this file run as a script) imports them once; for each request it forks a
child that is a real process of its own: its own pid and process group, working directory, environment, stdin
(/dev/null), stdout and stderr (files the caller reads, or one log file both append to), and exit status, running
`lit_retrieval.cli.main` as `python -m lit_retrieval` does (`__main__` is `lit_retrieval.__main__`; sys.path[0] is
the working directory) or a script as `python SCRIPT` does (`runpy`, the script's folder first on sys.path); its
threads are joined and its atexit handlers run at the end. A DDP or DeepSpeed launch asks for its other ranks as a
console's does (`python -m lit_retrieval.__main__ ARGV`, or `python SCRIPT ARGV`, with LOCAL_RANK set, through
Lightning's launcher); the child hands that request to the server over a socket, with its stdin, stdout and
stderr, and the server forks the rank into the child's process group (killing the group ends every rank, as a
console's Ctrl-C or a scheduler does). Only the imports are shared, so one server serves one environment: a
request with another environment gets its own server (modules read variables such as HF_HUB_OFFLINE at import).
Servers start in the repository root, so the empty PYTHONPATH entry `clean_launch_env` leaves names one folder.

`run_cli` (output captured), `run_logged` (output to a log file) and `run_script` are for commands and scripts that
import Lightning or transformers: the others start in under a second. Tests whose subject is the process itself
stay on a fresh interpreter: signals and their handlers, what a command imports, the installed console scripts,
sbatch templates, real-Slurm jobs.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

PRELOAD = ("lightning.pytorch", "torchmetrics", "transformers", "lit_retrieval.retrieval_cli", "lit_retrieval.cli")
# Variables that change from test to test but that no import reads (the progress interval is read when a command
# starts): a server serves every value of them (each child still gets the request's own value).
PER_REQUEST = frozenset({"PYTEST_CURRENT_TEST", "LIT_RETRIEVAL_PROGRESS_EVERY"})
MAX_SERVERS = 2  # each holds 0.5-0.9 GB resident: the least recently used stops when a third environment comes
_servers: dict[frozenset, subprocess.Popen] = {}
ROOT = Path(__file__).resolve().parents[2]  # the repository: where servers start
_rank_socket = ""  # the server's socket for DDP ranks (set in the server; its children inherit it)
_script = ""  # in a child running a script: its path (a rank Lightning asks for as `python SCRIPT` is forked)


def run_cli(
    args: list[str], cwd: Path | str, env: dict[str, str] | None = None, timeout: float = 420
) -> subprocess.CompletedProcess:
    """`subprocess.run([sys.executable, "-m", "lit_retrieval", *args], cwd=cwd, env=env, capture_output=True,
    text=True, timeout=timeout)`, run in a child of the warm server for `env` (default: this process's)."""
    return _captured({"argv": list(args)}, ["lit-retrieval", *args], cwd, env, timeout)


def run_script(
    script: Path | str, args: list[str], cwd: Path | str, env: dict[str, str] | None = None, timeout: float = 420
) -> subprocess.CompletedProcess:
    """`subprocess.run([sys.executable, script, *args], cwd=cwd, env=env, capture_output=True, text=True,
    timeout=timeout)` for a script that uses Lightning, run in a child of the warm server for `env`; a DDP or
    DeepSpeed launch in it forks its other ranks from the server too (`python SCRIPT ARGV`, as Lightning asks)."""
    script = os.path.abspath(os.path.join(cwd, script))
    return _captured({"argv": list(args), "script": script}, [sys.executable, script, *args], cwd, env, timeout)


def run_logged(
    command: list[str],
    *,
    stdout: Any = None,
    stderr: Any = None,
    cwd: Path | str | None = None,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    **options: Any,
) -> subprocess.CompletedProcess:
    """`subprocess.run(command, stdout=LOG, stderr=subprocess.STDOUT, cwd=..., env=..., timeout=...)` for
    `python -m lit_retrieval ARGS` writing both streams to a log file opened for appending, as the grid's local
    steps run (`lit_retrieval.grid.runs`) and as a Slurm log is written: run in a child of the warm server for
    `env` (default: this process's), appending to the same file (what the caller has not flushed lands after the
    child's output, as with a real child). Without a timeout, 420 s apply. Any other call is `subprocess.run`'s."""
    entry = [sys.executable, "-m", "lit_retrieval"]
    log = _appended_file(stdout)
    if command[: len(entry)] != entry or stderr != subprocess.STDOUT or options or log is None:
        return subprocess.run(command, stdout=stdout, stderr=stderr, cwd=cwd, env=env, timeout=timeout, **options)
    timeout = 420 if timeout is None else timeout
    with tempfile.TemporaryDirectory() as scratch:
        try:
            code = _request({"argv": command[len(entry) :], "output": log}, scratch, cwd or os.getcwd(), env, timeout)
        except subprocess.TimeoutExpired:
            raise subprocess.TimeoutExpired(command, timeout) from None
    return subprocess.CompletedProcess(command, code)


def _appended_file(handle: Any) -> str | None:
    """The path of `handle` if it is an open regular file in append mode that its name still names, else None."""
    import fcntl
    import stat

    name = getattr(handle, "name", None)
    if not isinstance(name, str) or not hasattr(handle, "fileno"):
        return None
    try:
        opened, named = os.fstat(handle.fileno()), os.stat(name)
        appends = fcntl.fcntl(handle.fileno(), fcntl.F_GETFL) & os.O_APPEND
    except OSError:
        return None
    if not (appends and stat.S_ISREG(opened.st_mode) and os.path.samestat(opened, named)):
        return None
    return os.path.abspath(name)


@contextlib.contextmanager
def grid_steps_forked():
    """While in the block, the grid's local steps (`lit_retrieval.grid.runs`) run through `run_logged`."""
    from types import SimpleNamespace
    from unittest import mock

    from lit_retrieval.grid import runs

    forked = SimpleNamespace(**{**vars(subprocess), "run": run_logged})  # the rest of `subprocess` as it is
    with mock.patch.object(runs, "subprocess", forked):
        yield


def _captured(
    request: dict, command: list[str], cwd: Path | str, env: dict[str, str] | None, timeout: float
) -> subprocess.CompletedProcess:
    """Run `request` in a child of the warm server, its stdout and stderr captured as `subprocess.run` does."""
    with tempfile.TemporaryDirectory() as scratch:
        out, err = Path(scratch) / "stdout", Path(scratch) / "stderr"
        request = {**request, "stdout": str(out), "stderr": str(err)}
        try:
            code = _request(request, scratch, cwd, env, timeout)
        except subprocess.TimeoutExpired:
            raise subprocess.TimeoutExpired(command, timeout, _text(out), _text(err)) from None
        return subprocess.CompletedProcess(command, code, out.read_text(), err.read_text())


def _text(path: Path) -> str:
    """What a child wrote to `path`; "" if it never opened it (the server did not get to fork it in time)."""
    return path.read_text() if path.exists() else ""


def _request(request: dict, scratch: str, cwd: Path | str, env: dict[str, str] | None, timeout: float) -> int:
    """Send `request` (run in `cwd` with `env`, default this process's) to the warm server for `env` and return its
    child's exit status; past `timeout` seconds the child and every process it started are killed."""
    env = dict(os.environ if env is None else env)
    server = _server(env)
    pid = Path(scratch) / "pid"
    request = {**request, "cwd": str(Path(cwd).resolve()), "env": env, "pid": str(pid)}
    server.stdin.write(json.dumps(request) + "\n")
    server.stdin.flush()
    try:
        return _reply(server, timeout)
    except BaseException:  # its timeout, or the caller's (pytest-timeout): its status must not answer the next one
        _abandon(server, pid)
        raise


def _abandon(server: subprocess.Popen, pid: Path) -> None:
    """Kill a request's child and every process it started, and read its exit status off the server's answers; a
    server that cannot give it (the child's pid not written, no answer in 60 s) is stopped instead."""
    try:
        group = int(pid.read_text())
        with contextlib.suppress(ProcessLookupError):  # it may have just ended
            os.killpg(group, signal.SIGKILL)
        _reply(server, 60)
        _wait_gone(group)
    except BaseException:  # noqa: BLE001 - whatever stopped the read, this server's answers are out of step
        for key in [key for key, running in _servers.items() if running is server]:
            del _servers[key]
        server.kill()
        server.wait()


def _wait_gone(group: int, timeout: float = 30) -> None:
    """Wait until no process of `group` is left (a killed DataLoader worker, orphaned, is reaped by init a moment
    after the command's own status comes back)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def _server(env: dict[str, str]) -> subprocess.Popen:
    key = frozenset((name, value) for name, value in env.items() if name not in PER_REQUEST)
    server = _servers.pop(key, None)
    if server is None or server.poll() is not None:
        server = subprocess.Popen(
            [sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True, cwd=ROOT
        )
    _servers[key] = server  # last: the dict's order is the order of use
    while len(_servers) > MAX_SERVERS:
        _stop(_servers.pop(next(iter(_servers))))
    return server


def _reply(server: subprocess.Popen, timeout: float) -> int:
    """The exit status of the request's child: the server's one line per request."""
    ready, _, _ = select.select([server.stdout], [], [], timeout)
    if not ready:
        raise subprocess.TimeoutExpired("lit-retrieval fork server", timeout)
    line = server.stdout.readline()
    if not line:
        raise RuntimeError(f"the lit-retrieval fork server ended (exit status {server.poll()})")
    return int(line)


def _stop(server: subprocess.Popen) -> None:
    """End a server at the end of its input; one that is still up 10 s later is killed (it only waits)."""
    with contextlib.suppress(OSError):
        server.stdin.close()
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


@atexit.register
def _stop_servers() -> None:
    for server in _servers.values():
        _stop(server)


def _forget_servers() -> None:
    """In a process forked from a caller (a DataLoader worker, a forked rank): close its copies of the servers'
    pipes, or a server would not see the end of its input while the child lives, and leave the servers to the
    caller."""
    for server in _servers.values():
        for pipe in (server.stdin, server.stdout):
            with contextlib.suppress(OSError, ValueError):
                pipe.close()
    _inherited.extend(_servers.values())  # kept, not freed: a Popen freed here would warn of a running child
    _servers.clear()


_inherited: list[subprocess.Popen] = []
os.register_at_fork(after_in_child=_forget_servers)


def _serve() -> None:
    """Import once, then fork a child per request: a command per line on stdin (its pid to the request's file,
    its exit status answered as one line when it ends) and a DDP rank per connection on the ranks' socket."""
    import importlib
    import shutil

    for name in PRELOAD:
        importlib.import_module(name)
    # A fork copies only the calling thread, so a lock another Python thread held would stay held in the child.
    # Native pools (OpenBLAS's, started at import unless OMP_NUM_THREADS=1) re-initialise through their fork
    # handlers, as they do for every DataLoader worker Lightning forks.
    if threading.active_count() != 1:
        raise SystemExit(f"fork server: the imports started Python threads ({threading.enumerate()}): not forking")
    # the socket's folder: not a TemporaryDirectory, whose clean-up (an atexit finaliser) every child would run
    scratch = tempfile.mkdtemp(prefix="lit-cli-server-")
    try:
        _serve_requests(os.path.join(scratch, "ranks"))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _serve_requests(rank_socket: str) -> None:
    """The server's loop, until its input ends: requests on stdin and on `rank_socket`, and the exit status of
    each child it forked answered to whoever asked for it."""
    import selectors
    import socket

    global _rank_socket
    _rank_socket = rank_socket
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(rank_socket)
    listener.listen()
    events = selectors.DefaultSelector()
    events.register(sys.stdin, selectors.EVENT_READ)
    events.register(listener, selectors.EVENT_READ)
    waiting: dict[int, socket.socket | None] = {}  # child pid -> the rank's connection (None: a command's child)
    while True:
        for key, _ in events.select(timeout=0.05):
            if key.fileobj is sys.stdin:
                line = sys.stdin.readline()
                if not line:  # the caller stopped the server: children still running carry on, as orphans
                    return
                request = json.loads(line)
                pid = _fork(request, closing=[listener, *filter(None, waiting.values())])
                Path(request["pid"]).write_text(str(pid))
                waiting[pid] = None
            else:
                connection, _ = listener.accept()
                try:
                    request, fds = _rank_request(connection)
                except (OSError, ValueError):  # the launcher ended before its request was whole: nothing to fork
                    connection.close()
                    continue
                pid = _fork(request, closing=[listener, connection, *filter(None, waiting.values())], stdio=fds)
                for fd in fds:
                    os.close(fd)
                waiting[pid] = connection
                try:
                    connection.sendall(f"{pid}\n".encode())
                except OSError:  # the launcher ended meanwhile (its group killed): so does the rank it asked for
                    os.kill(pid, signal.SIGKILL)
        while waiting and (ended := os.waitpid(-1, os.WNOHANG))[0]:
            connection, code = waiting.pop(ended[0]), os.waitstatus_to_exitcode(ended[1])
            if connection is None:
                print(code, flush=True)
                continue
            with contextlib.suppress(OSError), connection:  # the rank's launcher may have ended first
                connection.sendall(f"{code}\n".encode())


def _rank_request(connection) -> tuple[dict, list[int]]:
    """A rank's request (a JSON line) and the stdin, stdout and stderr its launcher passed along with it."""
    import socket

    connection.settimeout(30)  # a launcher stopped mid-request must not stall the server (socket.timeout: OSError)
    data, fds, _, _ = socket.recv_fds(connection, 1 << 16, 3)
    try:
        while not data.endswith(b"\n"):
            if not (more := connection.recv(1 << 16)):
                raise ConnectionError("the rank's launcher closed its connection mid-request")
            data += more
        if len(fds) != 3:
            raise ConnectionError(f"a rank request came with {len(fds)} of its 3 standard streams")
        return json.loads(data), fds
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def _fork(request: dict, closing: list, stdio: list[int] | None = None) -> int:
    """Fork a child that becomes the request's process; it never returns into the server's loop, whatever fails."""
    pid = os.fork()
    if pid == 0:
        try:
            for held in closing:  # the server's sockets: a child holding them would keep a rank's answer open
                held.close()
            _child(request, stdio)
        except BaseException:  # noqa: BLE001 - e.g. its rank's launcher gone before `setpgid`: say so, end
            import traceback

            traceback.print_exc()
        finally:
            os._exit(1)
    return pid


class _ForkedRank:
    """`subprocess.Popen` as Lightning's DDP launcher uses it, for a rank the server forked: `pid`, `returncode`,
    `poll`, `wait`, `send_signal`, `terminate`, `kill` (its exit status comes over the request's connection)."""

    def __init__(self, program: dict, env: dict[str, str], cwd: str | None) -> None:
        import socket

        self._connection = socket.socket(socket.AF_UNIX)
        self._connection.connect(_rank_socket)
        request = {**program, "cwd": cwd or os.getcwd(), "env": env, "pgid": os.getpgid(0)}
        socket.send_fds(self._connection, [json.dumps(request).encode() + b"\n"], [0, 1, 2])
        self._received = b""
        self._reading = threading.Lock()  # Lightning's observer thread polls; a signal handler may too
        pid = self._line(None)
        if not pid:
            raise ChildProcessError(f"the fork server did not start the rank {program}")
        self.pid = int(pid)
        self.returncode: int | None = None

    def _line(self, timeout: float | None) -> str | None:
        """The server's next answer line; None if none came within `timeout` seconds, "" if the server is gone."""
        while b"\n" not in self._received:
            if not select.select([self._connection], [], [], timeout)[0]:
                return None
            if not (more := self._connection.recv(64)):
                return ""
            self._received += more
        line, self._received = self._received.split(b"\n", 1)
        return line.decode()

    def wait(self, timeout: float | None = None) -> int:
        with self._reading:
            if self.returncode is None:
                if (line := self._line(timeout)) is None:
                    raise subprocess.TimeoutExpired(f"rank {self.pid}", timeout)
                self.returncode = int(line) if line else 1  # no answer: the server ended, its status unknown
            return self.returncode

    def poll(self) -> int | None:
        try:
            return self.wait(0)
        except subprocess.TimeoutExpired:
            return None

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # as Popen: a rank that just ended is left alone
                os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _launch_rank(command: list[str], env: dict[str, str] | None = None, cwd: str | None = None):
    """Lightning's `subprocess.Popen(command, env=..., cwd=...)` for another rank: forked by the server when the
    command is this process's own program (`python -m lit_retrieval.__main__ ARGV`, or `python SCRIPT ARGV` for
    the script this child runs), else a real subprocess."""
    if env is not None and command[:3] == [sys.executable, "-m", "lit_retrieval.__main__"]:
        return _ForkedRank({"argv": command[3:]}, env, cwd)
    if env is not None and _script and command[:2] == [sys.executable, _script]:
        return _ForkedRank({"argv": command[2:], "script": _script}, env, cwd)
    return subprocess.Popen(command, env=env, cwd=cwd)


def _child(request: dict, stdio: list[int] | None = None) -> None:
    """Become the request's process (`python -m lit_retrieval ARGV` or `python SCRIPT ARGV` in `cwd`) and exit with
    its status: a process group of its own, or a rank's launcher's group (`pgid`), so that killing the group ends
    every rank."""
    import logging
    import traceback
    from types import SimpleNamespace

    from lightning.pytorch.strategies.launchers import subprocess_script

    os.setpgid(0, request.get("pgid", 0))
    if stdio is None:
        stdio = [os.open(os.devnull, os.O_RDONLY)]
        if "output" in request:  # stdout and stderr appended to one file, as `stdout=LOG, stderr=STDOUT`
            log = os.open(request["output"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            stdio += [log, os.dup(log)]
        else:
            stdio += [
                os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) for name in ("stdout", "stderr")
            ]
    for fd, source in enumerate(stdio):
        os.dup2(source, fd)
        os.close(source)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    subprocess_script.subprocess = SimpleNamespace(Popen=_launch_rank)  # Lightning's launcher's other ranks
    code = 0
    try:
        _run_main(request)
    except SystemExit as stop:  # as the interpreter: an int is the status, None 0, anything else printed and 1
        code = stop.code if isinstance(stop.code, int) else 0 if stop.code is None else 1
        if not isinstance(stop.code, int | None):
            print(stop.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - an uncaught error ends the process as the interpreter ends it
        traceback.print_exc()
        code = 1
    try:
        threading._shutdown()  # as the interpreter at its end: wait for the non-daemon threads
        atexit._run_exitfuncs()
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _run_main(request: dict) -> None:
    """Run the request's program as the interpreter runs `python SCRIPT ARGV` or `python -m lit_retrieval ARGV`
    (`sys.argv`, `sys.path[0]`, `__main__`); Lightning's DDP launcher reads `__main__` to start the other ranks
    the same way (`python SCRIPT ARGV`, or `-m <__main__.__spec__.name> ARGV`)."""
    global _script
    if script := request.get("script"):
        import runpy

        _script = script
        sys.argv = [script, *request["argv"]]
        sys.path[0] = os.path.dirname(os.path.realpath(script))  # as the interpreter: symlinks resolved
        runpy.run_path(script, run_name="__main__")  # `__main__` is the script's module while it runs
        return
    from lit_retrieval import __main__ as entry
    from lit_retrieval.cli import main

    sys.modules["__main__"] = entry
    sys.argv = [entry.__file__, *request["argv"]]
    sys.path[0] = request["cwd"]
    main(request["argv"])


if __name__ == "__main__":
    _serve()
