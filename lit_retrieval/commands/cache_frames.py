"""`lit-retrieval cache-frames`: decode every video of a training config's splits once, with the
sampling its data module uses, into a frame cache that the data module then reads
(`data.init_args.frame_cache: DIR`, no other change).

    lit-retrieval cache-frames --config TRAIN.yaml [--config PART.yaml ...] [--out DIR]
        [--splits train val test] [--workers N] [--shard I --num-shards N] [--format raw|jpeg --quality Q]

`--out` defaults to the config's `data.init_args.frame_cache`. Video-text data modules (MELON,
ActivityNet, DiDeMo, MSR-VTT, Condensed Movies, the synthetic corpus) cache each record's window
with the module's `num_frames`, `image_size`, `sampling` and `trim_to_annotation` (shot detection,
where configured, runs as in training: it decides which records are kept); GVE's
`MultiTaskDataModule` caches every video item of its training (`train`) and validation (`val`)
tasks as the model's input processing samples it (`model.init_args.embedder.inputs`).

An interrupted run (a crash, a full disk: one line naming the folder) is resumed by running it again
(the result is the same as an uninterrupted run); a cached video that changed since, an entry whose
frames were cut short and an unreadable index line are named in one line each and decoded again
(`lit_retrieval.data.media.frame_cache`); array tasks (`--shard`, the shipped `array.sbatch`) write
their own files into the same folder, and readers take them all. Undecodable videos are listed in
the shard's `.failed.txt` and follow the data module's `on_bad_video` when read; the exit status is
1 if any failed under `raise`.
"""

from __future__ import annotations

import argparse
import errno
import os
import time

from lit_retrieval.commands.arguments import add_shard_arguments, check_shard
from lit_retrieval.data.media.cache_plan import write_jobs
from lit_retrieval.data.media.frame_cache import CacheWriter
from lit_retrieval.errors import ConfigError, DiskFull
from lit_retrieval.locking import OutputLock
from lit_retrieval.progress import Progress, add_progress_arguments, configure_from


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="lit-retrieval cache-frames", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--config", action="append", required=True, help="training YAML (repeat to compose, as for fit)"
    )
    parser.add_argument("--out", help="cache folder (default: the config's data.init_args.frame_cache)")
    parser.add_argument("--splits", nargs="+", default=["train", "val", "test"], choices=["train", "val", "test"])
    parser.add_argument("--workers", type=int, default=1, help="decoding processes")
    parser.add_argument(
        "--format", choices=["raw", "jpeg"], default="raw", help="raw uint8 frames (lossless) or JPEG per frame"
    )
    parser.add_argument("--quality", type=int, default=90, help="JPEG quality (--format jpeg)")
    add_shard_arguments(parser)
    add_progress_arguments(parser)
    args = parser.parse_args(argv)
    # imported here, not at the top: --help stays light
    from lit_retrieval.data.batching.datamodule import VideoTextDataModule
    from lit_retrieval.retrieval_cli import build_datamodule, training_config

    check_shard(parser, args)
    configure_from(args)
    if args.workers < 1:
        parser.error(f"--workers must be >= 1, got {args.workers}")
    config = training_config(args.config)
    datamodule = build_datamodule(config)
    from lit_retrieval.data.gve.multitask import MultiTaskDataModule

    if isinstance(datamodule, MultiTaskDataModule):
        embedder = config.model.init_args.get("embedder") if config.model else None
        if embedder is None:
            raise ConfigError(
                "cache-frames: a MultiTaskDataModule config needs model.init_args.embedder (model_path, inputs)"
            )
        from lit_retrieval.models.gve.cache_plan import gve_plan

        plan = gve_plan(datamodule, embedder, args.splits)
    elif isinstance(datamodule, VideoTextDataModule):
        plan = datamodule.cache_plan(args.splits)
    else:
        raise ConfigError(f"cache-frames: {type(datamodule).__name__} reads no frame cache")
    out = args.out or plan.default_out
    if not out:
        parser.error("no cache folder: give --out or set data.init_args.frame_cache in the config")
    quality = args.quality if args.format == "jpeg" else None
    start = time.perf_counter()
    jobs = plan.jobs[args.shard :: args.num_shards]
    with OutputLock(out, name=f"cache-frames-s{args.shard}" if args.num_shards > 1 else "cache-frames"):
        try:
            writer = CacheWriter(out, plan.params, args.format, quality, args.shard, args.num_shards)
            todo = writer.pending(jobs)
            for line in writer.repairs:
                print(f"dropped from the cache (decoded again): {line}")
            cached = {"cached": len(jobs) - len(todo), "decoded": 0, "failed": 0}
            with Progress("caching frames", len(jobs), completed=cached["cached"], counts=cached) as bar:
                write_jobs(writer, plan.sampler, todo, args.format, quality, args.workers, bar)
            failed = writer.write_failures()
        except OSError as err:
            if err.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise DiskFull(
                f"{out}: {os.strerror(err.errno)}; the videos cached so far are kept: "
                "make room and rerun lit-retrieval cache-frames to continue"
            ) from None
    seconds = time.perf_counter() - start
    for video, reason in failed:
        print(f"failed: {video}: {reason}")
    dropped = f", {len(writer.repairs)} stale or unreadable entries dropped" if writer.repairs else ""
    print(
        f"{len(jobs)} videos in shard {args.shard} of {args.num_shards} ({len(jobs) - len(todo)} already cached, "
        f"{len(todo)} decoded{dropped}, {len(failed)} failed) in {seconds:.1f} s; cache {out} ({args.format}"
        + (f", quality {quality})" if quality else ")")
    )
    if failed:
        print(
            f"undecodable videos are listed in {writer.failed_path}; "
            f"the data module's on_bad_video ({plan.on_bad_video}) applies to them"
        )
    return 1 if failed and plan.on_bad_video == "raise" else 0
