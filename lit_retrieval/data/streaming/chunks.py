"""The check of a local litdata split folder before it is streamed: an `index.json` litdata wrote, and
every chunk it lists present at its recorded size (a chunk cut short by a full disk or an interrupted copy
would otherwise fail, or hang, in a DataLoader worker mid-epoch)."""

from __future__ import annotations

import json
from pathlib import Path

from lit_retrieval.data.streaming.manifest import ShardError


def check_chunks(folder: Path) -> int:
    """The number of chunks of `folder`; `ShardError` naming the file if any is missing, foreign or short."""
    index = folder / "index.json"
    if not index.is_file():
        raise ShardError(
            f"{folder}: no index.json (not written, or its merge did not finish: rerun lit-retrieval shard)"
        )
    try:
        content = json.loads(index.read_text())
        chunks = [(c["filename"], int(c["chunk_bytes"])) for c in content["chunks"]]
        content["config"]["data_format"]
    except (ValueError, KeyError, TypeError) as err:
        raise ShardError(f"{index}: not a litdata index ({type(err).__name__}: {err})") from None
    for name, size in chunks:
        path = folder / name
        if not path.is_file():
            raise ShardError(f"{path}: missing (listed in {index})")
        found = path.stat().st_size
        if found != size:
            raise ShardError(f"{path}: {found} bytes, {size} written (truncated or replaced)")
    return len(chunks)
