"""One rule for "is this the same video file?", used by every cache keyed by a video file (frame
cache, shot cache, `build-melon`'s stage cache, `serve`'s thumbnails and moment windows), by an
index's record of the videos that failed (retried once the file changed) and by the train/eval
split-overlap check.

A file's path identity is its absolute path with `.` and `..` removed and symbolic links followed
(`Path.resolve`, non-strict: a file that does not exist yet has one too), so `videos/./a.mp4`,
`videos/../videos/a.mp4` and a link to `videos/a.mp4` are one file. Its version is (size in bytes,
mtime in ns): a cache entry made for another version of the file is stale.
`tree_identity` extends it to a folder (a model directory: every file in it), and `digest` hashes
such identities with the settings of a cache into its key.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any


def file_path(path: str | Path) -> str:
    """The path identity of a file (absolute, normalised, links followed)."""
    return str(Path(path).resolve())


def file_version(path: str | Path) -> tuple[int, int] | None:
    """(size in bytes, mtime in ns) of a file, None if it does not exist."""
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return stat.st_size, stat.st_mtime_ns


def file_identity(path: str | Path) -> dict[str, object]:
    """Path identity and version of an existing file, as a JSON-ready record."""
    version = file_version(path)
    if version is None:
        raise FileNotFoundError(path)
    return {"path": file_path(path), "size": version[0], "mtime_ns": version[1]}


def tree_identity(path: str | Path) -> list:
    """(resolved path, size, mtime) of a file, or of every file in a directory."""
    path = Path(path)
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return [list(file_identity(p).values()) for p in files]


def digest(*parts: Any) -> str:
    """A 16-hex-digit key of JSON-ready `parts` (identities, settings; key order ignored)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]
