"""`lit-retrieval tiny-qwen`: write a tiny random Qwen2.5-VL (and processor) for offline runs."""

from __future__ import annotations

import argparse


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="lit-retrieval tiny-qwen", description=__doc__)
    parser.add_argument("--out", required=True, help="output model directory")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hidden-size", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--max-pixels", type=int, default=16 * 28 * 28, help="processor's per-frame pixel bound")
    args = parser.parse_args(argv)
    from lit_retrieval.models.gve.tiny import save_tiny_qwen25vl  # here: --help stays light

    path = save_tiny_qwen25vl(args.out, args.seed, args.hidden_size, args.layers, max_pixels=args.max_pixels)
    print(f"wrote a tiny Qwen2.5-VL to {path}")
    return 0
