"""`lit-retrieval shard`: write a training config's splits as litdata shards that `ShardedDataModule`
streams (`data.class_path: lit_retrieval.data.ShardedDataModule`, `data.init_args.shards: OUT`).

    lit-retrieval shard --config TRAIN.yaml [--config PART.yaml ...] --out DIR
        [--splits train val test] [--encoding frames|mp4] [--workers N] [--shard K --num-shards N]
        [--part-size ITEMS] [--chunk-bytes 64MB]

Each record's frames are sampled as the config's data module samples them (`num_frames`, `image_size`,
`sampling`, `trim_to_annotation`: the frame cache's parameters, kept in `DIR/shards.json`) and stored as
uint8 frames (`frames`, the default) or as a lossless H.264 mp4 of those frames (`mp4`). Parts of
`--part-size` items are committed whole (a rename), so a killed run, or a killed task of a Slurm array
(`lit-retrieval slurm array.sbatch --set COMMAND="shard --config ... --out DIR --workers 8"`), is resumed by
running it again, and the result is the same as one uninterrupted writer's. The process that completes a
split merges its parts into `DIR/SPLIT/`. A folder written with other settings is refused (exit 2).
Bad videos follow the data module's `on_bad_video` (`skip`: listed in `DIR/SPLIT.skipped.json`).
"""

from __future__ import annotations

import argparse

from lit_retrieval.commands.arguments import add_shard_arguments, check_shard


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="lit-retrieval shard", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", action="append", required=True, help="training YAML (repeat to compose)")
    parser.add_argument("--out", required=True, help="shard folder")
    parser.add_argument("--splits", nargs="+", default=["train", "val", "test"], choices=["train", "val", "test"])
    parser.add_argument("--encoding", choices=["frames", "mp4"], default="frames", help="how frames are stored")
    parser.add_argument("--workers", type=int, default=1, help="local writer processes")
    parser.add_argument("--part-size", type=int, default=256, help="items per part (the unit of commit)")
    parser.add_argument("--chunk-bytes", default="64MB", help="litdata chunk size")
    add_shard_arguments(parser)
    args = parser.parse_args(argv)
    check_shard(parser, args)
    if args.workers < 1 or args.part_size < 1:
        parser.error("--workers and --part-size must be >= 1")
    return write_shards(args)


def write_shards(args: argparse.Namespace) -> int:
    from lit_retrieval.data.streaming.writer import shard_datamodule
    from lit_retrieval.retrieval_cli import build_datamodule, training_config

    datamodule = build_datamodule(training_config(args.config))
    options = dict(encoding=args.encoding, part_size=args.part_size, chunk_bytes=args.chunk_bytes)
    print(shard_datamodule(datamodule, args.out, args.splits, args.shard, args.num_shards, args.workers, **options))
    return 0
