"""Loads an exported GVE directory (`lit-retrieval export-gve`) with the installed transformers alone
(`Qwen2_5_VLForConditionalGeneration` + `AutoProcessor`) and embeds three fixed inputs: text, video
+ text, image + text. Run it under transformers 5.x and 4.5x on the same directory and compare.

    .venv/bin/python benchmarks/gve_export_versions.py OUT_DIR --save /tmp/emb5.json
    /tmp/tf451/bin/python benchmarks/gve_export_versions.py OUT_DIR --compare /tmp/emb5.json

Under transformers >= 5 the script passes the release-era M-RoPE positions (the project's
`release_mrope_positions`, as `GVEEmbedder` does); under 4.x it lets the model compute its own.
Frames and the image are already at a size the processor keeps, so every version sees the same
pixels. `--seconds` sets the seconds per temporal patch of the video (2 / sampled fps). Prints one
JSON line: the transformers version, what loaded, and the largest difference to `--compare`.
`--native` leaves the positions to transformers 5 too (its rule, for comparison). `--vrag DIR`
loads with GVE's own released code instead (the `qwen25vl` package of a checkout of
Alibaba-NLP/VRAG, `search_engine/models/GVE/qwen25vl`: `Qwen25VLForEmbedding` and its processor,
which appends `<|endoftext|>` itself; transformers 4.49-4.51 only).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

MAJOR = int(transformers.__version__.split(".")[0])


def inputs(processor, seconds: float, appends_end_of_text: bool = False):
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (4, 56, 84, 3), dtype=np.uint8)
    image = rng.integers(0, 256, (56, 84, 3), dtype=np.uint8)
    turns = [
        [{"type": "text", "text": "a dog runs on a beach"}],
        [{"type": "video"}, {"type": "text", "text": "what happens next"}],
        [{"type": "image"}, {"type": "text", "text": "the same, larger"}],
    ]
    prompts = [
        processor.apply_chat_template([{"role": "user", "content": c}], tokenize=False, add_generation_prompt=True)
        + ("" if appends_end_of_text else "<|endoftext|>")
        for c in turns
    ]
    fps = 2 / seconds
    if MAJOR >= 5:
        from transformers.video_utils import VideoMetadata

        meta = VideoMetadata(total_num_frames=4, fps=fps, frames_indices=list(range(4)))
        video_kwargs = {"videos_kwargs": {"do_sample_frames": False, "video_metadata": [meta]}}
    else:
        video_kwargs = {"fps": [fps]}
    processor.tokenizer.padding_side = "left"
    return processor(text=prompts, images=[image], videos=[frames], padding=True, return_tensors="pt", **video_kwargs)


def embed(model, batch, native: bool) -> torch.Tensor:
    extra = {}
    if MAJOR >= 5 and not native:
        from lit_retrieval.models.gve.positions import MRopeLayout, release_mrope_positions

        extra["position_ids"] = release_mrope_positions(
            batch["input_ids"],
            batch["attention_mask"],
            MRopeLayout.from_config(model.config),
            batch["image_grid_thw"],
            batch["video_grid_thw"],
            batch["second_per_grid_ts"],
        )
    with torch.no_grad():
        hidden = model(**batch, **extra, output_hidden_states=True).hidden_states[-1]
    return F.normalize(hidden[:, -1].float(), dim=-1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir")
    parser.add_argument("--seconds", type=float, default=2.5, help="seconds per temporal patch of the video")
    parser.add_argument("--native", action="store_true", help="under 5.x, let the model compute positions itself")
    parser.add_argument("--vrag", help="GVE's released qwen25vl package directory (see above)")
    parser.add_argument("--save", help="write the embeddings here (JSON)")
    parser.add_argument("--compare", help="embeddings (JSON) to compare with")
    args = parser.parse_args()
    processor_class, model_class = AutoProcessor, Qwen2_5_VLForConditionalGeneration
    if args.vrag:
        sys.path.insert(0, str(Path(args.vrag).parent))
        from qwen25vl import Qwen2_5_VLProcessor, Qwen25VLForEmbedding

        processor_class, model_class = Qwen2_5_VLProcessor, Qwen25VLForEmbedding
    processor = processor_class.from_pretrained(args.model_dir)
    model, info = model_class.from_pretrained(
        args.model_dir, torch_dtype=torch.float32, attn_implementation="sdpa", output_loading_info=True
    )
    batch = inputs(processor, args.seconds, appends_end_of_text=bool(args.vrag))
    out = embed(model.eval(), batch, args.native)
    result = {
        "transformers": transformers.__version__,
        "native_positions": args.native or MAJOR < 5,
        "model": type(model).__name__,
        "processor": type(processor).__module__ + "." + type(processor).__name__,
        "missing_keys": sorted(info["missing_keys"]),
        "unexpected_keys": sorted(info["unexpected_keys"]),
        "video_grid_thw": batch["video_grid_thw"].tolist(),
        "image_grid_thw": batch["image_grid_thw"].tolist(),
        "input_length": int(batch["input_ids"].shape[1]),
    }
    if args.save:
        json.dump({**result, "embeddings": out.tolist()}, open(args.save, "w"))
    if args.compare:
        reference = json.load(open(args.compare))
        same_input = all(reference[k] == result[k] for k in ("input_length", "video_grid_thw", "image_grid_thw"))
        diff = (out - torch.tensor(reference["embeddings"])).abs().max(dim=1).values
        result.update(
            compared_with=reference["transformers"],
            same_tokens_and_grids=same_input,
            max_abs_diff_per_input=[float(f"{d:.3g}") for d in diff.tolist()],
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
