"""`shards.json`, the manifest of a shard folder that `lit-retrieval shard` writes and `ShardedDataModule`
reads: what decided the stored frames (the frame cache's sampling parameters, `MultiEventDataset.cache_params`),
how they are stored (`samples.Encoding`), the unit of work (`part_size` items a part) and each split's item
count. A folder whose manifest is absent or not ours, or that was written with other settings, is refused in
one line naming the folder and the settings that differ (`ShardError`)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from lit_retrieval.errors import InputError

MANIFEST = "shards.json"
FORMAT = "lit-retrieval-shards"
VERSION = 1


class ShardError(InputError, ValueError):
    """A shard folder that cannot be read or written to as asked; the message names it and the reason."""


def is_url(location: str) -> bool:
    """An object store location (`s3://`, `gs://`, ...), read through litdata's own clients."""
    return "://" in location and not location.startswith("file://")


def manifest(params: dict[str, Any], encoding: str, part_size: int, splits: dict[str, int], source: str) -> dict:
    return {
        "format": FORMAT,
        "version": VERSION,
        "params": params,
        "encoding": encoding,
        "part_size": part_size,
        "splits": splits,
        "source": source,
    }


def differences(found: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """`key: found -> wanted` for every setting that decides the stored samples and differs."""
    keys = ("params", "encoding", "part_size", "splits")
    out = []
    for key in keys:
        a, b = found.get(key), wanted.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += [f"{key}.{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in sorted({*a, *b}) if a.get(k) != b.get(k)]
        elif a != b:
            out.append(f"{key}: {a!r} -> {b!r}")
    return out


def read_manifest(location: str, storage_options: dict | None = None) -> dict[str, Any]:
    """The manifest of the shard folder `location` (a folder or an object store URL), checked for shape."""
    if is_url(location):
        from litdata.streaming.fs_provider import _get_fs_provider

        with tempfile.TemporaryDirectory() as tmp:
            local = os.path.join(tmp, MANIFEST)
            try:
                _get_fs_provider(location, storage_options or {}).download_file(f"{location}/{MANIFEST}", local)
                text = Path(local).read_text()
            except Exception as err:  # noqa: BLE001 - the client's own error names the cause
                raise ShardError(f"{location}: no readable {MANIFEST} ({err})") from None
    else:
        path = Path(location) / MANIFEST
        if not path.is_file():
            raise ShardError(f"{location}: not a shard folder of lit-retrieval shard (no {MANIFEST})")
        text = path.read_text()
    try:
        found = json.loads(text)
    except ValueError as err:
        raise ShardError(f"{location}/{MANIFEST}: not JSON ({err})") from None
    if not isinstance(found, dict) or found.get("format") != FORMAT:
        raise ShardError(f"{location}/{MANIFEST}: not a manifest of lit-retrieval shard (format {FORMAT!r})")
    if found.get("version") != VERSION:
        raise ShardError(f"{location}/{MANIFEST}: version {found.get('version')!r}, this reader knows {VERSION}")
    return found


def write_or_check_manifest(out: Path, wanted: dict[str, Any]) -> None:
    """Write `wanted` as the folder's manifest, or, if one is there, refuse a folder of other settings."""
    path = out / MANIFEST
    if path.exists():
        found = read_manifest(str(out))
        changed = differences(found, wanted)
        if changed:
            raise ShardError(
                f"{out}: written with other settings ({'; '.join(changed)}); write to a new folder or remove it"
            )
        return
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{MANIFEST}.{os.getpid()}"
    tmp.write_text(json.dumps(wanted, indent=1, sort_keys=True))
    os.replace(tmp, path)


def check_settings(location: str, found: dict[str, Any], wanted: dict[str, Any]) -> None:
    """Refuse a shard folder whose sampling parameters differ from the ones the config asks for."""
    changed = [
        f"{key}: {found['params'].get(key)!r} in the shards, {value!r} asked"
        for key, value in wanted.items()
        if found["params"].get(key) != value
    ]
    if changed:
        raise ShardError(f"{location}: written with other sampling settings ({'; '.join(changed)})")
