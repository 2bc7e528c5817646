"""The table format (`lit_retrieval.data.formats.table`): tables written by pandas and pyarrow (the
libraries users export with) and by hand, read into the records worked out by hand from their rows."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers.media import write_noise_video
from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.formats.table import TableColumns, TableParser, read_table, table_rows, write_table
from lit_retrieval.data.media.video import video_duration
from lit_retrieval.data.records import AnnotationError, Event, VideoRecord

ROWS = [
    {"video": "a.mp4", "caption": "a dog runs", "duration": "2.0", "split": "train"},
    {"video": "a.mp4", "caption": "a dog plays", "duration": "2.0", "split": "train"},
    {"video": "b.mp4", "caption": "a cat sleeps", "duration": "3", "split": "test"},
]


def touch(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"")
    return folder


def parser(root: Path, columns: TableColumns = TableColumns(), on_bad_video: str = "raise", **kw) -> TableParser:
    return TableParser(columns, {"train", "val", "test"}, root, on_bad_video, video_duration, **kw)


def whole(video: str, caption: str, duration: float, split: str) -> VideoRecord:
    return VideoRecord(video, video, duration, split, (Event(caption, ((0.0, duration),)),))


EXPECTED = [
    whole("a.mp4", "a dog runs", 2.0, "train"),
    whole("a.mp4", "a dog plays", 2.0, "train"),
    whole("b.mp4", "a cat sleeps", 3.0, "test"),
]


@pytest.mark.parametrize("ext", ["csv", "tsv", "jsonl", "parquet"])
def test_pandas_tables_in_every_format_give_the_records_worked_out_by_hand(tmp_path, ext):
    """Durations as text ("2.0", "3") in every format; two captions of `a.mp4` are two records of one video."""
    root = touch(tmp_path, "a.mp4", "b.mp4")
    frame = pd.DataFrame(ROWS)
    path = root / f"t.{ext}"
    if ext == "csv":
        frame.to_csv(path, index=False)
    elif ext == "tsv":
        frame.to_csv(path, index=False, sep="\t")
    elif ext == "jsonl":
        frame.to_json(path, orient="records", lines=True)
    else:
        frame.to_parquet(path)
    assert parser(root).load(path, RecordCollector()) == EXPECTED


def test_numbers_as_numbers_and_clips_of_a_file(tmp_path):
    """JSON numbers, and start/end columns: each clip its own video id and window, sampled alone."""
    root = touch(tmp_path, "long.mp4")
    rows = [
        {"video": "long.mp4", "caption": "the intro", "start": 0, "end": 4.5, "duration": 10, "split": "test"},
        {"video": "long.mp4", "caption": "the end", "start": "6", "end": "10", "duration": 10, "split": "test"},
        {"video": "long.mp4", "caption": "the end again", "start": 6, "end": 10, "duration": 10, "split": "test"},
    ]
    path = root / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    records = parser(root).load(path, RecordCollector())
    assert [(r.video_id, r.window, r.events[0].intervals) for r in records] == [
        ("long.mp4#0-4.5", (0.0, 4.5), ((0.0, 4.5),)),
        ("long.mp4#6-10", (6.0, 10.0), ((6.0, 10.0),)),
        ("long.mp4#6-10", (6.0, 10.0), ((6.0, 10.0),)),
    ]


@pytest.mark.parametrize(
    ("header", "columns"),
    [
        (["filepath", "title", "split"], TableColumns()),  # open_clip's CsvDataset keys
        (["file_name", "text", "split"], TableColumns()),  # the Hub's metadata.csv, VLM2Vec's text
        (["clip_path", "sentence", "subset"], TableColumns(video="clip_path", split="subset")),
    ],
)
def test_common_column_names_are_found_and_others_are_named(tmp_path, header, columns):
    root = touch(tmp_path, "v.mp4")
    write_noise_video(root / "v.mp4", 2.0, seed=0)
    path = root / "t.tsv"
    path.write_text("\t".join(header) + "\n" + "\t".join(["v.mp4", "a red disc", "test"]) + "\n")
    (record,) = parser(root, columns).load(path, RecordCollector())
    # no duration column: the video's header gives it (2 s of frames at the writer's rate)
    assert (record.video_id, record.descriptions, record.split) == ("v.mp4", ["a red disc"], "test")
    assert record.duration == pytest.approx(2.0, abs=0.1)


def test_one_table_per_split_takes_the_files_split(tmp_path):
    root = touch(tmp_path / "train", "a.mp4")
    path = root / "metadata.csv"
    path.write_text("file_name,caption,duration\na.mp4,a dog runs,2\n")
    (record,) = parser(tmp_path).load(path, RecordCollector(), split="train", prefix="train")
    assert (record.path, record.split) == ("train/a.mp4", "train")


def test_missing_videos_are_skipped_and_counted_under_skip(tmp_path):
    root = touch(tmp_path, "a.mp4")
    path = root / "t.csv"
    pd.DataFrame(ROWS).to_csv(path, index=False)
    table = parser(root, on_bad_video="skip")
    assert table.load(path, RecordCollector()) == EXPECTED[:2]
    assert table.skipped_videos == ["b.mp4"]
    with pytest.raises(AnnotationError, match=r"record 'row 3': video .*b.mp4 not found"):
        parser(root).load(path, RecordCollector())


def test_skip_drops_the_bad_rows_alone(tmp_path):
    root = touch(tmp_path, "a.mp4", "b.mp4")
    path = root / "t.csv"
    rows = [*ROWS, ROWS[0], {**ROWS[2], "caption": ""}, {**ROWS[2], "split": "dev"}]
    pd.DataFrame(rows).to_csv(path, index=False)
    collector = RecordCollector("skip")
    assert parser(root).load(path, collector) == EXPECTED
    assert [e.record for e in collector.dropped] == ["row 4", "row 5", "row 6"]


def test_read_table_reads_a_separator_of_ones_own(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("video;caption\na.mp4;a dog\n")
    assert read_table(path, separator=";") == (["video", "caption"], [{"video": "a.mp4", "caption": "a dog"}])


@pytest.mark.parametrize("ext", ["csv", "tsv", "jsonl", "parquet"])
def test_written_tables_read_back_with_pandas(tmp_path, ext):
    """`write_table` (what `synth --table` writes) against pandas' own readers."""
    records = [*EXPECTED, VideoRecord("c#1-2", "c.mp4", 5.0, "test", (Event("x", ((1.0, 2.0),)),), window=(1.0, 2.0))]
    path = write_table(table_rows(records), tmp_path / f"t.{ext}")
    read = {
        "csv": lambda: pd.read_csv(path),
        "tsv": lambda: pd.read_csv(path, sep="\t"),
        "jsonl": lambda: pd.read_json(path, lines=True),
        "parquet": lambda: pq.read_table(path).to_pandas(),
    }[ext]()
    assert read["caption"].tolist() == ["a dog runs", "a dog plays", "a cat sleeps", "x"]
    assert read["duration"].tolist() == [2.0, 2.0, 3.0, 5.0]
    assert read["start"].fillna(-1).tolist() == [-1, -1, -1, 1.0]


def test_a_damaged_parquet_file_and_an_unknown_extension(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"video": ["a.mp4"]}), path)
    path.write_bytes(path.read_bytes()[:20])
    with pytest.raises(AnnotationError, match="not a readable Parquet file"):
        read_table(path)
    with pytest.raises(Exception, match=r"extension must be one of"):
        read_table(tmp_path / "t.xlsx")


def test_table_rows_write_a_caption_repeated_in_one_record_once(tmp_path):
    """Two events of a synthetic video may share a text; the table would refuse the repeated row."""
    events = (Event("a dog", ((0.0, 1.0),)), Event("a cat", ((1.0, 2.0),)), Event("a dog", ((2.0, 3.0),)))
    rows = table_rows([VideoRecord("v", "v.mp4", 3.0, "train", events)])
    assert [r["caption"] for r in rows] == ["a dog", "a cat"]
