"""Frame transforms to the encoder's input: uint8 RGB frames -> normalised float tensors.

Resizing (short side) and centre cropping happen in the PyAV sampler through `frame.reformat`
(swscale), which is cheaper than resizing decoded full-size arrays; this module normalises.
Hand-written because torchvision is not a dependency (its wheels pin torch versions).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


class NormalizeFrames:
    """`[T, H, W, 3]` uint8 -> `[T, 3, H, W]` float, `(x / 255 - mean) / std` per channel."""

    def __init__(self, mean: Sequence[float] = CLIP_MEAN, std: Sequence[float] = CLIP_STD) -> None:
        self.mean = torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1)

    def __call__(self, frames: np.ndarray) -> torch.Tensor:
        # one contiguous float tensor, normalised in place: the same arithmetic as
        # `(x / 255 - mean) / std` (bit for bit) at a third of the time, the loader's largest cost
        # once frames come from the frame cache (docs/datasets.md)
        x = torch.empty((frames.shape[0], 3, *frames.shape[1:3]), dtype=torch.float32)
        x.copy_(torch.from_numpy(frames).permute(0, 3, 1, 2))
        return x.div_(255.0).sub_(self.mean).div_(self.std)

    def tensor(self, frames: torch.Tensor) -> torch.Tensor:
        """`[..., 3, H, W]` uint8 on any device -> float, the same arithmetic (for normalising on the GPU)."""
        mean, std = self.mean.to(frames.device), self.std.to(frames.device)
        return frames.float().div_(255.0).sub_(mean).div_(std)
