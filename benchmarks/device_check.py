"""One GPU check, one JSON object (`benchmarks/device_check.sh` runs it on an offline H200 node):

- `clip4clip_mea`: CLIP4Clip-meanP + MEA (MELON Sec. 4, weight 0.2) with CLIP ViT-B/16's geometry and
  random weights (12 layers, width 768, 224 px, patch 16; text tower 12 layers x 512 over a
  character vocabulary), 64 frames per video, bf16-mixed training on one GPU: videos/s and model FLOP
  utilisation (FLOPs of one training step counted by `torch.utils.flop_counter`, against
  `--peak-tflops`, 790 for an H200's dense bf16). Batches are made once on the GPU, so this is the
  model's rate, not the loader's.
- `clip4clip_mea_zero2`: the same under DeepSpeed ZeRO-2 (skipped, with the reason, when DeepSpeed
  does not import).
- `gve_3b`: `benchmarks/gve_gpu.py` (Qwen2.5-VL-3B geometry, random weights, LoRA): samples/s.
- `loader_16_workers`: `benchmarks/loader_throughput.py --workers 16`: videos/s per worker on the
  fly and from the frame cache.

`--cpu` runs every part at tiny sizes on the CPU (a check of the script itself).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from gpu_smoke import Throughput

HERE = Path(__file__).parent
VIT_B16 = dict(
    hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12, image_size=224, patch_size=16
)
TEXT_B = dict(hidden_size=512, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=8)
TINY_VISION = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=16
)
TINY_TEXT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2)


class SameBatch(Dataset):
    """`steps` times the same ready batch (frames already on the device)."""

    def __init__(self, batch: dict, steps: int) -> None:
        self.batch, self.steps = batch, steps

    def __len__(self) -> int:
        return self.steps

    def __getitem__(self, i: int) -> dict:
        return self.batch


def video_batch(batch_size: int, frames: int, size: int, device: torch.device) -> dict:
    """A batch as `collate_items` makes it: random frames, two events per video (MEA needs >= 2)."""
    return {
        "index": torch.arange(batch_size),
        "video_id": [f"v{i}" for i in range(batch_size)],
        "events": [[f"a person does thing {i}", f"then another thing {i}"] for i in range(batch_size)],
        "skipped": [],
        "duration": torch.full((batch_size,), 120.0, dtype=torch.float64),
        "frames": torch.randn(batch_size, frames, 3, size, size, device=device),
        "frame_mask": torch.ones(batch_size, frames, dtype=torch.bool, device=device),
        "frame_times": torch.linspace(0, 120, frames, device=device).repeat(batch_size, 1),
    }


def clip4clip_mea_model(root: Path, cpu: bool, max_text_len: int = 77) -> L.LightningModule:
    from lit_retrieval.models.encoders import CLIPEncoder
    from lit_retrieval.models.encoders.tiny import char_clip_tokenizer
    from lit_retrieval.models.heads import MeanPHead
    from lit_retrieval.modules import DualEncoderRetrieval, MEAConfig

    tokenizer = char_clip_tokenizer()
    tokenizer.save_pretrained(root / "tokenizer")
    vocab = len(tokenizer)
    text = dict(
        TINY_TEXT if cpu else TEXT_B,
        vocab_size=vocab,
        bos_token_id=vocab - 2,
        eos_token_id=vocab - 1,
        pad_token_id=vocab - 1,
    )
    config = {
        "text_config": text,
        "vision_config": TINY_VISION if cpu else VIT_B16,
        "projection_dim": 64 if cpu else 512,
    }
    torch.manual_seed(0)
    return DualEncoderRetrieval(
        CLIPEncoder(config=config, tokenizer=str(root / "tokenizer"), max_text_len=max_text_len),
        MeanPHead(),
        mea=MEAConfig(weight=0.2),
    )


def step_flops(module: L.LightningModule, batch: dict, device: torch.device, bf16: bool) -> int:
    """FLOPs of one training step (forward and backward) of `module` on `batch`."""
    from torch.utils.flop_counter import FlopCounterMode

    module.to(device).train()
    counter = FlopCounterMode(display=False)
    with counter, torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
        out = module.training_step(batch, 0)
        (out["loss"] if isinstance(out, dict) else out).backward()
    module.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def clip4clip_mea(root: Path, cpu: bool, zero2: bool, args: argparse.Namespace) -> dict:
    """Training videos/s and model FLOP utilisation of CLIP4Clip+MEA, plain bf16 or ZeRO-2."""
    part = "clip4clip_mea_zero2" if zero2 else "clip4clip_mea"
    strategy: object = "auto"
    if zero2 and cpu:
        return {"part": part, "skipped": "DeepSpeed ZeRO-2 runs on CUDA only (--cpu checks the plain path)"}
    if zero2:
        try:
            from lightning.pytorch.strategies import DeepSpeedStrategy

            import deepspeed  # noqa: F401
        except Exception as err:  # ImportError, or a DeepSpeed that fails to load its ops
            return {"part": part, "skipped": f"DeepSpeed unavailable: {type(err).__name__}: {err}"}
        strategy = DeepSpeedStrategy(stage=2, exclude_frozen_parameters=True)
    device = torch.device("cpu" if cpu else "cuda")
    frames, size, batch_size = (4, 32, 2) if cpu else (args.frames, 224, args.batch)
    module = clip4clip_mea_model(root, cpu)
    batch = video_batch(batch_size, frames, size, device)
    flops = step_flops(module, batch, device, bf16=not cpu)
    callback = Throughput(warmup=3)
    trainer = L.Trainer(
        accelerator="cpu" if cpu else "gpu",
        devices=1,
        precision="32-true" if cpu else "bf16-mixed",
        strategy=strategy,
        max_steps=args.steps,
        logger=False,
        enable_checkpointing=False,
        default_root_dir=root,
        callbacks=[callback],
        limit_val_batches=0,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, DataLoader(SameBatch(batch, args.steps + 1), batch_size=None))
    summary = callback.summary(batch_size)
    videos_per_s = summary["samples_per_s"]
    return {
        "part": part,
        "device": "cpu" if cpu else torch.cuda.get_device_name(),
        "precision": "fp32" if cpu else "bf16-mixed",
        "frames": frames,
        "image_size": size,
        "batch": batch_size,
        "videos_per_s": videos_per_s,
        "tflop_per_video": float(f"{flops / batch_size / 1e12:.4g}"),
        "model_flop_utilisation": float(f"{flops / batch_size * videos_per_s / (args.peak_tflops * 1e12):.4g}"),
        "peak_tflops": args.peak_tflops,
        "peak_memory_gib": summary["peak_memory_gib"],
    }


def json_lines(command: list[str], timeout: float) -> list[dict]:
    """The JSON lines a benchmark script prints."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=True)
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def gve_3b(cpu: bool, args: argparse.Namespace) -> dict:
    size, device = ("tiny", "cpu") if cpu else ("3b", "cuda")
    row = json_lines(
        [sys.executable, str(HERE / "gve_gpu.py"), "--size", size, "--device", device, "--steps", str(args.gve_steps)],
        args.part_timeout,
    )[-1]
    return {"part": "gve_3b" if not cpu else "gve_tiny", "samples_per_s": round(row["batch"] / row["step_s"], 3), **row}


def loader(cpu: bool, args: argparse.Namespace) -> dict:
    command = [sys.executable, str(HERE / "loader_throughput.py"), "--workers", str(2 if cpu else args.loader_workers)]
    # on the GPU node: 8 videos per geometry, passed over often enough that every worker has items after its first
    passes = [
        "--exact-repeats",
        str(max(2, 4 * args.loader_workers // 8)),
        "--cache-repeats",
        str(max(16, 4 * args.loader_workers)),
    ]
    command += ["--quick"] if cpu else ["--videos", "8", *passes]
    return {"part": "loader", **json_lines(command, args.part_timeout)[-1]}


def packages() -> dict[str, str]:
    """Version of each package the project uses on the node, or why it does not import."""
    import importlib

    found = {}
    for name in (
        "torch",
        "lightning",
        "transformers",
        "peft",
        "jsonargparse",
        "av",
        "deepspeed",
        "faiss",
        "scenedetect",
    ):
        try:
            found[name] = str(getattr(importlib.import_module(name), "__version__", "present"))
        except Exception as err:  # a package that is present but fails to load is reported too
            found[name] = f"missing ({type(err).__name__}: {err})"[:200]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu", action="store_true", help="tiny sizes on the CPU (checks the script)")
    parser.add_argument("--out", type=Path, help="also write the JSON object here")
    parser.add_argument("--frames", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8, help="videos per CLIP4Clip+MEA step")
    parser.add_argument("--steps", type=int, default=15, help="CLIP4Clip+MEA steps (3 warm-up steps are not timed)")
    parser.add_argument("--gve-steps", type=int, default=5)
    parser.add_argument("--loader-workers", type=int, default=16)
    parser.add_argument("--peak-tflops", type=float, default=790.0, help="the GPU's dense bf16 peak (H200 SXM: 790)")
    parser.add_argument("--part-timeout", type=float, default=300.0, help="seconds allowed to each script run")
    parser.add_argument("--parts", nargs="+", default=["clip4clip_mea", "clip4clip_mea_zero2", "gve", "loader"])
    args = parser.parse_args()
    result: dict = {"check": "device_check", "cpu": args.cpu, "packages": packages(), "parts": {}}
    start = time.perf_counter()
    runs = {
        "clip4clip_mea": lambda root: clip4clip_mea(root, args.cpu, False, args),
        "clip4clip_mea_zero2": lambda root: clip4clip_mea(root, args.cpu, True, args),
        "gve": lambda root: gve_3b(args.cpu, args),
        "loader": lambda root: loader(args.cpu, args),
    }
    for name in args.parts:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                result["parts"][name] = runs[name](Path(tmp))
            except Exception as err:  # one failing part must not lose the others' figures
                result["parts"][name] = {
                    "part": name,
                    "failed": f"{type(err).__name__}: {err}",
                    "trace": traceback.format_exc()[-2000:],
                }
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    result["seconds"] = round(time.perf_counter() - start, 1)
    text = json.dumps(result)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
