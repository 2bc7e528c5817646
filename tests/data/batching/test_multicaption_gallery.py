"""Records that share a video: a multi-caption split is one gallery video per video id with one query
per caption, and a record's `window` (a segment of a longer file) is where its frames come from."""

from types import SimpleNamespace

import pytest
import torch

from lit_retrieval.data.batching.dataset import MultiEventDataset
from lit_retrieval.data.records import Event, VideoRecord
from lit_retrieval.modules.evaluation import EvalBatch, RetrievalEvaluator
from helpers.media import write_noise_video

VIDEO_OF_RECORD = {0: "a", 1: "b", 2: "a", 3: "c", 4: "a"}  # video a has three captions
VIDEO_REP = {"a": [1.0, 0.0, 0.0], "b": [0.0, 1.0, 0.0], "c": [0.0, 0.0, 1.0]}


def batch(indices: list[int]) -> EvalBatch:
    videos = [VIDEO_OF_RECORD[i] for i in indices]
    reps = torch.tensor([VIDEO_REP[v] for v in videos])
    return EvalBatch(reps.clone(), reps, torch.tensor(indices), [[f"caption {i}"] for i in indices], videos, {})


def test_records_sharing_a_video_id_are_one_gallery_column_each_caption_one_query():
    model = SimpleNamespace(device=torch.device("cpu"), trainer=None)
    split = RetrievalEvaluator().gather(model, [batch([3, 0]), batch([4, 1, 2])])
    # three videos, each the column of its first record (smallest dataset index): a <- 0, b <- 1, c <- 3
    assert split.gallery_ids.tolist() == [0, 1, 3] and split.video_ids == ["a", "b", "c"]
    assert torch.equal(split.gallery, torch.eye(3))
    # five queries, in the order collected, each pointing at its video's column
    assert split.index.tolist() == [3, 0, 4, 1, 2] and split.targets.tolist() == [2, 0, 0, 1, 0]
    ranked = RetrievalEvaluator().rank(
        lambda t, g: t @ g.t(), split.text, split.gallery, split.targets, split.index, synced=False
    )
    assert ranked.ranks.tolist() == [1.0] * 5 and ranked.metrics["t2v/R@1"] == 100


@pytest.mark.parametrize(
    ("window", "times"), [((2.0, 4.0), [2.25, 2.75, 3.25, 3.75]), (None, [0.75, 2.25, 3.75, 5.25])]
)
def test_a_record_window_is_where_its_frames_are_sampled(tmp_path, window, times):
    write_noise_video(tmp_path / "v.mp4", seconds=6.0, fps=8)
    record = VideoRecord("v_seg", "v.mp4", 6.0, "test", (Event("a segment", ((2.0, 4.0),)),), window=window)
    item = MultiEventDataset([record], tmp_path, num_frames=4, image_size=32)[0]
    # bin centres of the window (or of the whole 6 s file), each the frame played then (8 fps)
    assert item["frame_times"].tolist() == pytest.approx(times)
