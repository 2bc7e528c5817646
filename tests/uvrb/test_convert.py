"""`lit-retrieval uvrb convert` (lit_retrieval/uvrb/convert.py): a task in the runner's layout from a pairs file
written with known content, run as docs/datasets.md prints it; the runner's own reader loads the result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lit_retrieval.commands import run_command
from lit_retrieval.data.records import AnnotationError
from lit_retrieval.uvrb.tasks import RetrievalTaskSpec, load_retrieval_task
from helpers.doc_commands import documented_command

PAIRS = [  # a caption per row, as a text -> video release lists them; two captions of v1 share nothing else
    {"caption": "a man rides a horse", "video_path": "videos/v1.mp4"},
    {"caption": "a horse gallops on a beach", "video_path": "videos/v1.mp4"},
    {"caption": "two cats play", "video_path": "videos/v2.mp4", "query_id": "cats"},
    {"caption": "two cats play", "video_path": "videos/v3.mp4", "query_id": "cats"},  # two relevant videos
]


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_documented_conversion_writes_the_runners_files(tmp_path):
    release = tmp_path / "downloads" / "uvrb" / "MSRVTT"
    (release / "videos").mkdir(parents=True)
    for name in ("v1", "v2", "v3"):
        (release / "videos" / f"{name}.mp4").write_bytes(b"")
    (release / "pairs.jsonl").write_text("".join(json.dumps(row) + "\n" for row in PAIRS))
    words = documented_command("docs/datasets.md", "uvrb convert")
    assert words[:3] == ["lit-retrieval", "uvrb", "convert"]
    given = {"downloads/uvrb/MSRVTT/pairs.jsonl": str(release / "pairs.jsonl"), "data/uvrb/MSRVTT": str(tmp_path / "t")}
    assert run_command("uvrb", [given.get(w, w) for w in words[2:]]) == 0
    task = tmp_path / "t"
    media = "../downloads/uvrb/MSRVTT/videos"
    assert lines(task / "queries.jsonl") == [
        {"id": "q1", "text": "a man rides a horse"},
        {"id": "q2", "text": "a horse gallops on a beach"},
        {"id": "cats", "text": "two cats play"},
    ]
    assert lines(task / "corpus.jsonl") == [{"id": f"v{k}", "video": f"{media}/v{k}.mp4"} for k in (1, 2, 3)]
    assert lines(task / "qrels.jsonl") == [
        {"query_id": q, "corpus_id": c, "score": 1}
        for q, c in (("q1", "v1"), ("q2", "v1"), ("cats", "v2"), ("cats", "v3"))
    ]
    data = load_retrieval_task(RetrievalTaskSpec("MSRVTT", str(task)))
    assert [Path(item.video).resolve() for item in data.corpus] == [
        (release / "videos" / f"v{k}.mp4").resolve() for k in (1, 2, 3)
    ]


def test_clips_images_and_csv_rows_keep_their_fields(tmp_path):
    (tmp_path / "pairs.csv").write_text(
        "text,image,target,target_id,target_start,target_end\nthe red one,frames/a.jpg,long/movie.mp4,m1_10,10,25.5\n"
    )
    convert = ["convert", str(tmp_path / "pairs.csv"), "--out", str(tmp_path / "task")]
    assert run_command("uvrb", convert) == 0
    assert lines(tmp_path / "task" / "queries.jsonl") == [
        {"id": "q1", "text": "the red one", "image": "../frames/a.jpg"}
    ]
    assert lines(tmp_path / "task" / "corpus.jsonl") == [
        {"id": "m1_10", "video": "../long/movie.mp4", "start": 10.0, "end": 25.5}
    ]


@pytest.mark.parametrize(
    "rows, message",
    [
        ([{"caption": "x"}], r"item 0'?: no target video"),
        ([{"video_path": "a.mp4"}], "no query: needs text, image or video"),
        (
            [
                {"caption": "x", "video_path": "a.mp4", "query_id": "q"},
                {"caption": "y", "video_path": "b.mp4", "query_id": "q"},
            ],
            "query 'q' repeated with other content",
        ),
        (
            [{"caption": "x", "video_path": "a/v.mp4"}, {"caption": "y", "video_path": "b/v.mp4"}],
            "corpus id 'v' names two videos",
        ),
    ],
)
def test_bad_rows_are_refused_naming_the_file_and_row_and_nothing_is_written(tmp_path, rows, message):
    (tmp_path / "pairs.json").write_text(json.dumps(rows))
    args = ["convert", str(tmp_path / "pairs.json"), "--out", str(tmp_path / "task"), "--field", "text=caption"]
    with pytest.raises(AnnotationError, match=message):
        run_command("uvrb", [*args, "target=video_path"])
    assert not (tmp_path / "task").exists()
