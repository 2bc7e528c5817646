import math

import av
import numpy as np
import pytest

from lit_retrieval.data.annotations import load_annotations
from lit_retrieval.data.synthetic import BACKGROUNDS
from lit_retrieval.data.video import VideoDecodeError, sample_frames, uniform_times

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
