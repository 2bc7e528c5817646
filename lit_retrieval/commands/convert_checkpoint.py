"""`lit-retrieval convert-checkpoint`: a DeepSpeed checkpoint directory -> one file loadable on CPU.

    lit-retrieval convert-checkpoint runs/gve/checkpoints/last.ckpt runs/gve/last-consolidated.ckpt

DeepSpeed (ZeRO-2/3) writes checkpoints as directories of shards. This consolidates them into a
single Lightning checkpoint with fp32 weights (Lightning's `convert_zero_checkpoint_to_fp32_state_dict`;
no optimizer state, so it evaluates, exports or warm-starts, but does not resume a fit). The
result is checked by loading it back. With LoRA and `exclude_frozen_parameters`, it holds the
trainable weights only, which is what GVE's module loads (`strict_loading` off).
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="lit-retrieval convert-checkpoint",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("source", help="DeepSpeed checkpoint directory (e.g. .../last.ckpt/)")
    parser.add_argument("out", help="single-file checkpoint to write")
    parser.add_argument("--tag", help="checkpoint tag inside the directory (default: its `latest` file)")
    args = parser.parse_args(argv)
    source = Path(args.source)
    if not source.is_dir():
        parser.error(f"{source}: not a DeepSpeed checkpoint directory (a single-file checkpoint needs no conversion)")
    if importlib.util.find_spec("deepspeed") is None:
        parser.error("converting needs DeepSpeed: DS_BUILD_OPS=0 pip install -e '.[deepspeed]'")
    from lightning.pytorch.utilities.deepspeed import convert_zero_checkpoint_to_fp32_state_dict

    from lit_retrieval.checkpoint_io import read_checkpoint  # here: --help stays light

    convert_zero_checkpoint_to_fp32_state_dict(str(source), args.out, tag=args.tag)
    checkpoint = read_checkpoint(args.out, map_location="cpu")
    print(f"wrote {args.out}: {len(checkpoint['state_dict'])} tensors, global step {checkpoint.get('global_step')}")
    return 0
