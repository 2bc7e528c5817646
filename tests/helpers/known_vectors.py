"""An item embedder with known vectors for the search index tests: a fixed random vector per video file name and
per text, an optional crash after some videos, and files of four zero bytes as undecodable videos."""

from __future__ import annotations

import numpy as np
import torch


class KnownVectors:
    """Embeds each video as a fixed random vector (by file name) and texts as given vectors."""

    modalities = {"T", "V"}

    def __init__(self, fingerprint="known", fail_after=None, dim=8) -> None:
        self.fingerprint = fingerprint
        self.fail_after = fail_after
        self.dim = dim
        self.embedded: list[str] = []

    def vector(self, name: str) -> np.ndarray:
        v = np.random.default_rng(abs(hash(name)) % 2**32).standard_normal(self.dim)
        return v / np.linalg.norm(v)

    def embed(self, items, instruction=None, batch_size=8):
        out = []
        for item in items:
            if item.video is not None:
                if self.fail_after is not None and len(self.embedded) >= self.fail_after:
                    raise KeyboardInterrupt("simulated crash")
                if open(item.video, "rb").read(4) == b"\x00\x00\x00\x00":
                    from lit_retrieval.data.media.video import VideoDecodeError

                    raise VideoDecodeError(item.video, "undecodable (test)")
                self.embedded.append(item.video)
                out.append(self.vector(item.video.rsplit("/", 1)[-1]))
            else:
                out.append(self.vector(item.text))
        return torch.tensor(np.stack(out), dtype=torch.float32)
