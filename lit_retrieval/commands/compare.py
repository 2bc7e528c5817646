"""`lit-retrieval compare`: is system A's text-to-video R@k different from system B's on the same
queries? A paired test over queries (lit_retrieval/metrics/paired.py; docs/experiments.md), printed
as one JSON object.

Each side is one or more score matrices written by `test` with `evaluation.save_scores` (one per
seed; `NAME.npy` with its `NAME_ids.json`): a query's hit is averaged over a side's runs, then the
two sides are differenced per query. Every matrix must hold the same queries and gallery in the
same order (ids, or shapes where no matrix has ids; then `--text-video` or the diagonal gives the
targets). Output: R@k of each side, their difference with its 95 % bootstrap interval (percentage
points) and the sign-flip p-value.

  lit-retrieval compare runs/mea/seed*/logs/test/scores.npy --against runs/base/seed*/logs/test/scores.npy
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from lit_retrieval.errors import InputError, UsageError
from lit_retrieval.metrics.paired import PairedResult, paired_comparison
from lit_retrieval.metrics.ranking import text_to_video_ranks
from lit_retrieval.metrics.score_files import check_same_rows, load_matrix, load_targets


def side_hits(paths: list[Path], first: tuple[Path, tuple, dict | None], targets, k: int, ties: str) -> np.ndarray:
    """[runs, queries]: 1 where a matrix of `paths` ranks the query's video within `k`."""
    hits = []
    for path in paths:
        scores, ids = load_matrix(path)
        check_same_rows(*first, path, scores.shape, ids)
        if not np.isfinite(scores).all():
            raise UsageError(str(path), f"{int((~np.isfinite(scores)).sum())} scores are infinite")
        ranks = text_to_video_ranks(torch.from_numpy(scores).double(), targets, ties)
        hits.append((ranks <= k).numpy().astype(np.float64))
    return np.stack(hits)


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="lit-retrieval compare", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("a", nargs="+", type=Path, help="system A's score matrices (.npy), one per run")
    parser.add_argument("--against", nargs="+", type=Path, required=True, metavar="NPY", help="system B's")
    parser.add_argument("--k", type=int, default=1, help="the recall compared, R@k (default 1)")
    parser.add_argument("--ties", choices=["optimistic", "pessimistic", "average"], default="optimistic")
    parser.add_argument("--text-video", help=".npy int array: video column of each text row (no ids files)")
    parser.add_argument("--permutations", type=int, default=10_000, help="random sign flips (default 10000)")
    parser.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples (default 10000)")
    parser.add_argument("--seed", type=int, default=0, help="the test's random generator (default 0)")
    args = parser.parse_args(argv)
    for flag in ("k", "permutations", "resamples"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} must be >= 1")
    try:
        result = compare(args)
    except ValueError as err:  # the score files' own checks name the file
        raise err if isinstance(err, UsageError) else InputError(str(err)) from None
    print(json.dumps({"metric": f"t2v/R@{args.k}", "runs": [len(args.a), len(args.against)], **result.as_dict()}))
    return 0


def compare(args: argparse.Namespace) -> PairedResult:
    first_scores, first_ids = load_matrix(args.a[0])
    first = (args.a[0], first_scores.shape, first_ids)
    if args.text_video:
        targets = load_targets(Path(args.text_video))
    elif first_ids is not None:
        targets = torch.tensor(first_ids["targets"], dtype=torch.long)
    else:
        targets = torch.arange(first_scores.shape[0])
    texts, videos = first_scores.shape
    if len(targets) != texts or (texts and not 0 <= int(targets.min()) <= int(targets.max()) < videos):
        source = args.text_video or args.a[0]
        raise UsageError(str(source), f"needs {texts} targets, each a video column in [0, {videos}), for {args.a[0]}")
    hits_a = side_hits(args.a, first, targets, args.k, args.ties)
    hits_b = side_hits(args.against, first, targets, args.k, args.ties)
    return paired_comparison(hits_a, hits_b, args.permutations, args.resamples, args.seed)
