"""The writer behind `lit-retrieval shard`: the items of a data module's splits as litdata chunks.

A split's items `0..n-1` are cut into parts of `part_size` items (`plan_parts`); a part is the unit of work
and of commit. It is written with litdata's `BinaryWriter` into a temporary folder that is renamed into
`parts/SPLIT/NNNNNN` once its `index.json` is complete, so a part is there whole or not at all, whoever wrote
it and however the writer was stopped. Array task `k` of `N` writes parts `k, k+N, ...`, each by one of its
local workers; a rerun writes only the parts that are missing (a killed writer's temporary folder is
removed first). The process that finds every part of a split present merges them, in part order, with
litdata's `merge_datasets` into `SPLIT/` (under a lock; `SPLIT/index.json` is the commit point) and removes
the parts: the merged split is the same whatever the number of tasks and workers and wherever they stopped.

Hand-written around litdata because `optimize()` does not fit: its chunks depend on its workers' division
of the inputs, its checkpoints resume a node's own run only, and its multi-node merge blocks the last node
until every other has finished (a throttled Slurm array then stalls).
"""

from __future__ import annotations

import fcntl
import json
import multiprocessing
import os
import shutil
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lit_retrieval.data.streaming.samples import Encoding, to_sample
from lit_retrieval.errors import ConfigError

PARTS = "parts"


@dataclass(frozen=True)
class Part:
    """Items `[start, stop)` of `split`, written as part `number`."""

    split: str
    number: int
    start: int
    stop: int


def plan_parts(sizes: dict[str, int], part_size: int) -> list[Part]:
    """Every split's items cut into parts of `part_size` (the last one shorter), in split then item order."""
    return [
        Part(split, number, start, min(start + part_size, size))
        for split, size in sizes.items()
        for number, start in enumerate(range(0, size, part_size))
    ]


class ShardWriter:
    """Writes and merges the parts of `datasets` (split -> a `MultiEventDataset` giving uint8 frames)."""

    def __init__(self, out: Path, datasets: dict[str, Any], encoding: Encoding, chunk_bytes: str, part_size: int):
        self.out = out
        self.datasets = datasets
        self.encoding = encoding
        self.chunk_bytes = chunk_bytes
        self.part_size = part_size

    def parts(self) -> list[Part]:
        return plan_parts({split: len(d) for split, d in self.datasets.items()}, self.part_size)

    def folder(self, part: Part) -> Path:
        return self.out / PARTS / part.split / f"{part.number:06d}"

    def merged(self, split: str) -> bool:
        return (self.out / split / "index.json").is_file()

    def pending(self, parts: Iterable[Part]) -> list[Part]:
        """The parts neither committed nor in an already merged split; stale temporary folders of these
        parts (a killed writer's) are removed."""
        todo = [p for p in parts if not self.merged(p.split) and not self.folder(p).is_dir()]
        for part in todo:
            for stale in self.folder(part).parent.glob(f".{part.number:06d}.tmp-*"):
                shutil.rmtree(stale, ignore_errors=True)
        return todo

    def write(self, part: Part) -> int:
        """Write `part` (temporary folder, then one rename); the number of items skipped as bad videos."""
        from litdata.streaming.writer import BinaryWriter

        final = self.folder(part)
        tmp = final.parent / f".{part.number:06d}.tmp-{socket.gethostname()}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        dataset = self.datasets[part.split]
        writer = BinaryWriter(str(tmp), chunk_bytes=self.chunk_bytes)
        written, skipped = 0, []
        for index in range(part.start, part.stop):
            item = dataset[index]
            if "error" in item:
                skipped.append({"index": index, "error": item["error"]})
                continue
            writer[written] = to_sample(item, self.encoding)
            written += 1
        if written:
            writer.done()
            writer.merge(1)
        (tmp / "skipped.json").write_text(json.dumps(skipped))
        os.replace(tmp, final)
        return len(skipped)

    def write_all(self, parts: list[Part], workers: int, done: Callable[[Part], None] = lambda part: None) -> int:
        """Write `parts` with `workers` processes (forked: the datasets are inherited, not pickled)."""
        if workers <= 1 or len(parts) <= 1:
            skipped = 0
            for part in parts:
                skipped += self.write(part)
                done(part)
            return skipped
        global _WRITER
        _WRITER = self
        skipped = 0
        with multiprocessing.get_context("fork").Pool(min(workers, len(parts))) as pool:
            for part, count in zip(parts, pool.imap(_write_in_worker, parts)):
                skipped += count
                done(part)
        return skipped

    def merge_ready(self) -> list[str]:
        """Merge every split whose parts are all committed (under a lock: one merger at a time); the splits
        merged now."""
        merged = []
        self.out.mkdir(parents=True, exist_ok=True)
        with open(self.out / ".merge.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            by_split: dict[str, list[Part]] = {}
            for part in self.parts():
                by_split.setdefault(part.split, []).append(part)
            for split, parts in by_split.items():
                if self.merged(split) or not all(self.folder(p).is_dir() for p in parts):
                    continue
                self._merge(split, [self.folder(p) for p in parts])
                merged.append(split)
        return merged

    def _merge(self, split: str, folders: list[Path]) -> None:
        from litdata import merge_datasets

        skipped = [entry for folder in folders for entry in json.loads((folder / "skipped.json").read_text())]
        full = [str(f) for f in folders if (f / "index.json").is_file()]
        tmp = self.out / f".{split}.merging"
        shutil.rmtree(tmp, ignore_errors=True)
        if len(full) == 1:
            shutil.copytree(full[0], tmp, ignore=shutil.ignore_patterns("skipped.json"))
        elif full:
            merge_datasets(full, str(tmp), max_workers=len(os.sched_getaffinity(0)))
        else:
            tmp.mkdir()
        (self.out / f"{split}.skipped.json").write_text(json.dumps(skipped))
        os.replace(tmp, self.out / split)
        shutil.rmtree(self.out / PARTS / split, ignore_errors=True)
        if not any((self.out / PARTS).iterdir()):
            (self.out / PARTS).rmdir()


_WRITER: ShardWriter | None = None


def _write_in_worker(part: Part) -> int:
    assert _WRITER is not None
    return _WRITER.write(part)


def shard_datamodule(
    datamodule: Any,
    out: str,
    splits: list[str],
    task: int = 0,
    tasks: int = 1,
    workers: int = 1,
    *,
    encoding: Encoding = "frames",
    part_size: int = 256,
    chunk_bytes: str = "64MB",
) -> str:
    """Write task `task` of `tasks`'s parts of a `VideoTextDataModule`'s `splits` into `out` (sampled as the
    module samples them; the manifest written or checked first), merge what is complete; a summary line."""
    from lit_retrieval.data.batching.datamodule import VideoTextDataModule
    from lit_retrieval.data.batching.dataset import MultiEventDataset
    from lit_retrieval.data.streaming.manifest import manifest, write_or_check_manifest

    if not isinstance(datamodule, VideoTextDataModule):
        raise ConfigError(f"shard: {type(datamodule).__name__} is not a video-text data module")
    if datamodule.shots is not None:
        raise ConfigError("shard: data.shots is not stored in shards; remove it from the config to shard")
    datamodule.prepare_data()
    datamodule.setup()
    datasets = {role: datamodule.datasets[role] for role in splits if role in datamodule.datasets}
    for dataset in datasets.values():
        dataset.uint8_frames = True
    params = MultiEventDataset.cache_params(next(iter(datasets.values())).spec, datamodule.trim_to_annotation)
    sizes = {role: len(d) for role, d in datasets.items()}
    root = Path(out)
    write_or_check_manifest(root, manifest(params, encoding, part_size, sizes, datamodule.source))
    writer = ShardWriter(root, datasets, encoding, chunk_bytes, part_size)
    start = time.perf_counter()
    mine = writer.parts()[task::tasks]
    todo = writer.pending(mine)
    skipped = writer.write_all(todo, workers)
    merged = writer.merge_ready()
    return (
        f"{len(mine)} parts in task {task} of {tasks} ({len(mine) - len(todo)} already written, {len(todo)} "
        f"written, {skipped} bad videos skipped) in {time.perf_counter() - start:.1f} s; "
        + (f"merged {', '.join(merged)} into {out}" if merged else f"shards in {out}")
    )
