import math

import av
import numpy as np
import pytest
from helpers.media import full_decode, write_noise_video, write_timed_video

from lit_retrieval.data.annotations import load_annotations
from lit_retrieval.data.datasets.synthetic import BACKGROUNDS
from lit_retrieval.data.media.video import VideoDecodeError, sample_frames, uniform_times

FPS = 8


def played_at(t: float) -> float:
    return math.floor(t * FPS + 1e-9) / FPS


def active_event(video, t):
    return next(e for e in video.events for s, end in e.intervals if s <= t < end)


def test_timestamps_are_the_frames_played_at_uniform_targets(corpus):
    for video in load_annotations(corpus / "annotations.json")[:6]:
        sample = sample_frames(corpus / video.path, 7)
        expected = [played_at(t) for t in uniform_times(0, video.duration, 7)]
        assert sample.mask.all()
        np.testing.assert_allclose(sample.times, expected, atol=1e-6)


def test_frames_show_the_event_the_generator_wrote(corpus, event_pool):
    for video in load_annotations(corpus / "annotations.json")[:8]:
        sample = sample_frames(corpus / video.path, 16)
        for frame, t in zip(sample.frames, sample.times):
            event = event_pool[active_event(video, t).event_id]
            background = np.array(BACKGROUNDS[event["background"]][0])
            assert np.abs(frame[0, 0].astype(int) - background).max() <= 30, (video.video_id, t)


def test_seeking_and_sequential_decoding_agree(corpus):
    video = max(load_annotations(corpus / "annotations.json"), key=lambda v: v.duration)
    seek = sample_frames(corpus / video.path, 9, seek_threshold=0.0)
    sequential = sample_frames(corpus / video.path, 9, seek_threshold=1e9)
    np.testing.assert_array_equal(seek.times, sequential.times)
    np.testing.assert_array_equal(seek.frames, sequential.frames)


def test_event_window_and_resize(corpus):
    video = load_annotations(corpus / "annotations.json")[0]
    event = video.events[1]
    start, end = event.intervals[0]
    sample = sample_frames(corpus / video.path, 5, start=start, end=end, size=32)
    assert sample.frames.shape == (5, 32, 32, 3)
    assert (sample.times >= start - 1e-6).all() and (sample.times < end).all()


def test_short_window_is_padded_with_a_mask(corpus):
    video = load_annotations(corpus / "annotations.json")[0]
    sample = sample_frames(corpus / video.path, 8, start=0.0, end=0.5)  # 4 frames at 8 fps
    assert sample.mask.tolist() == [True] * 4 + [False] * 4
    np.testing.assert_allclose(sample.times[:4], [0, 0.125, 0.25, 0.375])
    assert np.isnan(sample.times[4:]).all() and not sample.frames[4:].any()


def write_clip(path, seconds=4, faststart=False):
    options = {"movflags": "faststart"} if faststart else {}
    with av.open(str(path), "w", options=options) as container:
        stream = container.add_stream("libx264", rate=FPS)
        stream.width = stream.height = 32
        stream.pix_fmt = "yuv420p"
        for k in range(seconds * FPS):
            frame = av.VideoFrame.from_ndarray(np.full((32, 32, 3), k * 7 % 255, np.uint8), format="rgb24")
            frame.pts = k
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))


@pytest.mark.parametrize("faststart", [False, True])
def test_bad_files_raise_naming_path_and_reason(tmp_path, faststart):
    missing = tmp_path / "missing.mp4"
    with pytest.raises(VideoDecodeError, match="missing.mp4: file not found"):
        sample_frames(missing, 4)
    empty = tmp_path / "empty.mp4"
    empty.write_bytes(b"")
    with pytest.raises(VideoDecodeError, match="empty.mp4: file is empty"):
        sample_frames(empty, 4)
    garbage = tmp_path / "garbage.mp4"
    garbage.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(VideoDecodeError, match="garbage.mp4: undecodable"):
        sample_frames(garbage, 4)
    whole = tmp_path / "whole.mp4"
    write_clip(whole, seconds=20, faststart=faststart)
    assert sample_frames(whole, 4).mask.all()
    truncated = tmp_path / "truncated.mp4"
    data = whole.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(VideoDecodeError, match="truncated.mp4: (truncated|undecodable|no frame)"):
        sample_frames(truncated, 8)


# ---- real-world streams: VFR, offset start, B-frames, open GOP, against a full decode ----------------

GOP = 12


def vfr_pts(count: int, seed: int = 0) -> list[int]:
    """Milliseconds with irregular gaps (33 ms to 2.5 s), as phones and screen recorders write."""
    gaps = np.random.default_rng(seed).choice([33, 100, 400, 2500], size=count - 1, p=[0.4, 0.3, 0.2, 0.1])
    return [0] + np.cumsum(gaps).astype(int).tolist()


STREAMS = {
    "vfr": dict(pts=vfr_pts(60)),
    "vfr_bframes": dict(pts=vfr_pts(60, seed=1), bframes=2),
    "offset_10s": dict(pts=[10_000 + 100 * k for k in range(50)], bframes=2),
    "bframes": dict(pts=[40 * k for k in range(72)], bframes=3),
    "open_gop": dict(pts=[40 * k for k in range(72)], bframes=3, open_gop=True),
}


@pytest.fixture(scope="module")
def streams(tmp_path_factory):
    folder = tmp_path_factory.mktemp("streams")
    return {name: write_timed_video(folder / f"{name}.mp4", gop=GOP, **kw) for name, kw in STREAMS.items()}


def played_index(times: np.ndarray, target: float) -> int:
    return max(i for i, t in enumerate(times) if t <= target + 1e-9)


def dedupe(indices):
    return [i for k, i in enumerate(indices) if k == 0 or i != indices[k - 1]]


@pytest.mark.parametrize("name", list(STREAMS))
@pytest.mark.parametrize("seek_threshold", [0.0, 1e9])
def test_bin_centres_over_the_whole_presentation_span(streams, name, seek_threshold):
    times, frames, _, span, _ = full_decode(streams[name])
    num = 16
    targets = [(i + 0.5) * span / num for i in range(num)]
    expected = dedupe([played_index(times, t) for t in targets])
    sample = sample_frames(streams[name], num, seek_threshold=seek_threshold)
    n = len(expected)
    assert sample.mask.tolist() == [True] * n + [False] * (num - n)
    np.testing.assert_allclose(sample.times[:n], times[expected], atol=1e-9)
    np.testing.assert_array_equal(sample.frames[:n], frames[expected])


@pytest.mark.parametrize("name", ["vfr", "offset_10s", "open_gop"])
def test_window_is_measured_from_the_first_frame(streams, name):
    times, frames, _, span, _ = full_decode(streams[name])
    start, end = 0.3 * span, 0.8 * span
    targets = [start + (i + 0.5) * (end - start) / 6 for i in range(6)]
    expected = dedupe([played_index(times, t) for t in targets])
    sample = sample_frames(streams[name], 6, start=start, end=end)
    np.testing.assert_allclose(sample.times[sample.mask], times[expected], atol=1e-9)
    np.testing.assert_array_equal(sample.frames[sample.mask], frames[expected])


def test_offset_start_is_sampled_over_its_content(streams):
    """A stream whose first frame is at 10 s: 8 targets give 8 distinct frames spread over all of it."""
    times, _, _, span, _ = full_decode(streams["offset_10s"])
    sample = sample_frames(streams["offset_10s"], 8)
    assert sample.mask.all() and len(set(sample.times)) == 8
    assert sample.times[0] < span / 8 and sample.times[-1] > span * 7 / 8


@pytest.mark.parametrize("name", list(STREAMS))
def test_linspace_frames_are_qwen_vl_utils_indices(streams, name):
    """GVE's retriever (qwen-vl-utils): n = min(max_frames, frames in window) floored to even,
    indices round(linspace(first, last, n)), sampled fps = n / frames in window x stream fps."""
    times, frames, _, span, rate = full_decode(streams[name])
    windows = [(None, None), (0.25 * span, 0.75 * span), (0.0, times[6]), (0.0, times[4])]
    for start, end in windows:
        max_frames = 8
        lo, hi = start or 0.0, span if end is None else end
        inside = [i for i, t in enumerate(times) if lo - 1e-9 <= t <= hi + 1e-9]
        count = min(max_frames, len(inside))
        count -= count % 2
        expected = [inside[j] for j in np.round(np.linspace(0, len(inside) - 1, count)).astype(int)]
        sample = sample_frames(streams[name], max_frames, start, end, targets="linspace_frames", frame_multiple=2)
        assert sample.mask.sum() == count
        np.testing.assert_allclose(sample.times[:count], times[expected], atol=1e-9)
        np.testing.assert_array_equal(sample.frames[:count], frames[expected])
        assert sample.sampled_fps == pytest.approx(count / len(inside) * rate)


@pytest.mark.parametrize("name", list(STREAMS))
def test_keyframe_sampling_returns_the_key_frame_at_or_before_each_target(streams, name):
    times, frames, keys, span, _ = full_decode(streams[name])
    assert np.flatnonzero(keys).tolist() == list(range(0, len(times), GOP))  # the GOP the writer asked for
    num = 10
    targets = [(i + 0.5) * span / num for i in range(num)]
    expected = [max(i for i in np.flatnonzero(keys) if times[i] <= t + 1e-9) for t in targets]
    sample = sample_frames(streams[name], num, sampling="keyframe")
    assert sample.mask.all()
    np.testing.assert_allclose(sample.times, times[expected], atol=1e-9)
    np.testing.assert_array_equal(sample.frames, frames[expected])


def test_long_vfr_gaps_are_not_truncation_but_a_cut_file_is(tmp_path):
    pts = [0, 40, 80, 4000, 4040, 9000, 9040, 9080]  # frames shown for 4 s and 5 s
    video = write_timed_video(tmp_path / "gaps.mp4", pts, gop=3, faststart=True)
    times, _, _, span, _ = full_decode(video)
    expected = dedupe([played_index(times, (i + 0.5) * span / 8) for i in range(8)])
    sample = sample_frames(video, 8)  # refused as truncated before: a frame 4 s older than its target
    np.testing.assert_allclose(sample.times[sample.mask], times[expected], atol=1e-9)
    long = write_timed_video(tmp_path / "long.mp4", [40 * k for k in range(500)], gop=25, faststart=True)
    declared = full_decode(long)[3]
    cut = tmp_path / "cut.mp4"
    data = long.read_bytes()
    cut.write_bytes(data[: len(data) * 7 // 10])
    message = f"cut.mp4: truncated: frames end at .* but the file declares {declared:.3f} s"
    with pytest.raises(VideoDecodeError, match=message):
        sample_frames(cut, 8)


def test_data_module_keyframe_sampling_reaches_the_sampler(corpus):
    """`data.sampling: keyframe`: every item's frames are the key frames at or before the targets."""
    from lit_retrieval.data.datasets.canonical import MultiEventDataModule
    from lit_retrieval.errors import ConfigError

    with pytest.raises(ConfigError, match="data.sampling"):
        MultiEventDataModule(str(corpus / "annotations.json"), sampling="nearest")
    data = MultiEventDataModule(str(corpus / "annotations.json"), num_frames=6, image_size=32, sampling="keyframe")
    data.setup("fit")
    dataset = data.datasets["train"]
    for index in range(3):
        item = dataset[index]
        times, _, keys, span, _ = full_decode(corpus / dataset.records[index].path)
        key_times = times[keys]
        expected = [key_times[key_times <= (i + 0.5) * span / 6 + 1e-9].max() for i in range(6)]
        np.testing.assert_allclose(item["frame_times"].numpy(), expected, atol=1e-9)
        exact = [times[played_index(times, (i + 0.5) * span / 6)] for i in range(6)]
        assert item["frame_mask"].all() and not np.allclose(expected, exact)  # the modes differ here


@pytest.mark.parametrize("sampling", ["exact", "keyframe"])
def test_sampling_leaves_no_pyav_object_for_the_garbage_collector(tmp_path, sampling):
    """A decoder left in a reference cycle is freed by whichever process collects it; in a forked
    DataLoader worker that hangs on FFmpeg threads that exist only in the parent. Every PyAV object
    and generator must be freed by reference counting when sampling returns."""
    import gc
    import inspect

    path = write_noise_video(tmp_path / "v.mp4", seconds=3.0)
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        sample_frames(path, 6, sampling=sampling)
        gc.collect()
        leaked = [type(o) for o in gc.garbage if type(o).__module__.startswith("av") or inspect.isgenerator(o)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert leaked == []
