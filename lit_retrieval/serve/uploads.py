"""Bounds on the decode work of an uploaded query image or video, checked outside the model lock.

A few hundred kilobytes of video can hold a minute of 4K frames: the byte limit does not bound
decoding. Before a query is embedded (under the model lock), its file is decoded once here, in a
request thread: every frame's pixels must stay within `max_pixels`, a video within `max_frames`
frames, and the whole decode within `timeout_s` seconds (checked between frames), else the upload
is refused with a JSON error and never reaches the model. The model's own decoding of an accepted
file is then bounded by the same work. One upload at a time per client address (`ClientGate`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import av
from PIL import Image
from starlette.exceptions import HTTPException

from lit_retrieval.serve.limits import DecodeBounds


def check_image(path: str, bounds: DecodeBounds) -> None:
    try:
        with Image.open(path) as image:
            width, height = image.size
            if width * height > bounds.max_pixels:
                raise HTTPException(
                    413, f"the image has {width}x{height} pixels, over the limit of {bounds.max_pixels}"
                )
            image.load()
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as err:
        raise HTTPException(422, f"the uploaded image could not be read: {type(err).__name__}") from None


def check_video(path: str, bounds: DecodeBounds) -> None:
    deadline = time.monotonic() + bounds.timeout_s
    try:
        with av.open(path) as container:
            if not container.streams.video:
                raise HTTPException(422, "the uploaded file has no video stream")
            stream = container.streams.video[0]
            frames = 0
            for frame in container.decode(stream):
                frames += 1
                if frame.width * frame.height > bounds.max_pixels:
                    message = (
                        f"the video has {frame.width}x{frame.height} frames, over the limit of {bounds.max_pixels}"
                    )
                    raise HTTPException(413, message + " pixels")
                if frames > bounds.max_frames:
                    raise HTTPException(413, f"the video has more than {bounds.max_frames} frames")
                if time.monotonic() > deadline:
                    raise HTTPException(422, f"decoding the video took longer than {bounds.timeout_s:g} s")
            if frames == 0:
                raise HTTPException(422, "the uploaded video has no frames")
    except (av.FFmpegError, OSError, ValueError) as err:
        raise HTTPException(422, f"the uploaded video could not be decoded: {type(err).__name__}") from None


def check_upload(path: str, kind: str, bounds: DecodeBounds) -> None:
    """Decode the uploaded `kind` ("image" or "video") file once within `bounds`, else an HTTP error."""
    (check_image if kind == "image" else check_video)(path, bounds)


class ClientGate:
    """One upload at a time per client address: a second concurrent one gets 429."""

    def __init__(self) -> None:
        self._active: set[str] = set()
        self._lock = threading.Lock()

    @contextmanager
    def hold(self, client: str) -> Iterator[None]:
        with self._lock:
            if client in self._active:
                raise HTTPException(429, "this client already has an upload being searched; wait for its answer")
            self._active.add(client)
        try:
            yield
        finally:
            with self._lock:
                self._active.discard(client)
