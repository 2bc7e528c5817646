"""Arguments several commands share: `--shard K --num-shards N` for commands that run as Slurm array tasks (the
process takes every N-th input from the K-th), the model an embedding command loads (`--model` | `--config`
[`--ckpt`], `--device`), and counts that must be at least 1."""

from __future__ import annotations

import argparse


def add_shard_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shard", type=int, default=0, help="this shard (0-based), e.g. $SLURM_ARRAY_TASK_ID")
    parser.add_argument("--num-shards", type=int, default=1, help="number of shards")


def check_shard(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.num_shards < 1 or not 0 <= args.shard < args.num_shards:
        parser.error(f"--shard must lie in [0, --num-shards), got {args.shard} of {args.num_shards}")


def add_model_arguments(parser: argparse.ArgumentParser, required: bool = False, composed: bool = False) -> None:
    """`--model DIR` or `--config FILE` (with `composed`, repeatable: the files compose as `fit`'s do) with
    `--ckpt`, and `--device`: the model `index`, `search`, `uvrb` and `mine-negatives` embed with
    (`search.loading.ModelSpec`)."""
    source = parser.add_mutually_exclusive_group(required=required)
    source.add_argument("--model", help="model directory (GVE / Qwen2.5-VL), embedded as is")
    several = "; several compose as `fit --config A --config B` (later files win), e.g. a run's saved config.yaml alone"
    config_help = "training config of a GVE or dual-encoder model" + (several if composed else "")
    source.add_argument("--config", action="append" if composed else "store", help=config_help)
    parser.add_argument("--ckpt", help="checkpoint to load with --config")
    parser.add_argument("--device", default="cpu", help="where the model runs (cpu, cuda, cuda:1, ...)")


def positive_int(text: str) -> int:
    """argparse `type` of a count that must be at least 1 (`--chunk 0` would embed nothing, forever)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {value}")
    return value
