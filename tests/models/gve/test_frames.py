"""GVE's video frames as the authors' retriever samples them (qwen-vl-utils `smart_nframes` +
round(linspace) frame indices, VRAG settings fps 1, min_frames 32, max_frames 8), derived here
from a full decode of each test video, and the sampled rate reaching the processor."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoProcessor

from lit_retrieval.data.items import MediaItem
from lit_retrieval.models.gve.processing import GVEProcessing, InputConfig
from helpers.media import full_decode, write_noise_video, write_timed_video

PIXELS = 4 * 784
SMALL_PIXELS = dict(video_min_pixels=PIXELS, video_max_pixels=PIXELS, image_min_pixels=PIXELS, image_max_pixels=PIXELS)


@pytest.fixture(scope="module")
def processing(tiny_qwen):
    return GVEProcessing(AutoProcessor.from_pretrained(str(tiny_qwen)), InputConfig(**SMALL_PIXELS))


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    root = tmp_path_factory.mktemp("gve_frames")
    gaps = np.random.default_rng(3).choice([33, 100, 2000], size=39, p=[0.45, 0.45, 0.1])
    return {
        "cfr_6s": write_noise_video(root / "cfr_6s.mp4", seconds=6),  # 48 frames at 8 fps
        "cfr_4s": write_noise_video(root / "cfr_4s.mp4", seconds=4),  # 4 s: 8 frames, not 4
        "five_frames": write_noise_video(root / "five.mp4", seconds=5 / 8),
        "one_frame": write_noise_video(root / "one.mp4", seconds=1 / 8),
        "vfr": write_timed_video(root / "vfr.mp4", [0] + np.cumsum(gaps).tolist(), bframes=2),
        "offset": write_timed_video(root / "offset.mp4", [10_000 + 100 * k for k in range(40)]),
    }


def authors_frames(path, start=None, end=None, max_frames=8):
    """qwen-vl-utils with min_frames 32 > max_frames: n = min(max_frames, frames in the window)
    floored to even (at least 2, the last frame repeated); indices round(linspace(first, last, n));
    sample_fps = n / frames in the window x the video's fps. Without an end every frame counts (qwen-vl-utils
    reads all frames without `video_end`), also one presented after the header's declared end (the B-frame
    VFR clip: header 8.36 s, last frame at 8.394 s)."""
    times, frames, _, _, rate = full_decode(path)
    lo, hi = start or 0.0, np.inf if end is None else end
    window = np.flatnonzero((times >= lo - 1e-9) & (times <= hi + 1e-9))
    n = min(max_frames, len(window)) // 2 * 2
    if n == 0:
        return np.repeat(frames[window], 2, axis=0), 2 / len(window) * rate
    chosen = window[np.round(np.linspace(0, len(window) - 1, n)).astype(int)]
    return frames[chosen], n / len(window) * rate


CASES = [
    ("cfr_6s", None, None),
    ("cfr_6s", 1.0, 4.0),
    ("cfr_4s", None, None),
    ("five_frames", None, None),
    ("one_frame", None, None),
    ("vfr", None, None),
    ("vfr", 2.0, 5.0),
    ("offset", None, None),
    ("offset", 0.5, 2.5),
]


@pytest.mark.parametrize(("name", "start", "end"), CASES)
def test_frames_and_rate_are_the_authors(processing, clips, name, start, end):
    expected, fps = authors_frames(clips[name], start, end)
    loaded = processing.load_video(MediaItem(video=str(clips[name]), start=start, end=end))
    np.testing.assert_array_equal(loaded.frames, expected)
    assert loaded.fps == pytest.approx(fps)


def test_processor_gets_the_sampled_rate(processing, clips):
    """Temporal M-RoPE spacing: second_per_grid_ts = temporal patch / sampled fps per video."""
    items = [
        MediaItem(video=str(clips["cfr_6s"]), text="a"),
        MediaItem(video=str(clips["vfr"]), start=2.0, end=5.0, text="b"),
    ]
    batch = processing(items)
    rates = [authors_frames(clips["cfr_6s"])[1], authors_frames(clips["vfr"], 2.0, 5.0)[1]]
    expected = torch.tensor([2 / r for r in rates], dtype=torch.float64)
    torch.testing.assert_close(batch["second_per_grid_ts"].double(), expected)
    assert batch["video_grid_thw"][:, 0].tolist() == [4, len(authors_frames(clips["vfr"], 2.0, 5.0)[0]) // 2]


def test_index_embeds_vfr_and_offset_videos(tiny_qwen, clips, tmp_path):
    """`index` samples with the same sampler: VFR and offset-start videos are embedded, none fails."""
    import json

    from lit_retrieval.commands import run_command

    folder = tmp_path / "videos"
    folder.mkdir()
    for name in ("vfr", "offset", "cfr_4s"):
        (folder / f"{name}.mp4").write_bytes(clips[name].read_bytes())
    args = ["--model", str(tiny_qwen), "--videos", str(folder), "--out", str(tmp_path / "idx")]
    assert run_command("index", args) == 0
    meta = json.loads((tmp_path / "idx" / "meta.json").read_text())
    assert meta["count"] == 3 and meta["failed"] == 0


def test_index_with_keyframe_sampling_is_recorded_and_searchable(tiny_qwen, clips, tmp_path):
    """`index --sampling keyframe` embeds other frames than exact sampling, records the choice, and
    `search` rebuilds the same embedder from the index (its fingerprint check passes)."""
    import json

    from lit_retrieval.commands import run_command
    from lit_retrieval.search.index import VideoIndex

    folder = tmp_path / "videos"
    folder.mkdir()
    for name in ("vfr", "cfr_6s"):
        (folder / f"{name}.mp4").write_bytes(clips[name].read_bytes())
    vectors = {}
    for sampling in ("exact", "keyframe"):
        out = tmp_path / sampling
        args = ["--model", str(tiny_qwen), "--videos", str(folder), "--out", str(out), "--sampling", sampling]
        assert run_command("index", args) == 0
        assert json.loads((out / "meta.json").read_text())["model"]["sampling"] == sampling
        index = VideoIndex.load(out)
        vectors[sampling] = index.index.reconstruct_n(0, index.index.ntotal)
    assert run_command("search", [str(tmp_path / "keyframe"), "a query", "-k", "2", "--json"]) == 0
    assert not np.allclose(vectors["exact"], vectors["keyframe"], atol=1e-4)
