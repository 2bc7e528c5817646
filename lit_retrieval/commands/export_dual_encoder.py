"""`lit-retrieval export-dual-encoder`: a trained dual encoder -> its towers in their own library's format.

    lit-retrieval export-dual-encoder --config runs/a/config.yaml --ckpt runs/a/checkpoints/last.ckpt exports/a

Writes `towers/` (transformers `save_pretrained` for CLIP / Long-CLIP / SigLIP, open_clip's hub layout for
open_clip), `head.safetensors` + `head_config.json` and a Hub model card `README.md` with the run's config
and `metrics.json` (docs/export.md; `lit_retrieval.modules.export`). Publishing: `hf upload`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lit_retrieval.errors import UsageError


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="lit-retrieval export-dual-encoder",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("out", help="output folder (must not exist or be empty)")
    parser.add_argument("--config", required=True, help="the run's training config")
    parser.add_argument("--ckpt", help="its checkpoint (a file; default: the config's initial weights)")
    parser.add_argument("--metrics", help="the run's metrics.json for the model card (default: none)")
    parser.add_argument("--name", help="the model's name in the card (default: the output folder's name)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(args.out, "output exists and is not an empty directory")
    if args.ckpt is not None and Path(args.ckpt).is_dir():
        raise UsageError(args.ckpt, "a DeepSpeed checkpoint directory; run `lit-retrieval convert-checkpoint` first")
    from lit_retrieval.data.reading import read_json
    from lit_retrieval.modules.export import export_dual_encoder
    from lit_retrieval.retrieval_cli import build_module
    from lit_retrieval.search.loading import load_checkpoint_weights

    module, data = build_module(args.config)
    if not hasattr(module, "head") or not hasattr(module, "objectives"):
        raise UsageError(args.config, f"not a dual encoder ({type(module).__name__}); GVE exports with export-gve")
    if args.ckpt:
        load_checkpoint_weights(module, args.ckpt)
    metrics = read_json(args.metrics) if args.metrics else None
    config_text = Path(args.config).read_text()
    settings = export_dual_encoder(module.eval(), out, data, args.name or out.name, config_text, metrics)
    print(f"wrote {out}: {settings['towers']['library']} towers, {settings['head'].rsplit('.', 1)[-1]}, model card")
    return 0
