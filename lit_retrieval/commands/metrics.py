"""`lit-retrieval metrics`: retrieval metrics of a saved score matrix, printed as one JSON object."""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from lit_retrieval.metrics.ranking import retrieval_metrics


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="lit-retrieval metrics", description=__doc__)
    parser.add_argument("sim", help=".npy score matrix, rows = texts, columns = videos")
    parser.add_argument("--text-video", help=".npy int array: video column of each text row (default: the diagonal)")
    parser.add_argument("--ties", choices=["optimistic", "pessimistic", "average"], default="optimistic")
    args = parser.parse_args(argv)
    try:
        scores = torch.from_numpy(np.load(args.sim)).double()
        targets = torch.from_numpy(np.load(args.text_video)).long() if args.text_video else None
        print(json.dumps(retrieval_metrics(scores, targets, args.ties)))
    except (OSError, ValueError) as err:
        parser.error(str(err))
    return 0
