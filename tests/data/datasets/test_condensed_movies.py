"""Condensed Movies' parser and DataModule (a SALI dataset; MSR-VTT 1k-A, the other: test_msrvtt.py), on fixtures
in the real file layout."""

import shutil
from pathlib import Path

import numpy as np
import pytest

from lit_retrieval.data import AnnotationError, CondensedMoviesDataModule
from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.datasets.condensed_movies import CondensedMoviesParser
from lit_retrieval.data.media.shots import ShotConfig
from helpers.media import FPS, write_shots_video

FIXTURES = Path(__file__).parents[2] / "fixtures"
DOWNLOADED = {"2019/Zz1Yy2Xx3Ww": [12, 25], "2019/Aa1Bb2Cc3Dd": [], "2017/Ee4Ff5Gg6Hh": [20], "2018/Ii7Jj8Kk9Ll": []}


@pytest.fixture(scope="module")
def cmd_root(tmp_path_factory):
    """The CMD metadata plus 4 s videos for every clip but the offline one (durations.csv says 2-3 s)."""
    root = tmp_path_factory.mktemp("cmd")
    shutil.copytree(FIXTURES / "condensed_movies" / "metadata", root / "metadata")
    for name, cuts in DOWNLOADED.items():
        (root / "videos" / name).parent.mkdir(parents=True, exist_ok=True)
        write_shots_video(root / "videos" / f"{name}.mp4", cuts, 4 * FPS, size=64)
    return root


def test_condensed_movies_records_split_per_movie(cmd_root):
    records = {r.video_id: r for r in CondensedMoviesParser(cmd_root / "videos").load(cmd_root / "metadata")}
    # Ii7... has an empty description, Mm0... has no video; the repeated description is dropped
    assert sorted(records) == ["Aa1Bb2Cc3Dd", "Ee4Ff5Gg6Hh", "Zz1Yy2Xx3Ww"]
    pier = records["Zz1Yy2Xx3Ww"]
    assert (pier.split, pier.path, pier.duration) == ("test", "2019/Zz1Yy2Xx3Ww.mp4", 3.0)
    assert pier.descriptions == ["Nora confronts Eli about the missing ledger, and he storms off the pier."]
    assert records["Aa1Bb2Cc3Dd"].descriptions == ["Then Nora talks to her brother about the ledger."]
    assert records["Ee4Ff5Gg6Hh"].split == "train"
    offline = CondensedMoviesParser(cmd_root / "videos", require_video=False).load(cmd_root / "metadata")
    assert "Mm0Nn1Oo2Pp" in {r.video_id for r in offline}


def test_condensed_movies_bad_rows_name_the_file_and_record(cmd_root, tmp_path):
    metadata = tmp_path / "metadata"
    shutil.copytree(cmd_root / "metadata", metadata)
    (metadata / "split.csv").write_text("imdbid,split\ntt9990001,test\ntt9990003,val\n")  # tt9990002 lost
    with pytest.raises(
        AnnotationError, match=r"descriptions.csv: record 'Ee4Ff5Gg6Hh': movie 'tt9990002' has no split"
    ):
        CondensedMoviesParser(cmd_root / "videos").load(metadata)
    collector = RecordCollector("skip")
    kept = CondensedMoviesParser(cmd_root / "videos").load(metadata, collector)
    assert len(kept) == 2 and len(collector.dropped) == 1
    (metadata / "durations.csv").write_text("videoid,length\n")
    with pytest.raises(AnnotationError, match=r"durations.csv.*missing column\(s\) \['duration'\]"):
        CondensedMoviesParser(cmd_root / "videos").load(metadata)


def test_condensed_movies_data_module_trims_to_the_annotated_duration_and_has_shots(cmd_root, tmp_path):
    dm = CondensedMoviesDataModule(
        str(cmd_root / "metadata"),
        num_frames=8,
        image_size=32,
        batch_size=2,
        shots=ShotConfig(cache_dir=str(tmp_path / "shots"), progress=False),
    )
    dm.prepare_data()
    dm.setup()
    assert {role: len(ds) for role, ds in dm.datasets.items()} == {"train": 1, "val": 0, "test": 2}
    test = dm.datasets["test"]
    item = test[[r.video_id for r in test.records].index("Zz1Yy2Xx3Ww")]
    assert np.nanmax(item["frame_times"].numpy()) < 3.0  # the 4 s file, trimmed at durations.csv's 3 s
    assert item["num_shots"] == 3 and item["frame_shots"].tolist() == [0, 0, 0, 1, 1, 1, 1, 2]  # cuts at 1.2 and 2.5 s


def test_condensed_movies_clip_split_file_overrides_the_movie_split(cmd_root, caplog):
    # clip_split.csv moves Zz1 (test movie) to train, Ee4 (train movie) to test and Aa1 to excluded;
    # Ii7 is unlisted (and uncaptioned), Mm0 is listed but has no video
    split_file = FIXTURES / "condensed_movies" / "clip_split.csv"
    parser = CondensedMoviesParser(cmd_root / "videos", split_file=split_file)
    records = {r.video_id: r.split for r in parser.load(cmd_root / "metadata")}
    assert records == {"Zz1Yy2Xx3Ww": "train", "Aa1Bb2Cc3Dd": "excluded", "Ee4Ff5Gg6Hh": "test"}
    dm = CondensedMoviesDataModule(str(cmd_root / "metadata"), split_file=str(split_file), num_frames=4, image_size=32)
    dm.setup()
    ids = {role: [r.video_id for r in ds.records] for role, ds in dm.datasets.items()}
    assert ids == {"train": ["Zz1Yy2Xx3Ww"], "val": [], "test": ["Ee4Ff5Gg6Hh"]}  # excluded: in no split
    # the Sec. 2 diagnosis pool: every listed clip in one split; an unlisted captioned clip is counted
    pool = cmd_root / "pool.csv"
    pool.write_text("videoid,split\nZz1Yy2Xx3Ww,test\nEe4Ff5Gg6Hh,test\n")
    with caplog.at_level("WARNING"):
        pooled = CondensedMoviesParser(cmd_root / "videos", split_file=pool).load(cmd_root / "metadata")
    assert sorted(r.video_id for r in pooled) == ["Ee4Ff5Gg6Hh", "Zz1Yy2Xx3Ww"]
    assert {r.split for r in pooled} == {"test"}
    assert "2 captioned clips are not in the clip split file" in caplog.text  # Aa1 and Mm0
    # `test` over the pool: the unused training role names the pool split too
    diagnosis = CondensedMoviesDataModule(
        str(cmd_root / "metadata"), split_file=str(pool), train_split="test", num_frames=4, image_size=32
    )
    diagnosis.setup("test")
    assert sorted(r.video_id for r in diagnosis.datasets["test"].records) == ["Ee4Ff5Gg6Hh", "Zz1Yy2Xx3Ww"]


@pytest.mark.parametrize(
    "text,message",
    [
        (
            "videoid,split\nZz1Yy2Xx3Ww,train\nAa1Bb2Cc3Dd,tset\n",
            r"bad.csv:3: split 'tset' of clip 'Aa1Bb2Cc3Dd' is not",
        ),
        (
            "videoid,split\nZz1Yy2Xx3Ww,train\nEe4Ff5Gg6Hh,test\nZz1Yy2Xx3Ww,test\n",
            r"bad.csv:4: clip 'Zz1Yy2Xx3Ww' is listed again \(first at line 2\)",
        ),
        ("videoid,split\nZz1Yy2Xx3Ww\n", r"bad.csv:2: expected 2 fields"),
        ("videoid,split\n,train\n", r"bad.csv:2: empty videoid"),
        ("clip,split\nZz1Yy2Xx3Ww,train\n", r"bad.csv:1: missing column\(s\) \['videoid'\]"),
    ],
)
def test_condensed_movies_bad_clip_split_rows_name_file_and_line(cmd_root, tmp_path, text, message):
    bad = tmp_path / "bad.csv"
    bad.write_text(text)
    with pytest.raises(AnnotationError, match=message):
        CondensedMoviesParser(cmd_root / "videos", split_file=bad).load(cmd_root / "metadata")
