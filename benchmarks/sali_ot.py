"""SALI's batched capacity-constrained OT against POT's solver looped over pairs.

Scores 1,000 texts x 1,000 videos with 34 shots each (the CM median) with `ot_match` (5 Sinkhorn
sweeps, c = 0.89, eps = 0.07, in blocks of text rows), times POT's
`ot.partial.entropic_partial_wasserstein` on a random sample of pairs and extrapolates its time to
all pairs, and compares the plans on that sample (POT's defaults run to its convergence criterion;
POT stopped after 5 of its own iterations is timed too). Prints one JSON line.

    python benchmarks/sali_ot.py [--texts 1000 --videos 1000 --shots 34 --sample 300]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import ot
import torch

from lit_retrieval.models.matching import ot_match

CAPACITY, EPS, ITERS = 0.89, 0.07, 5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--texts", type=int, default=1000)
    parser.add_argument("--videos", type=int, default=1000)
    parser.add_argument("--shots", type=int, default=34)
    parser.add_argument("--sample", type=int, default=300, help="pairs solved with POT")
    parser.add_argument("--block", type=int, default=50, help="text rows per batched block")
    args = parser.parse_args()
    g = torch.Generator().manual_seed(0)
    text = torch.nn.functional.normalize(torch.randn(args.texts, 3, 64, generator=g), dim=-1)
    shots = torch.nn.functional.normalize(torch.randn(args.videos, args.shots, 64, generator=g), dim=-1)
    mask = torch.ones(args.videos, args.shots, dtype=torch.bool)
    scores = torch.empty(args.texts, args.videos)
    start = time.perf_counter()
    with torch.no_grad():
        for r in range(0, args.texts, args.block):
            M = torch.einsum("nrd,vsd->nvrs", text[r : r + args.block], shots)
            scores[r : r + args.block] = ot_match(M, mask.expand(len(M), -1, -1), CAPACITY, EPS, ITERS)[0]
    batched = time.perf_counter() - start

    rng = np.random.default_rng(0)
    pairs = [(int(rng.integers(args.texts)), int(rng.integers(args.videos))) for _ in range(args.sample)]
    a, b = np.full(3, 1 / 3), np.full(args.shots, CAPACITY)
    max_plan_diff = max_score_diff = 0.0
    pot_seconds = pot_short_seconds = 0.0
    for t, v in pairs:
        M = (text[t] @ shots[v].T).double()
        start = time.perf_counter()
        plan = ot.partial.entropic_partial_wasserstein(a, b, -M.numpy(), EPS, m=a.sum())
        pot_seconds += time.perf_counter() - start
        start = time.perf_counter()  # POT stopped after as many iterations as ours (its own algorithm)
        ot.partial.entropic_partial_wasserstein(a, b, -M.numpy(), EPS, m=a.sum(), numItermax=ITERS)
        pot_short_seconds += time.perf_counter() - start
        ours = ot_match(M.float(), mask[v], CAPACITY, EPS, ITERS)[1].double().numpy()
        max_plan_diff = max(max_plan_diff, float(np.abs(ours - plan).max()))
        max_score_diff = max(max_score_diff, abs(float((plan * M.numpy()).sum()) - float(scores[t, v])))
    pot_all = pot_seconds / args.sample * args.texts * args.videos
    print(
        json.dumps(
            {
                "benchmark": "sali_ot",
                "texts": args.texts,
                "videos": args.videos,
                "shots": args.shots,
                "iters": ITERS,
                "batched_seconds": round(batched, 2),
                "pot_seconds_per_pair": round(pot_seconds / args.sample, 6),
                "pot_seconds_all_pairs_extrapolated": round(pot_all, 1),
                "speedup": round(pot_all / batched, 1),
                "pot_5_iterations_seconds_per_pair": round(pot_short_seconds / args.sample, 6),
                "speedup_vs_pot_5_iterations": round(
                    pot_short_seconds / args.sample * args.texts * args.videos / batched, 1
                ),
                "sample_pairs": args.sample,
                "max_plan_abs_diff": float(f"{max_plan_diff:.2e}"),
                "max_score_abs_diff": float(f"{max_score_diff:.2e}"),
                "threads": torch.get_num_threads(),
            }
        )
    )


if __name__ == "__main__":
    main()
