"""`video_duration` is the video stream's span, not the container's: a file whose audio track
outlasts its picture (2.0 s of video at 8 fps, 2.56 s of AAC) is 2.0 s long, and every time below
that can be shown and embedded (thumbnails, GVE clips, the server's moment windows)."""

import av
import pytest
from helpers.media import write_video_with_audio

from lit_retrieval.data.media.video import video_duration
from lit_retrieval.models.gve.processing import InputConfig, sample_clip
from lit_retrieval.serve.moments import windows
from lit_retrieval.serve.thumbnails import render_thumbnail


@pytest.fixture(scope="module")
def talkie(tmp_path_factory):
    path = write_video_with_audio(tmp_path_factory.mktemp("audio") / "talkie.mp4", video_seconds=2.0, audio_seconds=2.5)
    with av.open(str(path)) as container:  # the premise: the container is longer than its picture
        assert container.duration / 1e6 == pytest.approx(2.56, abs=1e-6)
    return path


def test_duration_is_the_video_streams_span(talkie):
    # 16 frames at 8 fps: the first at 0 s, the last at 1.875 s, shown until 2.0 s
    assert video_duration(talkie) == pytest.approx(2.0, abs=1e-9)


def test_a_time_past_the_picture_but_inside_the_sound_renders(talkie):
    # 2.3 s lies inside the container's 2.56 s: it is clamped to the last frame, not sampled past it
    assert render_thumbnail(str(talkie), 2.3)[:2] == b"\xff\xd8"  # a JPEG


def test_every_moment_window_of_the_video_embeds(talkie):
    # 5 windows over the video: the last is [1.6, 2.0] (over the container it was [2.048, 2.56], empty)
    spans = windows(video_duration(talkie), 5)
    assert spans[-1] == pytest.approx((1.6, 2.0))
    for start, end in spans:
        sample = sample_clip(str(talkie), start, end, InputConfig(min_frames=2, max_frames=2), temporal_patch=2)
        assert sample.mask.sum() >= 1 and (sample.times >= start - 1e-9).all() and (sample.times < end).all()
