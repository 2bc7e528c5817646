"""Per-video results of one build stage, kept on disk so an interrupted or re-run build does only
what is missing (as the frame cache, lit_retrieval/data/media/frame_cache.py, keys its entries). MELON
(Sec. 3, supp. C) describes the stages, not how a run of them is kept: this layout is our choice.

Layout: `OUT/cache/STAGE/shard-I-of-N.jsonl`, one line per finished video, `{"video": uid, "key":
k, "result": {...}}`, where `k` digests everything the result depends on (the video's input to the
stage and the stage's settings): a changed input or setting misses and is recomputed, the old line
stays unused. Each shard appends to its own file (Slurm array tasks never share one); a reader
reads every file of the stage, so the shards' results merge without a merge step. A line is
appended and flushed after each video, so a killed build loses at most the video in progress; a
torn last line (killed mid-write) is ignored.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from lit_retrieval.data.media.identity import digest

log = logging.getLogger(__name__)


def stage_key(stage: str, *parts: Any) -> str:
    """The cache key of a stage's result for inputs and settings `parts`."""
    return digest(stage, *parts)


class StageCache:
    """The finished videos of `stage` under `out`, written by shard `shard` of `shards`."""

    def __init__(self, out: Path, stage: str, shard: int = 0, shards: int = 1) -> None:
        self.folder = out / "cache" / stage
        self.folder.mkdir(parents=True, exist_ok=True)
        self.file = self.folder / f"shard-{shard}-of-{shards}.jsonl"
        self.entries: dict[tuple[str, str], Any] = {}
        for path in sorted(self.folder.glob("*.jsonl")):
            self._read(path)

    def _read(self, path: Path) -> None:
        lines = path.read_text(encoding="utf-8").split("\n")
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                self.entries[(entry["video"], entry["key"])] = entry["result"]
            except (ValueError, KeyError, TypeError):
                log.warning("%s: line %d is unreadable (a build killed while writing it?); redone", path, number)

    def get(self, video: str, key: str) -> Any | None:
        return self.entries.get((video, key))

    def put(self, video: str, key: str, result: Any) -> None:
        """Record `result` (flushed to disk before returning)."""
        self.entries[(video, key)] = result
        append_line(self.file, json.dumps({"video": video, "key": key, "result": result}))


def append_line(path: Path, line: str) -> None:
    """Append `line` and a newline to `path`, flushed and synced before returning; a torn last line
    left by a killed writer is ended first, so it stays on its own (unreadable) line."""
    with path.open("ab") as handle:
        if handle.tell() > 0 and not _ends_with_newline(path):
            handle.write(b"\n")
        handle.write(line.encode("utf-8") + b"\n")
        handle.flush()
        os.fsync(handle.fileno())


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"
