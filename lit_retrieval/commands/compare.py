"""`lit-retrieval compare`: is system A's text-to-video R@k different from system B's on the same
queries? A paired test over queries (lit_retrieval/metrics/paired.py; docs/experiments.md), printed
as one JSON object.

Each side is one or more score matrices written by `test` with `evaluation.save_scores` (one per
seed; `NAME.npy` with its `NAME_ids.json`): a query's hit is averaged over a side's runs, then the
two sides are differenced per query. Every matrix must hold the same queries and gallery in the
same order (ids, or shapes where no matrix has ids; then `--text-video` or the diagonal gives the
targets). Output: R@k of each side, their difference with its 95 % bootstrap interval (percentage
points) and the sign-flip p-value.

`--min-tokens` / `--max-tokens` compare only the queries of that length (inclusive) in the text
tower's tokens, read from the first file's `query_tokens` (MELON's truncation argument: queries
over 77 tokens are those CLIP's positions cut). `--queries relational | non_relational | rel_multi`
compares SALI's subsets (Sec. 4), from the first file's `relational`, `num_shots` and `min_shots`.

  lit-retrieval compare runs/mea/seed*/logs/test/scores.npy --against runs/base/seed*/logs/test/scores.npy
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from lit_retrieval.errors import InputError, UsageError
from lit_retrieval.metrics.paired_scores import QUERY_SUBSETS, TokenRange, compare_score_files


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="lit-retrieval compare", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("a", nargs="+", type=Path, help="system A's score matrices (.npy), one per run")
    parser.add_argument("--against", nargs="+", type=Path, required=True, metavar="NPY", help="system B's")
    parser.add_argument("--k", type=int, default=1, help="the recall compared, R@k (default 1)")
    parser.add_argument("--ties", choices=["optimistic", "pessimistic", "average"], default="optimistic")
    parser.add_argument("--text-video", type=Path, help=".npy int array: video column of each text row (no ids files)")
    parser.add_argument("--min-tokens", type=int, help="only queries of at least this many tokens (query_tokens)")
    parser.add_argument("--max-tokens", type=int, help="only queries of at most this many tokens")
    parser.add_argument(
        "--queries", choices=QUERY_SUBSETS, default="all", help="SALI's relational subsets (ids 'relational')"
    )
    parser.add_argument("--permutations", type=int, default=10_000, help="random sign flips (default 10000)")
    parser.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples (default 10000)")
    parser.add_argument("--seed", type=int, default=0, help="the test's random generator (default 0)")
    args = parser.parse_args(argv)
    for flag in ("k", "permutations", "resamples"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} must be >= 1")
    tokens = None
    if args.min_tokens is not None or args.max_tokens is not None:
        try:
            tokens = TokenRange(args.min_tokens, args.max_tokens)
        except ValueError as err:
            parser.error(f"--min-tokens/--max-tokens: {err}")
    try:
        result = compare_score_files(
            args.a,
            args.against,
            args.k,
            args.ties,
            args.text_video,
            tokens=tokens,
            queries=args.queries,
            permutations=args.permutations,
            resamples=args.resamples,
            seed=args.seed,
        )
    except ValueError as err:  # the score files' own checks name the file
        raise err if isinstance(err, UsageError) else InputError(str(err)) from None
    sliced = {} if tokens is None else {"tokens": [tokens.low, tokens.high]}
    sliced.update({} if args.queries == "all" else {"queries_subset": args.queries})
    print(
        json.dumps(
            {"metric": f"t2v/R@{args.k}", "runs": [len(args.a), len(args.against)], **sliced, **result.as_dict()}
        )
    )
    return 0
