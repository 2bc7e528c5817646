"""`lit-retrieval gve-tasks`: GVE training/validation task files from the synthetic corpus."""

from __future__ import annotations

import argparse

from lit_retrieval.data.gve.synthetic import make_gve_tasks, summary


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="lit-retrieval gve-tasks", description=__doc__)
    parser.add_argument("--corpus", required=True, help="synthetic corpus folder (annotations.json, videos/)")
    parser.add_argument("--out", required=True, help="output folder (train/, val/, frames/)")
    args = parser.parse_args(argv)
    print(summary(make_gve_tasks(args.corpus, args.out)))
    return 0
