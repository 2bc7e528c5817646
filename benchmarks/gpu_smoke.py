"""GPU smoke run: a few DeepSpeed ZeRO-2 bf16 steps of CLIP4Clip+MEA (tiny CLIP, synthetic corpus)
and of a small random GVE (Qwen2.5-VL geometry, LoRA), then the 3B-sized GVE throughput of
`benchmarks/gve_gpu.py`. Prints one JSON line per part: steps/s, samples/s, peak GPU memory.

`--cpu` runs the same code without DeepSpeed on the CPU (a check of the script itself).
`benchmarks/device_check.sh` installs what a GPU node lacks and runs the full GPU check (it uses
this file's `Throughput`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import lightning as L
import torch


class Throughput(L.Callback):
    """Steps per second after `warmup` steps, and peak GPU memory."""

    def __init__(self, warmup: int = 3) -> None:
        self.warmup, self.times = warmup, []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.times.append(time.perf_counter())

    def summary(self, batch_size: int) -> dict:
        times = self.times[self.warmup :]
        rate = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else float("nan")
        peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None
        return {
            "steps_per_s": round(rate, 3),
            "samples_per_s": round(rate * batch_size, 2),
            "peak_memory_gib": peak and round(peak, 2),
        }


def mode(cpu: bool) -> str:
    return "cpu_fp32" if cpu else "deepspeed_zero2_bf16"


def trainer(cpu: bool, steps: int, root: Path, callback: Throughput) -> L.Trainer:
    if cpu:
        return L.Trainer(
            accelerator="cpu",
            max_steps=steps,
            logger=False,
            enable_checkpointing=False,
            default_root_dir=root,
            callbacks=[callback],
            limit_val_batches=0,
        )
    from lightning.pytorch.strategies import DeepSpeedStrategy

    return L.Trainer(
        accelerator="gpu",
        devices=1,
        precision="bf16-mixed",
        strategy=DeepSpeedStrategy(stage=2, exclude_frozen_parameters=True),
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        default_root_dir=root,
        callbacks=[callback],
        limit_val_batches=0,
    )


def clip4clip_mea(root: Path, cpu: bool, steps: int) -> dict:
    from lit_retrieval.data import MultiEventDataModule, SynthConfig
    from lit_retrieval.models.encoders import CLIPEncoder
    from lit_retrieval.models.encoders.tiny import save_tiny_clip
    from lit_retrieval.models.heads import MeanPHead
    from lit_retrieval.modules import DualEncoderRetrieval, MEAConfig

    clip = save_tiny_clip(root / "clip", seed=0)
    module = DualEncoderRetrieval(CLIPEncoder(pretrained=str(clip)), MeanPHead(), mea=MEAConfig(weight=0.2))
    data = MultiEventDataModule(
        annotation=str(root / "corpus" / "annotations.json"),
        synthetic=SynthConfig(num_videos=64),
        num_frames=12,
        image_size=32,
        batch_size=16,
        num_workers=2,
    )
    callback = Throughput()
    trainer(cpu, steps, root, callback).fit(module, data)
    return {"part": "clip4clip_mea", "mode": mode(cpu), **callback.summary(16)}


def small_gve(root: Path, cpu: bool, steps: int) -> dict:
    from lit_retrieval.data.gve.synthetic import make_gve_tasks
    from lit_retrieval.data.gve.multitask import MultiTaskDataModule
    from lit_retrieval.models.gve import InputConfig, AdapterConfig
    from lit_retrieval.models.gve.tiny import save_tiny_qwen25vl
    from lit_retrieval.modules import EmbedderConfig, GVERetrieval

    model = save_tiny_qwen25vl(root / "qwen", hidden_size=256, layers=4, max_pixels=64 * 784)
    tasks = make_gve_tasks(root / "corpus", root / "tasks", batch_size=8)["train"]
    inputs = InputConfig(max_frames=8, video_min_pixels=16 * 784, video_max_pixels=64 * 784, max_tokens=4096)
    module = GVERetrieval(
        EmbedderConfig(str(model), lora=AdapterConfig(), inputs=inputs, dtype="float32" if cpu else "bfloat16")
    )
    callback = Throughput()
    trainer(cpu, steps, root, callback).fit(module, MultiTaskDataModule(tasks, num_workers=1))
    return {"part": "gve_small", "mode": mode(cpu), **callback.summary(8)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cpu", action="store_true", help="run without GPU/DeepSpeed (checks the script)")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print(json.dumps(clip4clip_mea(root, args.cpu, args.steps)), flush=True)
        print(json.dumps(small_gve(root, args.cpu, args.steps)), flush=True)
    if not args.cpu:
        subprocess.run([sys.executable, str(Path(__file__).with_name("gve_gpu.py")), "--size", "3b"], check=True)


if __name__ == "__main__":
    main()
