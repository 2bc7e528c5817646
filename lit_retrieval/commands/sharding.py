"""`--shard K --num-shards N` for commands that run as Slurm array tasks: the process takes every
N-th input from the K-th."""

from __future__ import annotations

import argparse


def add_shard_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shard", type=int, default=0, help="this shard (0-based), e.g. $SLURM_ARRAY_TASK_ID")
    parser.add_argument("--num-shards", type=int, default=1, help="number of shards")


def check_shard(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.num_shards < 1 or not 0 <= args.shard < args.num_shards:
        parser.error(f"--shard must lie in [0, --num-shards), got {args.shard} of {args.num_shards}")
