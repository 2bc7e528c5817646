"""`lit-retrieval shots`: detect shot boundaries of many videos with PySceneDetect, in parallel, into
the shot cache a SALI data module reads.

    lit-retrieval shots VIDEO... | --dir DIR | --list FILE  [--config TRAIN.yaml] [--workers 8]

`--config` takes the detector settings and cache folder from a training config's `data.shots`, parsed
as `lit-retrieval fit` parses it (several `--config` files compose, later ones winning), so training
finds every video cached; explicit options override them. Finished videos are cached
one by one: an interrupted run loses nothing, and a rerun only detects what is missing or changed
(a video that failed is tried again once its file changed, or with `--retry-failed`). One run
writes a cache folder at a time (each shard of an array job takes its own lock): a second is
refused with the holder's host, pid, command and start time.
`--out` writes `{video path: [[start, end], ...]}` (seconds) as JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, replace
from pathlib import Path

from lit_retrieval.commands.arguments import add_shard_arguments, check_shard
from lit_retrieval.data.media.shots import ShotDetectorConfig, ShotConfig, detect_many
from lit_retrieval.data.reading import read_text
from lit_retrieval.errors import ConfigError, UsageError
from lit_retrieval.locking import OutputLock
from lit_retrieval.progress import add_progress_arguments, configure_from

VIDEO_EXTS = (".mp4", ".mkv", ".webm", ".avi", ".mov", ".m4v")


def options_from_config(paths: list[str]) -> ShotConfig:
    """`data.init_args.shots` of the training config composed from `paths`, as `fit` parses it."""
    from lit_retrieval.retrieval_cli import training_config

    missing = [path for path in paths if not Path(path).is_file()]
    if missing:
        raise UsageError(missing[0], "No such file")
    try:
        shots = training_config(paths).get("data.init_args.shots")
    except ConfigError as err:
        raise ConfigError(f"{', '.join(paths)}: {err}") from None
    if shots is None:
        raise ConfigError(f"{', '.join(paths)}: no data.shots section")
    settings = shots.get("init_args", shots).as_dict()
    return ShotConfig(**{**settings, "detector": ShotDetectorConfig(**settings["detector"])})


def _videos(args: argparse.Namespace) -> list[str]:
    videos = list(args.videos)
    if args.dir:
        videos += sorted(str(p) for p in Path(args.dir).rglob("*") if p.suffix.lower() in VIDEO_EXTS)
    if args.list:
        if Path(args.list).suffix.lower() in VIDEO_EXTS:
            raise UsageError(args.list, "a video file, where a list file (one path per line) is expected")
        videos += [line.strip() for line in read_text(args.list).splitlines() if line.strip()]
    return videos


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="lit-retrieval shots", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("videos", nargs="*", help="video files")
    parser.add_argument("--dir", help="every video under this folder")
    parser.add_argument("--list", help="a text file with one video path per line")
    parser.add_argument(
        "--config", action="append", help="training YAML whose data.shots gives the settings (repeatable: composed)"
    )
    parser.add_argument("--cache", help="cache folder (default: the config's, else cache/shots)")
    parser.add_argument("--detector", choices=["adaptive", "content"])
    parser.add_argument("--threshold", type=float, help="detector threshold (adaptive 3.0, content 27.0 by default)")
    parser.add_argument("--min-scene-len", type=float, help="shortest shot in seconds (0.6)")
    parser.add_argument("--downscale", type=int, help="frame-width divisor (default: automatic, about 256 px)")
    parser.add_argument("--workers", type=int, help="detection processes (default 1)")
    parser.add_argument(
        "--on-error", choices=["raise", "skip"], default="skip", help="undecodable videos: stop or list and go on"
    )
    parser.add_argument("--out", help="write all shots as JSON here")
    parser.add_argument(
        "--retry-failed",
        action="store_true",
        help="detect again videos that failed before (changed files are retried anyway)",
    )
    add_shard_arguments(parser)
    add_progress_arguments(parser)
    args = parser.parse_args(argv)
    check_shard(parser, args)
    configure_from(args)
    options = options_from_config(args.config) if args.config else ShotConfig()
    overrides = {
        "detector": args.detector,
        "threshold": args.threshold,
        "min_scene_len": args.min_scene_len,
        "downscale": args.downscale,
    }
    try:
        detector = replace(options.detector, **{k: v for k, v in overrides.items() if v is not None})
    except ValueError as err:
        raise ConfigError(f"shots settings: {err}") from None
    cache = args.cache or options.cache_dir
    workers = args.workers or options.workers
    videos = _videos(args)[args.shard :: args.num_shards]
    if not videos:
        parser.error("no videos given (positional paths, --dir or --list)")
    start = time.perf_counter()
    with OutputLock(cache, name=f"shots-s{args.shard}" if args.num_shards > 1 else "shots"):
        # VideoDecodeError: one line, exit 2
        found = detect_many(videos, detector, cache, workers, on_error=args.on_error, retry_failed=args.retry_failed)
    seconds = time.perf_counter() - start
    for path, reason in sorted(found.failed.items()):
        print(f"failed: {path}: {reason}")
    counts = [len(s) for s in found.shots.values()]
    median = sorted(counts)[len(counts) // 2] if counts else 0
    print(
        f"{len(found.shots)} videos ({found.cached} cached, {len(found.shots) - found.cached} detected, "
        f"{len(found.failed)} failed, {found.known_failures} of them unchanged since they failed before) "
        f"in {seconds:.1f} s; "
        f"median {median} shots; cache {cache}; settings {asdict(detector)}"
    )
    if args.out:
        Path(args.out).write_text(
            json.dumps({p: [list(s) for s in shots] for p, shots in found.shots.items()}, indent=1)
        )
    return 1 if found.failed and args.on_error == "raise" else 0
