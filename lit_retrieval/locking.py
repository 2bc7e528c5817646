"""`OutputLock`: one writer at a time for a command's output folder (index, shot cache, frame cache,
UVRB embedding cache).

    with OutputLock(out, name="index"):
        ...  # write into `out`

The lock is a file `FOLDER/.NAME.lock` created with `O_CREAT | O_EXCL` (atomic, also on NFS) that
holds its owner as JSON: host, pid, the process's start time, the command line and when the lock was
taken. A second writer is refused with `OutputLocked`, an `InputError` naming that holder, so
`lit-retrieval` prints it as one line (exit status 2). A lock whose holder is a process of the same
host that no longer runs (killed with SIGKILL, power loss) is stale and is taken over; a holder on
another host cannot be checked from here, so it is refused and the message says which file to
remove once that process is gone. The stale check and the takeover run under an `fcntl.flock` on
`FOLDER/.NAME.lock.guard`, so two processes recovering the same stale lock cannot both win.

Why not the `filelock` package: its lock files hold no owner, so a refused writer could not say who
holds the output, and its flock-based locks are not visible across hosts on every network file
system; an exclusively created file is both.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import socket
import sys
import time
from pathlib import Path
from typing import Any

from lit_retrieval.errors import InputError

EMPTY_LOCK_GRACE_S = 10.0


class OutputLocked(InputError):
    """Another process writes the same output; the message names it (host, pid, command, start)."""

    def __init__(self, folder: Path, lock_file: Path, holder: dict[str, Any]) -> None:
        started = holder.get("started", "?")
        super().__init__(
            f"{folder}: being written by another process (host {holder.get('host', '?')}, "
            f"pid {holder.get('pid', '?')}, since {started}: {holder.get('command', '?')}); "
            f"wait for it to finish, or remove {lock_file} if that process is gone"
        )
        self.holder = holder


def _process_start(pid: int) -> str | None:
    """The start time of process `pid` in clock ticks since boot (Linux `/proc/PID/stat` field 22),
    which tells a live holder from a later process that reused its pid; None where unavailable."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # fields after the command name; field 22 overall


def _alive(holder: dict[str, Any]) -> bool:
    """Whether the holder (a process of this host) still runs."""
    pid = holder.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of another user holds this pid
        pass
    start = holder.get("pid_start")
    return start is None or _process_start(pid) in (None, start)


class OutputLock:
    """Exclusive writer lock on `folder` (created if missing); a context manager.

    `name` tells the locks of one folder apart (e.g. each shard of an array job takes its own).
    """

    def __init__(self, folder: str | Path, name: str = "writer") -> None:
        self.folder = Path(folder)
        self.path = self.folder / f".{name}.lock"
        self.holder: dict[str, Any] | None = None

    def _me(self) -> dict[str, Any]:
        command = " ".join(
            [
                "lit-retrieval" if Path(sys.argv[0]).name in ("lit-retrieval", "__main__.py") else sys.argv[0],
                *map(shlex.quote, sys.argv[1:]),
            ]
        )
        return {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "pid_start": _process_start(os.getpid()),
            "command": command,
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        }

    def _read(self) -> dict[str, Any] | None:
        try:
            holder = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):  # a holder killed while writing its lock file
            return {}
        return holder if isinstance(holder, dict) else {}

    def _create(self, me: dict[str, Any]) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as handle:
            json.dump(me, handle)
        return True

    def _stale(self, holder: dict[str, Any], host: str) -> bool:
        """A holder of this host whose process is gone, or a lock file left empty (its writer died
        between creating and filling it) for longer than a live writer would take to fill it."""
        if not holder:
            with contextlib.suppress(FileNotFoundError):
                return time.time() - self.path.stat().st_mtime > EMPTY_LOCK_GRACE_S
            return True
        return holder.get("host") == host and not _alive(holder)

    def acquire(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        me = self._me()
        with open(self.path.with_name(self.path.name + ".guard"), "a") as guard:
            fcntl.flock(guard, fcntl.LOCK_EX)
            try:
                if not self._create(me):
                    holder = self._read() or {}
                    if self._stale(holder, me["host"]):
                        self.path.unlink(missing_ok=True)
                        if self._create(me):
                            self.holder = me
                            return
                        holder = self._read() or holder
                    raise OutputLocked(
                        self.folder, self.path, holder or {"command": "unknown (lock file still being written)"}
                    )
            finally:
                fcntl.flock(guard, fcntl.LOCK_UN)
        self.holder = me

    def release(self) -> None:
        """Remove the lock file if it is still this process's."""
        if self.holder is not None and self._read() == self.holder:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        self.holder = None

    def __enter__(self) -> OutputLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
