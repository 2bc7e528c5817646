"""Key-frame thumbnails of indexed videos, generated on first request and cached as JPEG files.

The cache lives outside the index (the server never writes there): `--cache-dir`, by default the
per-user cache `$XDG_CACHE_HOME/lit-retrieval/serve` (`~/.cache/...`), one folder per index. A file
name holds the video's index id, the video file's size and mtime (a changed video gets new
thumbnails) and the time in milliseconds. Only regular files are served from it: anything else at a
thumbnail's name (a planted symlink, a folder) is replaced by a freshly generated file.

A requested time is clamped to the video (0 to its duration) before it names a file, so times past
the end share one thumbnail, and the folder is bounded in bytes (`--thumbnail-cache-mb`): past the
bound, the least recently written thumbnails are deleted.
"""

from __future__ import annotations

import hashlib
import io
import os
import threading
from pathlib import Path

from PIL import Image

from lit_retrieval.data.media.identity import file_version
from lit_retrieval.data.media.video import sample_frames, video_duration

THUMBNAIL_SIZE = 320  # longest side, pixels
TIME_STEP = 0.1  # thumbnail times are rounded to this many seconds (cache granularity)


def default_cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lit-retrieval" / "serve"


def index_cache_dir(root: str | Path, index_path: str | Path, fingerprint: str) -> Path:
    """The cache folder of one index (by its resolved path and model fingerprint)."""
    key = hashlib.sha256(f"{Path(index_path).resolve()}|{fingerprint}".encode()).hexdigest()[:16]
    return Path(root) / key


def render_thumbnail(video: str, time: float | None) -> bytes:
    """JPEG bytes of the frame shown at `time` seconds (default: the middle of the video)."""
    duration = video_duration(video)
    at = duration / 2 if time is None else min(max(time, 0.0), max(duration - 1e-3, 0.0))
    sample = sample_frames(video, 1, start=at, end=min(at + 1e-3, duration))
    image = Image.fromarray(sample.frames[0])
    image.thumbnail((THUMBNAIL_SIZE, THUMBNAIL_SIZE))
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=85)
    return out.getvalue()


class ThumbnailCache:
    def __init__(self, folder: str | Path, max_bytes: int = 64 * 2**20) -> None:
        self.folder = Path(folder)
        self.max_bytes = max_bytes
        self.durations: dict[tuple[str, int, int], float] = {}  # one float per indexed video at most
        self._lock = threading.Lock()
        self._bytes: int | None = None  # bytes in the folder, counted on first write

    def duration(self, video: str, version: tuple[int, int]) -> float:
        key = (video, *version)
        if key not in self.durations:
            self.durations[key] = video_duration(video)
        return self.durations[key]

    def path(self, video_id: int, video: str, time: float | None) -> Path:
        """The cached thumbnail of index entry `video_id` (file `video`) at `time` (clamped to the
        video); rendered on first use."""
        version = file_version(video)  # (size, mtime): a changed file gets new thumbnails
        if version is None:
            raise FileNotFoundError(video)
        if time is not None:
            time = min(max(round(time / TIME_STEP) * TIME_STEP, 0.0), self.duration(video, version))
        stamp = "mid" if time is None else str(round(time * 1000))
        path = self.folder / f"{video_id}-{version[0]}-{version[1]}-{stamp}.jpg"
        if path.is_symlink() or (path.exists() and not path.is_file()):
            _remove(path)
        if not path.is_file():
            data = render_thumbnail(video, time)
            self.folder.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}.partial")
            partial.write_bytes(data)
            os.replace(partial, path)
            self._account(len(data), keep=path)
        return path

    def _account(self, written: int, keep: Path) -> None:
        """Count a written thumbnail; past `max_bytes`, delete the oldest ones (not `keep`) down to 3/4 of it."""
        with self._lock:
            if self._bytes is None:
                self._bytes = sum(p.stat().st_size for p in self.folder.glob("*.jpg") if p.is_file())
            else:
                self._bytes += written
            if self._bytes <= self.max_bytes:
                return
            files = sorted((p.stat().st_mtime_ns, p) for p in self.folder.glob("*.jpg") if p.is_file() and p != keep)
            self._bytes = sum(p.stat().st_size for _, p in files) + keep.stat().st_size
            for _, old in files:
                if self._bytes <= self.max_bytes * 3 // 4:
                    break
                size = old.stat().st_size
                old.unlink(missing_ok=True)
                self._bytes -= size


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        import shutil

        shutil.rmtree(path)
    else:
        path.unlink()
