"""`lit-retrieval build-melon --config BUILD.yaml --out DIR [--stage NAME] [--shard I/N]`: build a
MELON-style annotation from your own sources (MELON Sec. 3, supp. C, F; docs/melon.md).

Stages: collect -> qa-to-caption -> t2t -> v2t -> summarise -> judge -> write. Each video's result
of each stage is cached under DIR/cache, keyed by its inputs and settings, so a re-run (after an
interruption, or with one setting changed) does only what is missing. `--stage NAME` runs the
stages up to NAME. `--shard I/N` (e.g. `$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT`) runs the
per-video stages for every N-th video (by a hash of its id) and stops before `write`; afterwards one
`--stage write` (no shard) merges the shards' results into the annotation a 1-shard build gives.

`write` leaves DIR/annotations.json (MELON format), DIR/validate-melon.json (the `validate-melon`
report of it), DIR/stats.md (+ stats.json, figures/), DIR/removals.jsonl and, when the LMM judge
flagged test events, DIR/review.jsonl: set each row's `decision` to accept or reject and rerun.

Exit status: 0 when done, 1 when a video failed at an LLM stage (listed; rerun to retry) or the
annotation breaks a MELON rule, 2 on bad input and on an endpoint no request can succeed on (a
refused key, URL or model, or one nothing answers on): one line on stderr, nothing written by `write`.
Progress goes to stdout.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from pathlib import Path

from lit_retrieval.data.formats.melon import MelonRules
from lit_retrieval.melon_build.validation import validate
from lit_retrieval.errors import UsageError
from lit_retrieval.locking import OutputLock
from lit_retrieval.melon_build.config import load_config
from lit_retrieval.melon_build.pipeline import STAGES, Build, dump
from lit_retrieval.progress import add_progress_arguments, configure_from, quiet_library_bars


def shard_argument(text: str) -> tuple[int, int]:
    """`I/N` with 0 <= I < N."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not match or not 0 <= int(match.group(1)) < int(match.group(2)):
        raise argparse.ArgumentTypeError(f"expected I/N with 0 <= I < N, got {text!r}")
    return int(match.group(1)), int(match.group(2))


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="lit-retrieval build-melon", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", required=True, type=Path, help="the build config (YAML; docs/melon.md)")
    parser.add_argument("--out", required=True, type=Path, help="the build folder (caches and outputs)")
    parser.add_argument("--stage", choices=STAGES, help="run the stages up to this one (default: all)")
    parser.add_argument("--shard", type=shard_argument, default=(0, 1), help="I/N: this process's share of the videos")
    add_progress_arguments(parser)
    args = parser.parse_args(argv)
    configure_from(args, shard=args.shard)
    # progress on stdout beside the summary; stderr holds only an error (one line, exit 2)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    quiet_library_bars()  # the T2T and V2T models' loading bars would go to stderr
    shard, shards = args.shard
    last = args.stage or ("write" if shards == 1 else "judge")
    if shards > 1 and last == "write":
        raise UsageError("--stage write", "merges every shard's results: run it once without --shard")
    if not args.config.is_file():
        raise UsageError(str(args.config), "build config not found")
    config = load_config(args.config)
    args.out.mkdir(parents=True, exist_ok=True)
    with OutputLock(args.out, name=f"build-melon-{shard}-of-{shards}"):
        build = Build(config, args.out, shard, shards)
        state = build.run(last)
    llm = build.chat_summary()  # this run's calls
    print(
        f"build-melon: {len(state.videos)} videos after {last}; removed {len(state.removals)}; "
        f"failed {len(state.failures)}; LLM calls (this run) {json.dumps({k: v['calls'] for k, v in llm.items()})}"
    )
    for failure in state.failures:
        print(f"failed at {failure['stage']}: {failure['video']}: {failure['reason']}")
    code = 1 if state.failures else 0
    if last == "write":
        settings = build.settings
        rules = MelonRules(settings.min_events, settings.max_events, config.collect.min_seconds)
        report = validate({None: args.out / "annotations.json"}, rules, Path(config.video_root))
        dump(args.out / "validate-melon.json", report)
        print(
            f"validate-melon: {len(report['violations'])} violation(s) {report['by_rule']}; "
            f"{report['videos']} videos {report['splits']}"
        )
        code = code or (1 if report["violations"] else 0)
    return code
