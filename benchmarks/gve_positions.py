"""GVE's M-RoPE positions (`release_mrope_positions`): milliseconds per training step's batch on
`--device`, and on CUDA whether the computation synchronises with the host (run once under
`torch.cuda.set_sync_debug_mode("error")`, which raises at any device -> host copy). Prints one JSON line.

The batch has GVE-3B's token ids and layout (merge 2, 2 tokens per second) and a training step's
shape: `--rows` rows, left-padded, a 40-token instruction each; a third of the rows hold a video
(`--video-grid`, 2 s per temporal patch), a third an image (`--image-grid`), the rest text alone.
`--baseline FILE` times another implementation of the same function (e.g. the one before issue
57.10: `git show 038c37b:lit_retrieval/models/gve/positions.py > /tmp/old_positions.py`) on the
same batch and device, checks it gives the same positions, and reports the ratio.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from collections.abc import Callable

import torch

from lit_retrieval.models.gve.positions import MRopeLayout, release_mrope_positions

IMAGE, VIDEO, TEXT, PAD = 151655, 151656, 100, 151643
LAYOUT = MRopeLayout(image_token_id=IMAGE, video_token_id=VIDEO, spatial_merge_size=2, tokens_per_second=2)


def make_batch(rows: int, video_grid: list[int], image_grid: list[int], device: str) -> dict[str, torch.Tensor]:
    """A left-padded batch of text, image and video rows (see the module docstring)."""
    merge = LAYOUT.spatial_merge_size**2
    sequences, images, videos = [], [], []
    for row in range(rows):
        tokens = [TEXT] * 40
        if row % 3 == 1:
            tokens += [IMAGE] * (image_grid[0] * image_grid[1] * image_grid[2] // merge)
            images.append(image_grid)
        elif row % 3 == 2:
            tokens += [VIDEO] * (video_grid[0] * video_grid[1] * video_grid[2] // merge)
            videos.append(video_grid)
        sequences.append(tokens + [TEXT] * (5 + row % 7))
    length = max(map(len, sequences))
    ids = torch.tensor([[PAD] * (length - len(s)) + s for s in sequences])
    mask = torch.tensor([[0] * (length - len(s)) + [1] * len(s) for s in sequences])
    batch = {
        "input_ids": ids,
        "attention_mask": mask,
        "image_grid_thw": torch.tensor(images),
        "video_grid_thw": torch.tensor(videos),
        "second_per_grid_ts": torch.full((len(videos),), 2.0),
    }
    return {k: v.to(device) for k, v in batch.items()}


def positions_of(function: Callable) -> Callable[[dict[str, torch.Tensor]], torch.Tensor]:
    def run(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return function(
            batch["input_ids"],
            batch["attention_mask"],
            LAYOUT,
            batch["image_grid_thw"],
            batch["video_grid_thw"],
            batch["second_per_grid_ts"],
        )

    return run


def milliseconds(run: Callable, batch: dict[str, torch.Tensor], repeats: int, device: str) -> float:
    """Median wall time of one call, the device's queue drained after each."""
    run(batch)  # warm-up
    times = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        run(batch)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(1000 * (time.perf_counter() - start))
    return sorted(times)[len(times) // 2]


def host_syncs(run: Callable, batch: dict[str, torch.Tensor]) -> str:
    """'none', or the error CUDA's sync debug mode raised at the first device -> host copy."""
    torch.cuda.set_sync_debug_mode("error")
    try:
        run(batch)
        return "none"
    except RuntimeError as err:
        return str(err).splitlines()[0]
    finally:
        torch.cuda.set_sync_debug_mode("default")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--video-grid", type=int, nargs=3, default=[8, 28, 50])
    parser.add_argument("--image-grid", type=int, nargs=3, default=[1, 36, 36])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--baseline", help="a positions.py whose release_mrope_positions to time beside")
    args = parser.parse_args()
    batch = make_batch(args.rows, args.video_grid, args.image_grid, args.device)
    run = positions_of(release_mrope_positions)
    result = {
        "benchmark": "gve_positions",
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "threads": torch.get_num_threads(),
        "batch": list(batch["input_ids"].shape),
        "ms_per_batch": round(milliseconds(run, batch, args.repeats, args.device), 3),
    }
    if args.device == "cuda":
        result["host_syncs"] = host_syncs(run, batch)
    if args.baseline:
        spec = importlib.util.spec_from_file_location("baseline_positions", args.baseline)
        module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses look it up
        spec.loader.exec_module(module)
        before = positions_of(module.release_mrope_positions)
        if not torch.equal(before(batch), run(batch)):
            raise SystemExit("the baseline gives other positions on this batch")
        result["baseline_ms_per_batch"] = round(milliseconds(before, batch, args.repeats, args.device), 3)
        result["speedup"] = round(result["baseline_ms_per_batch"] / result["ms_per_batch"], 2)
        if args.device == "cuda":
            result["baseline_host_syncs"] = host_syncs(before, batch)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
