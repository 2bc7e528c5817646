"""PyAV's FFmpeg threads in processes that fork (DataLoader workers, `multiprocessing` children).

FFmpeg's thread pools (a codec context's decoding threads, swscale's slice threads) belong to the process
that started them. A process forked from it inherits the pools' state but not their threads, so any call in
the child that hands work to such a pool, or frees it, waits forever. Two such pools reach a forked child:

- a codec context caught in a reference cycle (a skipped video's traceback holds one): the child's garbage
  collector frees it;
- the `VideoReformatter` PyAV 18 caches per thread (`VideoFrame.reformat` and `to_ndarray(format=...)` reuse
  it, PyAV's encoder too when it converts a frame), on FFmpeg's automatic thread count: the child's first
  conversion runs on the parent's pool.

So the sampler decodes (`decode_on_one_thread`: `FFMPEG_THREADS` on each codec context) and converts
(`to_rgb`, a reformatter of its own) on one thread: no pool at all, which is also what DataLoader workers
want, being the parallelism themselves (torchcodec's default is one thread too). And every process forked
once this module is imported sets aside what it inherited, whoever made it (`_set_aside_inherited_pools`):
PyAV's cached reformatter (kept, never freed; the child makes its own) and the parent's objects (`gc.freeze`:
the child's collector never frees them, which also keeps their memory pages shared). Both hangs are reproduced
in tests/data/media/test_pyav_threads.py.
"""

from __future__ import annotations

import gc
import os

import av
import av.video.frame
import av.video.stream
import numpy as np
from av.video.reformatter import VideoReformatter

FFMPEG_THREADS = 1  # per codec context and per conversion: no FFmpeg thread pool in the sampler's processes
_inherited: list[object] = []  # reformatters a forked child inherited: never freed (freeing one waits forever)


def decode_on_one_thread(stream: av.video.stream.VideoStream) -> av.video.stream.VideoStream:
    """`stream` with its decoder on `FFMPEG_THREADS` threads (set before its first decode opens the decoder)."""
    stream.codec_context.thread_count = FFMPEG_THREADS
    return stream


def to_rgb(frame: av.VideoFrame, width: int | None = None, height: int | None = None) -> np.ndarray:
    """`frame` as RGB [H, W, 3] uint8, scaled to `width` x `height` (default: its own size) on one thread."""
    converted = VideoReformatter().reformat(frame, width=width, height=height, format="rgb24", threads=FFMPEG_THREADS)
    return converted.to_ndarray()


def _set_aside_inherited_pools() -> None:
    """In a freshly forked child: keep PyAV's cached reformatter out of use and the parent's objects out of the
    garbage collector's reach (module docstring)."""
    cache = getattr(av.video.frame, "_thread_local", None)  # PyAV 18's per-thread reformatter (private)
    if cache is not None and getattr(cache, "reformatter", None) is not None:
        _inherited.append(cache.reformatter)
        del cache.reformatter
    gc.freeze()


os.register_at_fork(after_in_child=_set_aside_inherited_pools)
