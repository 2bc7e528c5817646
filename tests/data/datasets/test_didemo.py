"""DiDeMo as released: some videos are named twice, under two extensions of one Flickr file name
(`x.mov` and `x.mp4`, or the bare-dot `x.` and `x.mp4`), each name with its own moments. The
fixture `tests/fixtures/didemo/val_data.json` copies that layout (the release's fields, 4 to 7
annotators per moment): 9 moments under 6 names of 4 stems. Expected values are worked by hand."""

import json
import logging
from pathlib import Path

import pytest

from lit_retrieval.data import DiDeMoDataModule
from lit_retrieval.data.formats.didemo import DiDeMoParser
from lit_retrieval.errors import ConfigError
from helpers.media import write_noise_video

VAL = Path(__file__).parents[2] / "fixtures" / "didemo" / "val_data.json"
DOG = "39457011@N00_5403825464_79c0f43b72"  # named .mov (2 moments) and .mp4 (2 moments)
LAKE = "86091119@N00_8027493026_992e5e1068"  # named "x." (1 moment) and .mp4 (1 moment)
CAR = "8485866@N03_7988327414_eb6e4caaee"  # named "x." only
BIRD = "45909111@N00_7521412400_f2321df2b4"  # named .wmv only, 5 segments


def load(**options):
    return {r.video_id: r for r in DiDeMoParser(**options).load(VAL, "val")}


def test_one_video_and_one_paragraph_per_stem(caplog):
    with caplog.at_level(logging.WARNING, logger="lit_retrieval.data.formats.didemo"):
        videos = load()
    assert sorted(videos) == sorted([DOG, LAKE, CAR, BIRD])  # 6 names, 4 videos
    # moments of both names, ordered by the annotators' mean start: 0, 3.75, 11.25, 21.25 s
    assert videos[DOG].descriptions == [
        "the puppy first rolls over on its back",  # .mp4, chunks (0, 0.25) -> 0-6.25 s
        "dog first rolls onto its side",  # .mov, (0.75, 1) -> 3.75-10 s
        "the dog plays with the hand",  # .mp4, (2.25, 2.75) -> 11.25-18.75 s
        "the puppy runs away",  # .mov, (4.25, 4.75) -> 21.25-28.75 s
    ]
    assert [e.intervals for e in videos[DOG].events] == [
        ((0.0, 6.25),),
        ((3.75, 10.0),),
        ((11.25, 18.75),),
        ((21.25, 28.75),),
    ]
    assert videos[LAKE].descriptions == ["a man waves at the camera", "the camera pans to the lake"]
    assert videos[LAKE].events[0].intervals == ((0.0, 6.0),)  # 5 annotators, ends (0, 0, 1, 0, 0) -> 1.2 chunks
    assert videos[CAR].events[1].intervals == ((20.0, pytest.approx(5 * (1 + 29 / 7))),)  # 7 annotators
    assert videos[BIRD].duration == 25.0 and videos[BIRD].descriptions == ["a bird lands on the fence"]
    [line] = caplog.messages
    assert "6 file names -> 4 videos: 2 videos named under several extensions" in line
    assert f"{DOG}.mov + {DOG}.mp4" in line and f"{LAKE}. + {LAKE}.mp4" in line


def test_file_names_as_the_release_downloader_writes_them_or_by_stem():
    # the downloader saves <video>.mp4: the full name plus .mp4 (a bare-dot name gets "..mp4")
    full = {k: v.path for k, v in load().items()}
    assert full == {DOG: f"{DOG}.mov.mp4", LAKE: f"{LAKE}..mp4", CAR: f"{CAR}..mp4", BIRD: f"{BIRD}.wmv.mp4"}
    literal = {k: v.path for k, v in load(video_ext=None).items()}
    assert literal == {DOG: f"{DOG}.mov", LAKE: f"{LAKE}.", CAR: f"{CAR}.", BIRD: f"{BIRD}.wmv"}
    by_stem = {k: v.path for k, v in load(file_names="stem").items()}
    assert by_stem == {k: f"{k}.mp4" for k in (DOG, LAKE, CAR, BIRD)}
    for paths in (full, literal, by_stem):
        assert len(set(paths.values())) == 4  # no two videos share a file
    with pytest.raises(ConfigError, match="file_names: stem needs a video_ext"):
        DiDeMoParser(video_ext=None, file_names="stem")
    with pytest.raises(ConfigError, match="'full' or 'stem'"):
        DiDeMoParser(file_names="name")


def test_datamodule_reads_the_downloaded_files(tmp_path):
    root = tmp_path / "didemo"
    root.mkdir()
    (root / "val_data.json").write_text(VAL.read_text())
    (root / "train_data.json").write_text(json.dumps([]))
    (root / "test_data.json").write_text(json.dumps([]))
    videos = root / "videos"
    videos.mkdir()
    # of the dog's two names only the .mp4 one was downloaded: that file is used
    for name in (f"{DOG}.mp4", f"{LAKE}.", f"{CAR}.", f"{BIRD}.wmv"):
        write_noise_video(videos / f"{name}.mp4", seconds=1, fps=4, width=16, height=16)
    dm = DiDeMoDataModule(
        str(root),
        split_files={"val": "val_data.json"},
        video_root=str(videos),
        train_split="val",
        test_split="val",
        num_frames=2,
        image_size=16,
    )
    dm.setup()
    records = dm.datasets["test"].records
    assert {r.path for r in records} == {f"{DOG}.mp4.mp4", f"{LAKE}..mp4", f"{CAR}..mp4", f"{BIRD}.wmv.mp4"}
    items = [dm.datasets["test"][k] for k in range(len(records))]
    assert all("error" not in item and item["frame_mask"].all() for item in items)
