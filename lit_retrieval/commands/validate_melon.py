"""`lit-retrieval validate-melon ANNOTATION... [--videos DIR] [--json]`: check a MELON-format
annotation against the paper's construction rules and list every violation (nothing is filtered).

Rules (MELON Sec. 3 and supp. C.1): each video has 3 to 5 events ("K ranges from 3 to 5") that do
not overlap ("3 to 5 non-overlapping events"), and is at least 2 minutes long ("we strictly remove
videos shorter than 2 minutes"). Records the parser (`lit_retrieval.data.formats.melon`) refuses (missing
timestamps, broken descriptions, duplicate ids) are listed too (supp. C.1 "annotation
completeness"). With `--videos`, every video file must exist and its own length (container header)
must also reach the minimum. Touching intervals (one ends where the next starts) do not overlap.
With `--t2t THRESHOLD` (MELON supp. C.2, 0.70 in the paper), adjacent event descriptions whose
cosine similarity under the packaged all-MiniLM-L6-v2 (`--t2t-model`) exceeds the threshold are
listed too (rule `t2t`): the filter `build-melon` applies, by the same function.

Each ANNOTATION is a file whose records carry a split field, or `SPLIT=FILE` for a file per split.
Exit status: 0 when nothing is violated, 1 when something is, 2 when a file cannot be read at all.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from lit_retrieval.data.formats.melon import MelonRules, Violation
from lit_retrieval.data.records import AnnotationError
from lit_retrieval.melon_build.config import T2TConfig
from lit_retrieval.melon_build.validation import validate


def _file_argument(text: str) -> tuple[str | None, Path]:
    split, sep, path = text.partition("=")
    return (split, Path(path)) if sep and split and not Path(text).exists() else (None, Path(text))


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="lit-retrieval validate-melon", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("annotation", nargs="+", help="MELON-format JSON file, or SPLIT=FILE")
    parser.add_argument(
        "--videos",
        type=Path,
        help="video folder: check each file exists and is long enough (and probe missing durations)",
    )
    parser.add_argument("--min-events", type=int, default=MelonRules.min_events)
    parser.add_argument("--max-events", type=int, default=MelonRules.max_events)
    parser.add_argument("--min-seconds", type=float, default=MelonRules.min_seconds, help="shortest allowed video (s)")
    parser.add_argument(
        "--t2t",
        type=float,
        metavar="THRESHOLD",
        help="also list adjacent descriptions more similar than this (MELON supp. C.2: 0.70)",
    )
    parser.add_argument("--t2t-model", default=T2TConfig.model, help="sentence encoder folder or package:MODULE")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    args = parser.parse_args(argv)
    files = dict(_file_argument(a) for a in args.annotation)
    if len(files) != len(args.annotation):
        parser.error("each split (or the split-less file) may be given once")
    if args.videos is not None and not args.videos.is_dir():
        parser.error(f"--videos {args.videos}: not a folder")
    try:
        rules = MelonRules(args.min_events, args.max_events, args.min_seconds, args.t2t)
        report = validate(files, rules, args.videos, args.t2t_model)
    except AnnotationError as err:  # a file that cannot be read at all
        parser.error(str(err))
    if args.json:
        print(json.dumps(report))
    else:
        print(f"{report['videos']} videos {report['splits']}; events per video {report['events_per_video']}")
        for violation in report["violations"]:
            print(Violation(**violation))
        print(
            f"{len(report['violations'])} violation(s) {report['by_rule']}" if report["violations"] else "no violations"
        )
    return 1 if report["violations"] else 0
