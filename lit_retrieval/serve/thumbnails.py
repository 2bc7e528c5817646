"""Key-frame thumbnails of indexed videos, generated on first request and cached as JPEG files.

The cache lives outside the index (the server never writes there): `--cache-dir`, by default the
per-user cache `$XDG_CACHE_HOME/lit-retrieval/serve` (`~/.cache/...`), one folder per index. A file
name holds the video's index id, the video file's size and mtime (a changed video gets new
thumbnails) and the time in milliseconds. Only regular files are served from it: anything else at a
thumbnail's name (a planted symlink, a folder) is replaced by a freshly generated file.
"""

from __future__ import annotations

import hashlib
import io
import os
import threading
from pathlib import Path

from PIL import Image

from lit_retrieval.data.video import sample_frames, video_duration

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
    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)

    def path(self, video_id: int, video: str, time: float | None) -> Path:
        """The cached thumbnail of index entry `video_id` (file `video`) at `time`; rendered on first use."""
        stat = os.stat(video)
        stamp = "mid" if time is None else str(round(round(time / TIME_STEP) * TIME_STEP * 1000))
        path = self.folder / f"{video_id}-{stat.st_size}-{stat.st_mtime_ns}-{stamp}.jpg"
        if path.is_symlink() or (path.exists() and not path.is_file()):
            _remove(path)
        if not path.is_file():
            at = None if time is None else round(time / TIME_STEP) * TIME_STEP
            data = render_thumbnail(video, at)
            self.folder.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}.partial")
            partial.write_bytes(data)
            os.replace(partial, path)
        return path


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        import shutil

        shutil.rmtree(path)
    else:
        path.unlink()
