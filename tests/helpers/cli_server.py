"""`lit-retrieval` trainer commands in processes forked from a warm interpreter (a fork server, tests only).

A fresh `python -m lit_retrieval fit|test|validate` spends about 6 s of CPU importing Lightning, torchmetrics and
transformers (about 8 s of CPU in all, measured from the suite's processes), and a test's tiny command runs in a
second or two after that. The server (this file run as a script) imports them once; for each command it forks a
child that is a real process of its own: its own pid and session, working directory, environment, stdin
(/dev/null), stdout and stderr (files the caller reads), and exit status, running `lit_retrieval.cli.main` as
`python -m lit_retrieval` does (`__main__` is `lit_retrieval.__main__`, so a DDP launch starts its other ranks as
`python -m lit_retrieval.__main__ ...`, fresh interpreters, exactly as from a console; sys.path[0] is the working
directory; atexit handlers run at the end). Only the imports are shared, so one server serves one environment: a
request with another environment gets its own server (modules read variables such as HF_HUB_OFFLINE at import).

Use `run_cli` for the trainer commands (and `convert-checkpoint`): the other commands import little and start in
under a second. Tests whose subject is the process itself stay on a fresh interpreter: signals and their
handlers, what a command imports, the installed console scripts, sbatch templates.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

PRELOAD = ("lightning.pytorch", "torchmetrics", "transformers", "lit_retrieval.retrieval_cli", "lit_retrieval.cli")
# Variables that change from test to test but that no import reads: a server serves every value of them (each
# child still gets the request's own value).
PER_REQUEST = frozenset({"PYTEST_CURRENT_TEST"})
MAX_SERVERS = 2  # each holds 0.5-0.9 GB resident: the least recently used stops when a third environment comes
_servers: dict[frozenset, subprocess.Popen] = {}


def run_cli(
    args: list[str], cwd: Path | str, env: dict[str, str] | None = None, timeout: float = 420
) -> subprocess.CompletedProcess:
    """`subprocess.run([sys.executable, "-m", "lit_retrieval", *args], cwd=cwd, env=env, capture_output=True,
    text=True, timeout=timeout)`, run in a child of the warm server for `env` (default: this process's)."""
    env = dict(os.environ if env is None else env)
    server = _server(env)
    with tempfile.TemporaryDirectory() as scratch:
        out, err, pid = (Path(scratch) / name for name in ("stdout", "stderr", "pid"))
        request = {"argv": list(args), "cwd": str(Path(cwd).resolve()), "env": env}
        request |= {"stdout": str(out), "stderr": str(err), "pid": str(pid)}
        server.stdin.write(json.dumps(request) + "\n")
        server.stdin.flush()
        try:
            code = _reply(server, timeout)
        except subprocess.TimeoutExpired:
            os.killpg(int(pid.read_text()), signal.SIGKILL)  # the child and every process it started
            _reply(server, 60)
            raise subprocess.TimeoutExpired(["lit-retrieval", *args], timeout, out.read_text(), err.read_text())
        return subprocess.CompletedProcess(["lit-retrieval", *args], code, out.read_text(), err.read_text())


def _server(env: dict[str, str]) -> subprocess.Popen:
    key = frozenset((name, value) for name, value in env.items() if name not in PER_REQUEST)
    server = _servers.pop(key, None)
    if server is None or server.poll() is not None:
        server = subprocess.Popen(
            [sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True
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
    server.stdin.close()  # the server ends at the end of its input
    server.wait(timeout=30)


@atexit.register
def _stop_servers() -> None:
    for server in _servers.values():
        _stop(server)


def _serve() -> None:
    """Import once, then fork a child per request line on stdin (its pid to the request's file) and answer
    its exit status, one line per request."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    # A fork copies only the calling thread, so a lock another Python thread held would stay held in the child.
    # Native pools (OpenBLAS's, started at import unless OMP_NUM_THREADS=1) re-initialise through their fork
    # handlers, as they do for every DataLoader worker Lightning forks.
    if threading.active_count() != 1:
        raise SystemExit(f"fork server: the imports started Python threads ({threading.enumerate()}): not forking")
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        Path(request["pid"]).write_text(str(pid))
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), flush=True)


def _child(request: dict) -> None:
    """Become the command's process (as `python -m lit_retrieval ARGV` in `cwd`) and exit with its status."""
    import logging
    import traceback

    os.setsid()
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    from lit_retrieval import __main__ as entry
    from lit_retrieval.cli import main

    sys.modules["__main__"] = entry  # Lightning's DDP launcher re-runs `-m <__main__.__spec__.name> argv[1:]`
    sys.argv = [entry.__file__, *request["argv"]]
    sys.path[0] = request["cwd"]
    code = 0
    try:
        main(request["argv"])
    except SystemExit as stop:  # as the interpreter: an int is the status, None 0, anything else printed and 1
        code = stop.code if isinstance(stop.code, int) else 0 if stop.code is None else 1
        if not isinstance(stop.code, int | None):
            print(stop.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - an uncaught error ends the process as the interpreter ends it
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


if __name__ == "__main__":
    _serve()
