"""DiDeMo frames come from the annotated window, as CLIP4Clip's loader reads it (seconds 0-31 at
1 fps, end second included: the first 32 s), not from the whole file; on a written 40 s mp4."""

import json

import numpy as np
import pytest

from lit_retrieval.data import DiDeMoDataModule
from helpers.media import write_noise_video

FPS = 4  # frames at 0, 0.25, 0.5, ... s


@pytest.fixture(scope="module")
def didemo_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("didemo")
    write_noise_video(root / "long.mov.mp4", seconds=40, fps=FPS, width=32, height=32)
    moment = {
        "annotation_id": 1,
        "description": "a boat leaves the harbour",
        "video": "long.mov",  # saved by the release's downloader as long.mov.mp4
        "times": [[0, 1], [0, 2]],
        "num_segments": 6,
    }
    (root / "test_data.json").write_text(json.dumps([moment]))
    (root / "val_data.json").write_text("[]")
    (root / "train_data.json").write_text(json.dumps([{**moment, "annotation_id": 2, "video": "other.mp4"}]))
    return root


def frame_times(root, **options):
    dm = DiDeMoDataModule(str(root), num_frames=8, image_size=32, **options)
    dm.setup()
    item = dm.datasets["test"][0]
    return item["frame_times"].numpy()[item["frame_mask"].numpy().astype(bool)]


def test_default_window_is_clip4clip_seconds_0_to_31(didemo_root):
    # 8 uniform bins over [0, 32): centres 2, 6, ..., 30, each exactly on a frame at 4 fps
    np.testing.assert_allclose(frame_times(didemo_root), [2, 6, 10, 14, 18, 22, 26, 30], atol=1e-6)


def test_annotated_window_and_whole_file(didemo_root):
    # the annotated 6 x 5 s = 30 s: centres (k + 0.5) * 3.75; the frame shown is the last at or before
    annotated = frame_times(didemo_root, window_seconds=None)
    centres = (np.arange(8) + 0.5) * 3.75
    np.testing.assert_allclose(annotated, np.floor(centres * FPS) / FPS, atol=1e-6)
    assert annotated.max() < 30
    # without trimming the whole 40 s file is sampled: centres 2.5, 7.5, ..., 37.5
    whole = frame_times(didemo_root, trim_to_annotation=False)
    np.testing.assert_allclose(whole, (np.arange(8) + 0.5) * 5, atol=1e-6)


def test_window_must_be_positive(didemo_root):
    with pytest.raises(ValueError, match="window_seconds must be positive"):
        DiDeMoDataModule(str(didemo_root), window_seconds=0).setup()
