"""`lit-retrieval synth`: write the synthetic multi-event corpus."""

from __future__ import annotations

import argparse
import time

from lit_retrieval.data.annotations import load_annotations
from lit_retrieval.data.datasets.synthetic import SynthConfig, generate_corpus
from lit_retrieval.data.formats.table import table_rows, write_table
from lit_retrieval.progress import add_progress_arguments, configure_from


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="lit-retrieval synth", description=__doc__)
    parser.add_argument("--out", required=True, help="output folder (videos/, annotations.json, events.json)")
    parser.add_argument("--num-videos", type=int, default=SynthConfig.num_videos)
    parser.add_argument("--seed", type=int, default=SynthConfig.seed)
    parser.add_argument("--size", type=int, default=SynthConfig.size, help="frame width and height in pixels")
    parser.add_argument("--fps", type=int, default=SynthConfig.fps)
    parser.add_argument(
        "--relational-fraction",
        type=float,
        default=SynthConfig.relational_fraction,
        help="share of events that are two-character shot/reverse-shot scenes (SALI)",
    )
    parser.add_argument(
        "--events",
        type=int,
        nargs=2,
        default=SynthConfig.events_per_video,
        metavar=("MIN", "MAX"),
        help="events per video",
    )
    parser.add_argument(
        "--occurrences",
        type=int,
        nargs=2,
        default=SynthConfig.occurrences,
        metavar=("MIN", "MAX"),
        help="videos each pool event is dealt into (its ambiguity as a one-event query; the pool size follows)",
    )
    parser.add_argument(
        "--table",
        nargs="+",
        choices=["csv", "tsv", "jsonl", "parquet"],
        default=[],
        help="also write the corpus as OUT/table.FORMAT, one row per caption (video, caption, duration, split), "
        "for the table data module's quick start (docs/datasets.md)",
    )
    parser.add_argument("--workers", type=int, default=None, help="encoding processes (default: all cores)")
    add_progress_arguments(parser)
    args = parser.parse_args(argv)
    configure_from(args)
    if args.num_videos < 1:
        parser.error("--num-videos must be at least 1")
    start = time.perf_counter()
    if not 0 <= args.relational_fraction <= 1:
        parser.error("--relational-fraction must lie in [0, 1]")
    for flag, (low, high) in (("--events", args.events), ("--occurrences", args.occurrences)):
        if not 1 <= low <= high:
            parser.error(f"{flag} MIN MAX needs 1 <= MIN <= MAX, got {low} {high}")
    if args.occurrences[1] > args.num_videos:  # an event cannot be in more videos than there are
        parser.error(
            f"--occurrences MAX ({args.occurrences[1]}) is above --num-videos ({args.num_videos}): "
            "an event is in at most every video once"
        )
    cfg = SynthConfig(
        num_videos=args.num_videos,
        seed=args.seed,
        size=args.size,
        fps=args.fps,
        events_per_video=tuple(args.events),
        occurrences=tuple(args.occurrences),
        relational_fraction=args.relational_fraction,
    )
    path = generate_corpus(args.out, cfg, workers=args.workers)
    tables = [str(write_table(table_rows(load_annotations(path)), path.parent / f"table.{f}")) for f in args.table]
    written = ", ".join([str(path), *tables])
    print(f"wrote {args.num_videos} videos and {written} in {time.perf_counter() - start:.1f} s")
    return 0
