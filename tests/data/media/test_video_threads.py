"""A decoder left in a reference cycle by the parent does not hang a process forked from it (video.py, "Threads").

FFmpeg's threads live as long as the codec context's Python object. One caught in a cycle is freed when the
garbage collector runs; a DataLoader worker forked before that inherits the garbage but not the threads, and
its collector's free waits for them forever. Each case runs in a fresh interpreter (the pytest process may
hold such garbage of its own): it opens a stream as the sampler does, decodes, leaves the stream in a cycle,
forks, and has the child collect its garbage; the parent gives the child 20 s.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import av
import numpy as np
import pytest

from lit_retrieval.data.media.video import FFMPEG_THREADS

ROOT = Path(__file__).resolve().parents[3]

CASE = textwrap.dedent(
    """
    import gc, os, sys, time
    from pathlib import Path
    from lit_retrieval.data.media import video

    video.FFMPEG_THREADS = int(sys.argv[2])
    gc.disable()  # the cycle below stays until the child's collection
    before = len(os.listdir("/proc/self/task"))  # the interpreter's own (OpenBLAS's, say)
    with video._opened(Path(sys.argv[1]), "unreadable") as stream:
        stream.seek(1.0)
        stream.next_frame()
        cycle = {"stream": stream}
        cycle["self"] = cycle
    del cycle, stream
    threads = len(os.listdir("/proc/self/task")) - before  # the stream's, still alive in the cycle
    child = os.fork()
    if child == 0:
        gc.collect()  # frees the inherited stream
        os._exit(0)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if os.waitpid(child, os.WNOHANG)[0]:
            print(f"ended {threads}")
            break
        time.sleep(0.05)
    else:
        os.kill(child, 9)
        print(f"hung {threads}")
    """
)


@pytest.fixture(scope="module")
def h264(tmp_path_factory) -> str:
    """3 s of 640x360 H.264 at 25 fps, written with PyAV."""
    path = tmp_path_factory.mktemp("threads") / "clip.mp4"
    rng = np.random.default_rng(0)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=25)
        stream.width, stream.height, stream.pix_fmt = 640, 360, "yuv420p"
        for _ in range(75):
            frame = av.VideoFrame.from_ndarray(rng.integers(0, 255, (360, 640, 3), dtype=np.uint8), format="rgb24")
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    return str(path)


def run_case(path: str, threads: int) -> str:
    done = subprocess.run(
        [sys.executable, "-c", CASE, path, str(threads)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_forked_child_frees_an_inherited_stream_of_the_sampler_and_ends(h264):
    """With `FFMPEG_THREADS` (1) the stream runs no thread of FFmpeg's."""
    assert run_case(h264, FFMPEG_THREADS) == "ended 0"


def test_with_ffmpegs_thread_pool_the_same_child_hangs(h264):
    """The hazard itself, so the case above can fail: FFmpeg's default pool (0: one thread per core and one
    more) leaves the stream's threads running, and the forked child never finishes freeing the stream."""
    state, threads = run_case(h264, 0).split()
    assert state == "hung" and int(threads) > 0

