"""FFmpeg thread pools and fork (`lit_retrieval/data/media/pyav_threads.py`), in fresh interpreters.

Each case runs in its own interpreter (the pytest process may hold such pools of its own). The parent uses
PyAV as any other library would, with FFmpeg's defaults: a decoder left in a reference cycle, and a frame
converted through PyAV's cached reformatter. It then forks; the child collects its garbage and decodes and
converts frames, PyAV's way and the sampler's; the parent gives the child 15 s. Without the sampler imported,
each of the two pools alone hangs the child (checked here, so the guarded case can fail); with it imported,
the child ends, and the sampler itself starts no FFmpeg thread.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import av
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]

CASE = textwrap.dedent(
    """
    import gc, os, sys, time
    import av

    path, mode = sys.argv[1], sys.argv[2]
    guarded = mode == "guarded"
    if guarded:
        from lit_retrieval.data.media.video import sample_frames
    gc.disable()  # the cycle below stays until a collection
    before = len(os.listdir("/proc/self/task"))  # the interpreter's own threads (OpenBLAS's, say)
    if guarded:
        sample_frames(path, 4, size=32)
    sampler_threads = len(os.listdir("/proc/self/task")) - before
    if mode in ("guarded", "garbage"):  # a decoder on FFmpeg's pool, left in a cycle
        container = av.open(path)
        frames = container.decode(video=0)
        next(frames)
        cycle = {"container": container, "frames": frames}
        cycle["self"] = cycle
        del cycle, container, frames
    if mode in ("guarded", "reformat"):  # PyAV's cached reformatter, on FFmpeg's pool
        with av.open(path) as container:
            next(container.decode(video=0)).reformat(width=64, height=36, format="rgb24")
    child = os.fork()
    if child == 0:
        gc.collect()
        with av.open(path) as container:
            frame = next(container.decode(video=0))
            frame.reformat(width=64, height=36, format="rgb24")
            frame.to_ndarray(format="rgb24")
        if guarded:
            sample_frames(path, 4, size=32)
        os._exit(0)
    deadline = time.monotonic() + 15
    while not os.waitpid(child, os.WNOHANG)[0]:
        if time.monotonic() > deadline:
            os.kill(child, 9)
            os.waitpid(child, 0)
            print("hung", sampler_threads)
            sys.exit()
        time.sleep(0.05)
    print("ended", sampler_threads)
    """
)


@pytest.fixture(scope="module")
def h264(tmp_path_factory) -> str:
    """3 s of 640x360 H.264 at 25 fps, written by PyAV in a fresh interpreter: its encoder's conversions would
    leave PyAV's cached reformatter, and its pool, in this pytest process."""
    path = tmp_path_factory.mktemp("pools") / "clip.mp4"
    write = textwrap.dedent(
        """
        import sys
        import av
        import numpy as np

        rng = np.random.default_rng(0)
        with av.open(sys.argv[1], "w") as container:
            stream = container.add_stream("libx264", rate=25)
            stream.width, stream.height, stream.pix_fmt = 640, 360, "yuv420p"
            for _ in range(75):
                rgb = rng.integers(0, 255, (360, 640, 3), dtype=np.uint8)
                container.mux(stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")))
            container.mux(stream.encode())
        """
    )
    subprocess.run([sys.executable, "-c", write, str(path)], check=True, timeout=120)
    return str(path)


def run_case(path: str, mode: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", CASE, path, mode], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_with_the_sampler_imported_a_forked_child_ends_and_the_sampler_starts_no_ffmpeg_thread(h264):
    assert run_case(h264, "guarded") == ["ended", "0"]


def test_a_decoder_on_ffmpegs_pool_left_in_a_cycle_hangs_the_child_that_frees_it(h264):
    assert run_case(h264, "garbage") == ["hung", "0"]


@pytest.mark.skipif(av.__version__.split(".")[0] != "18", reason="PyAV 18 caches a reformatter per thread")
def test_pyav_18s_cached_reformatter_hangs_the_child_that_converts_a_frame(h264):
    assert run_case(h264, "reformat") == ["hung", "0"]


def test_frames_converted_on_one_thread_equal_pyavs_conversion(h264):
    """`to_rgb` (the sampler's conversion, one thread) gives PyAV's own `reformat` frames, resized or not."""
    from lit_retrieval.data.media.pyav_threads import to_rgb

    with av.open(h264) as container:
        frame = next(container.decode(video=0))
        assert np.array_equal(to_rgb(frame), frame.to_ndarray(format="rgb24", threads=1))  # no pool left here
        want = frame.reformat(width=100, height=56, format="rgb24", threads=1).to_ndarray()
        assert np.array_equal(to_rgb(frame, 100, 56), want)
