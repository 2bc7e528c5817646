"""`lit-retrieval export-gve`: a GVE training checkpoint -> a released-style model directory.

    lit-retrieval export-gve runs/gve/checkpoints/last.ckpt exports/gve-3b
    lit-retrieval export-gve last.ckpt exports/gve-3b --config configs/gve/train.yaml

The LoRA adapter is merged into the base Qwen2.5-VL and the result written with its processor in
the layout of the released Qwen2.5-VL / GVE checkpoints (`lit_retrieval.models.gve.export`):
transformers 4.5x and 5.x both load it as `Qwen2_5_VLForConditionalGeneration` + `AutoProcessor`,
and `GVEEmbedder` / `index --model` take it as a model directory.

Without `--config`, the module is rebuilt from the hyper-parameters stored in the checkpoint;
`--model-path` points at the base model when it has moved since training. A DeepSpeed checkpoint
directory needs `lit-retrieval convert-checkpoint` first.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lit_retrieval.errors import UsageError


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="lit-retrieval export-gve", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("ckpt", help="GVE training checkpoint (a file; LoRA weights only, as training writes)")
    parser.add_argument("out", help="output model directory (must not exist or be empty)")
    parser.add_argument("--config", help="the training config (default: the hyper-parameters stored in the checkpoint)")
    parser.add_argument("--model-path", help="base model directory, if it moved since training (without --config)")
    args = parser.parse_args(argv)
    if Path(args.ckpt).is_dir():
        raise UsageError(args.ckpt, "a DeepSpeed checkpoint directory; run `lit-retrieval convert-checkpoint` first")
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(args.out, "output exists and is not an empty directory")
    if args.config is not None and args.model_path is not None:
        parser.error("--model-path applies without --config (set model_path in the config instead)")
    from lit_retrieval.search.loading import gve_module_from_checkpoint, gve_module_from_config

    if args.config:
        module = gve_module_from_config(args.config, args.ckpt)
    else:
        module = gve_module_from_checkpoint(args.ckpt, args.model_path)
    module.embedder.save_merged(out)
    print(f"wrote {out}: Qwen2.5-VL with the LoRA of {args.ckpt} merged in ({module.embedder.dim}-d embeddings)")
    return 0
