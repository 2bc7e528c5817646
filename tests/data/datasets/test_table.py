"""`TableDataModule` through the CLI as docs/datasets.md prints it: the quick start on the synthetic
corpus's table, and a table of known rows (several captions a video, durations as text, open_clip's column
names) in all four formats, fitted once and tested from each with the same scores."""

from __future__ import annotations

import csv
import json
import re
import shlex
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers.media import write_noise_video
from lit_retrieval.cli import main
from lit_retrieval.data.datasets.table import TableDataModule

pytestmark = pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")  # in-process runs pass argv
ROOT = Path(__file__).resolve().parents[3]
SECTION = "## Your own corpus as a table"
# what keeps a documented run small here (the documented values are for a real run)
SMALL = [
    *("--trainer.max_epochs", "1", "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"),
    *("--data.init_args.num_frames", "2", "--data.init_args.num_workers", "0"),
]


def documented_commands() -> list[list[str]]:
    """The `lit-retrieval` command lines of the docs section, as printed (arguments after the program)."""
    text = (ROOT / "docs" / "datasets.md").read_text()
    section = text[text.index(SECTION) : text.index("\n## ", text.index(SECTION) + 1)]
    blocks = re.findall(r"```\n(.*?)```", section, re.S)
    return [
        shlex.split(line)[1:] for block in blocks for line in block.splitlines() if line.startswith("lit-retrieval")
    ]


def run(argv: list[str]) -> None:
    """`lit-retrieval ARGV` in this process; a command's exit status must be 0."""
    try:
        main(argv)
    except SystemExit as done:
        assert done.code in (0, None), argv


def with_value(argv: list[str], flag: str, value: str) -> list[str]:
    """`argv` with the value after `flag` replaced (the flag must be there: the docs print it)."""
    at = argv.index(flag) + 1
    return [*argv[:at], value, *argv[at + 1 :]]


@pytest.mark.slow  # 20-35 s: synth, fit and test (the default suite runs the documented commands below on known rows)
def test_the_documented_quick_start_fits_and_tests_the_synthetic_table(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    synth, fit, test, _ = documented_commands()
    assert synth[:1] == ["synth"] and fit[:1] == ["fit"] and test[:1] == ["test"]
    run(with_value(synth, "--num-videos", "12"))
    rows = list(csv.DictReader((tmp_path / "data" / "synthetic" / "table.csv").open()))
    annotations = json.loads((tmp_path / "data" / "synthetic" / "annotations.json").read_text())["videos"]
    assert len(rows) == sum(len(v["events"]) for v in annotations) > len(annotations)  # several captions a video
    run([*fit, *SMALL, "--data.init_args.batch_size", "4"])
    assert (tmp_path / "runs" / "table" / "checkpoints" / "last.ckpt").is_file()
    run([*test, *SMALL])
    metrics = json.loads((tmp_path / "runs" / "table" / "logs" / "test" / "metrics.json").read_text())["test"]
    assert "t2v/R@1" in metrics and "v2t_group_max/R@1" in metrics


# known rows, with open_clip's column names: two training videos with two captions each, a test video with
# three captions and one with one; durations as text ("1.0"), as every CSV cell is and as some exports write them
HEADER = ["filepath", "title", "duration", "split"]
ROWS = [
    ["a.mp4", "a red disc", "1.0", "train"],
    ["a.mp4", "a red disc moves", "1.0", "train"],
    ["b.mp4", "a blue square", "1.0", "train"],
    ["b.mp4", "a blue square turns", "1.0", "train"],
    ["c.mp4", "a green star", "1.0", "train"],
    ["d.mp4", "a yellow ring", "1.0", "test"],
    ["d.mp4", "a ring of yellow", "1.0", "test"],
    ["d.mp4", "yellow, round", "1.0", "test"],
    ["e.mp4", "a white cross", "1.0", "test"],
]


def write_tables(folder: Path) -> dict[str, Path]:
    """The rows in every format, written with csv, json and pyarrow (not with the project's writer)."""
    paths = {ext: folder / f"captions.{ext}" for ext in ("csv", "tsv", "jsonl", "parquet")}
    for ext, separator in (("csv", ","), ("tsv", "\t")):
        with paths[ext].open("w", newline="") as handle:
            csv.writer(handle, delimiter=separator).writerows([HEADER, *ROWS])
    records = [dict(zip(HEADER, row)) for row in ROWS]
    paths["jsonl"].write_text("".join(json.dumps(r) + "\n" for r in records))
    pq.write_table(pa.Table.from_pylist(records), paths["parquet"])  # duration a string column
    return paths


def test_known_rows_in_four_formats_fit_and_test_through_the_cli(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    videos = tmp_path / "my" / "videos"
    videos.mkdir(parents=True)
    for seed, name in enumerate("abcde"):
        write_noise_video(videos / f"{name}.mp4", 1.0, seed=seed)
    tables = write_tables(tmp_path / "my")
    *_, own = documented_commands()
    assert own[:1] == ["fit"]
    # the documented command on the CSV, with what keeps it small here
    fit = with_value(own, "--data.init_args.table", str(tables["csv"]))
    run([*fit, *SMALL, "--data.init_args.batch_size", "2"])
    ckpt = tmp_path / "runs" / "table" / "checkpoints" / "last.ckpt"
    assert ckpt.is_file()
    scores = {}
    for ext, table in tables.items():
        test = ["test", *own[1:], *SMALL]
        version = ("--trainer.logger.init_args.version", ext, "--model.init_args.evaluation.save_scores", "true")
        run([*with_value(test, "--data.init_args.table", str(table)), *version, "--ckpt_path", str(ckpt)])
        folder = tmp_path / "runs" / "table" / "logs" / ext
        ids = json.loads((folder / "scores_ids.json").read_text())
        # one query per caption against the two distinct test videos, each pointing at its own video
        assert ids["video_ids"] == ["d.mp4", "e.mp4"] and ids["targets"] == [0, 0, 0, 1]
        scores[ext] = np.load(folder / "scores.npy")
    assert scores["csv"].shape == (4, 2)
    for ext in ("tsv", "jsonl", "parquet"):
        np.testing.assert_array_equal(scores[ext], scores["csv"])


def test_a_table_per_split_reads_paths_from_each_tables_folder(tmp_path):
    """The Hub's layout: `train/metadata.csv` and `test/metadata.jsonl`, `file_name` relative to each."""
    for split, ext in (("train", "csv"), ("test", "jsonl")):
        (tmp_path / split).mkdir()
        (tmp_path / split / "x.mp4").write_bytes(b"")
    (tmp_path / "train" / "metadata.csv").write_text("file_name,text,duration\nx.mp4,a dog,2\nx.mp4,a dog runs,2\n")
    (tmp_path / "test" / "metadata.jsonl").write_text('{"file_name": "x.mp4", "text": "a cat", "duration": "3"}\n')
    tables = {"train": str(tmp_path / "train" / "metadata.csv"), "test": str(tmp_path / "test" / "metadata.jsonl")}
    data = TableDataModule(tables, num_frames=2, image_size=32, batch_size=2)
    data.setup("fit")
    assert data.default_video_root() == tmp_path.resolve()
    train, test = data.datasets["train"].records, data.datasets["test"].records
    assert [(r.path, r.duration, r.descriptions) for r in train] == [
        ("train/x.mp4", 2.0, ["a dog"]),
        ("train/x.mp4", 2.0, ["a dog runs"]),
    ]
    assert [(r.path, r.duration, r.split) for r in test] == [("test/x.mp4", 3.0, "test")]
    assert "val" not in data.datasets  # no val rows: no validation


@pytest.mark.parametrize("option", [{"format": "xlsx"}, {"separator": ";;"}, {"table": "captions.xlsx"}])
def test_impossible_options_are_refused_when_built(option):
    with pytest.raises(ValueError, match=r"data\.(format|separator|table)"):
        TableDataModule(**{"table": "t.csv", **option})
