"""The frame decoders' one interface: the floor below the sampler (`video.py`) and every decoder backend.

`video.sample_video` reads a stream's span, its targets and the truncation checks from PyAV's packet
timestamps, then has the frames played at those targets decoded: by PyAV itself (`pyav`, the built-in
decoder, which reuses the stream already open for the packet reads), or by a backend chosen by name in
`BACKENDS`. A backend is one module (a leaf: it imports this floor and nothing of the sampler) that
provides the two functions of `DecoderBackend`; adding a decoder is adding that module and its name here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from lit_retrieval.errors import ConfigError, InputError

Decoder = Literal["pyav", "torchcodec"]
BUILTIN_DECODER = "pyav"
# name -> the module that implements `DecoderBackend` (imported only when that decoder is chosen)
BACKENDS: dict[str, str] = {"torchcodec": "lit_retrieval.data.media.torchcodec_decoder"}
DECODERS = (BUILTIN_DECODER, *BACKENDS)


class VideoDecodeError(InputError, RuntimeError):  # InputError: `lit-retrieval` reports it in one line
    """A video could not be decoded; the message names the file and the reason."""

    def __init__(self, path: str | Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = str(path)
        self.reason = reason


class DecoderBackend(Protocol):
    """What a decoder backend module provides (`torchcodec_decoder` is one)."""

    def require(self) -> Any:
        """Check that the backend can run here; raise a one-line `ConfigError` saying what to install."""

    def frames_played_at(
        self,
        path: str | Path,
        times: np.ndarray,
        size: int | None,
        device: str = "cpu",
        geometry: tuple[int, int] | None = None,
    ) -> list[tuple[float, np.ndarray]]:
        """(time, RGB `[H, W, 3]` uint8) of the frame played at each of `times` (absolute seconds,
        ascending), consecutive repeats kept once; `size`: short side scaled to `size`, then the centre
        `size x size`; `geometry`: the stream's (width, height) when known. Raises `VideoDecodeError`."""


def check_decoder(decoder: str, sampling: str, option: str = "decoder") -> None:
    """Refuse an unknown decoder name, or a backend with anything but `exact` sampling (`keyframe`
    sampling is PyAV's own); `option` names the setting in the message."""
    if decoder not in DECODERS:
        raise ConfigError(f"{option} must be one of {', '.join(map(repr, DECODERS))}, got {decoder!r}")
    if decoder != BUILTIN_DECODER and sampling != "exact":
        raise ConfigError(
            f"{option} {decoder!r} samples exact frames; keyframe sampling is PyAV's ({option}: {BUILTIN_DECODER})"
        )
