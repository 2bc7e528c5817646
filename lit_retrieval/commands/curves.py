"""`lit-retrieval curves`: overlay the training curves of several runs in one MELON Fig. 9-style
figure (e.g. the Tab. 3 ablation rows, or a run with and without MEA)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _history_file(path: Path) -> Path:
    if path.is_file():
        return path
    found = sorted(path.rglob("training_curves.json"))
    if not found:
        raise FileNotFoundError(
            f"{path}: no training_curves.json (written by the TrainingCurves callback at the end of fit)"
        )
    return found[-1]


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="lit-retrieval curves", description=__doc__)
    parser.add_argument("runs", nargs="+", type=Path, help="training_curves.json files or run folders holding one")
    parser.add_argument("--labels", nargs="+", help="one label per run (default: the folder names)")
    parser.add_argument("--out", type=Path, required=True, help="PNG to write")
    parser.add_argument("--smooth", type=int, default=10, help="moving-average window of the step curves")
    args = parser.parse_args(argv)
    if args.labels and len(args.labels) != len(args.runs):
        parser.error(f"{len(args.labels)} labels for {len(args.runs)} runs")
    runs = {}
    try:
        for i, run_path in enumerate(args.runs):
            source = _history_file(run_path)
            label = args.labels[i] if args.labels else run_path.name
            runs[label] = json.loads(source.read_text())
    except (OSError, json.JSONDecodeError) as err:
        parser.error(str(err))
    from lit_retrieval.callbacks.training_curves import plot_training_curves  # here: --help stays light

    print(plot_training_curves(runs, args.out, smooth=args.smooth))
    return 0
