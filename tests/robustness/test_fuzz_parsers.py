"""Property-based fuzzing of every annotation parser (hypothesis): any byte string, any JSON value
and any near-miss of a valid record either parses to valid records or raises the project's
`AnnotationError`, under both bad-record policies. "Valid" is checked here from the formats'
layouts (ids unique and non-empty, finite positive durations, 0 <= start < end <= duration), not
with the parsers' own helpers."""

from __future__ import annotations

import csv
import io
import json
import math
import tempfile
from functools import partial
from pathlib import Path

import faiss
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lit_retrieval.data.formats.activitynet import ActivityNetParser
from lit_retrieval.data.annotations import load_annotations
from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.datasets.condensed_movies import CondensedMoviesParser
from lit_retrieval.data.formats.didemo import DiDeMoParser
from lit_retrieval.data.media.frame_cache import FrameCache, check_params, read_header
from lit_retrieval.data.formats.melon import MelonParser
from lit_retrieval.data.datasets.msrvtt import MSRVTTParser
from lit_retrieval.data.records import AnnotationError, VideoRecord
from lit_retrieval.data.gve.tasks import TaskRecord, TaskSpec, read_task
from lit_retrieval.errors import InputError, input_error_line
from lit_retrieval.search.index import VideoIndex
from lit_retrieval.search.loading import ModelSpec
from lit_retrieval.uvrb.tasks import RetrievalTaskSpec, load_retrieval_task

from .files import CMD_TABLES, activitynet_video, canonical_video, didemo_moment, melon_record, msrvtt_data

FUZZ = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-10, 10**6)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=16,
)
policies = st.sampled_from(["raise", "skip"])


MISSING = object()


def near(template: dict) -> st.SearchStrategy:
    """Objects like `template` where each key keeps its valid value (18 in 20), is dropped (1 in 20)
    or holds any JSON value (1 in 20): mostly valid records with a few faults each."""

    def field(value):
        return st.tuples(st.integers(0, 19), json_values).map(
            lambda t: value if t[0] < 18 else MISSING if t[0] == 18 else t[1]
        )

    return st.fixed_dictionaries({key: field(value) for key, value in template.items()}).map(
        lambda raw: {key: value for key, value in raw.items() if value is not MISSING}
    )


def as_text(value) -> str:
    return json.dumps(value)  # NaN/Infinity are written as the non-JSON literals Python reads back


def check_records(records: list[VideoRecord]) -> None:
    ids = [r.video_id for r in records]
    assert len(ids) == len(set(ids)), ids
    for record in records:
        for text in (record.video_id, record.path, record.split):
            assert isinstance(text, str) and text.strip()
        assert isinstance(record.duration, float) and math.isfinite(record.duration) and record.duration > 0
        assert record.events
        for event in record.events:
            assert (
                isinstance(event.description, str)
                and event.description
                and event.description == event.description.strip()
            )
            assert event.intervals
            for start, end in event.intervals:
                assert math.isfinite(start) and math.isfinite(end) and 0 <= start < end <= record.duration + 1e-3
        assert all(math.isfinite(c) and 0 <= c <= record.duration + 1e-3 for c in record.cuts)


def parses_or_refuses(load, source: Path) -> None:
    """`load()` returns valid records or raises an `AnnotationError` naming a file under `source`."""
    try:
        records = load()
    except AnnotationError as err:
        assert str(err).startswith(str(source)), str(err)
        return
    check_records(records)


def written(folder: str, name: str, content: bytes | str) -> Path:
    path = Path(folder) / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass"))
    return path


# -- canonical -------------------------------------------------------------------------------------

event_shapes = near(
    {"description": "a dog", "start": 0.0, "end": 5.0, "intervals": [[0.0, 5.0]], "theme": "x", "event_id": "e"}
)
with_events = st.builds(
    lambda events, base: {**base, "events": events}, st.lists(event_shapes, max_size=3), near(canonical_video())
)
canonical_videos = near({**canonical_video(), "cuts": [1.0]}) | with_events


@FUZZ
@given(content=st.binary(max_size=300) | json_values.map(as_text).map(str.encode), policy=policies)
def test_canonical_any_file(content, policy):
    with tempfile.TemporaryDirectory() as folder:
        path = written(folder, "ann.json", content)
        parses_or_refuses(lambda: load_annotations(path, RecordCollector(policy)), path)


@FUZZ
@given(videos=st.lists(canonical_videos, max_size=4), policy=policies)
def test_canonical_near_miss_records(videos, policy):
    with tempfile.TemporaryDirectory() as folder:
        path = written(
            folder, "ann.json", as_text({"format": "lit-retrieval/multi-event", "version": 1, "videos": videos})
        )
        parses_or_refuses(lambda: load_annotations(path, RecordCollector(policy)), path)


# -- MELON -------------------------------------------------------------------------------------------

melon_events = near({"Theme": "x", "Description": "a man", "Timestamp": "00:00 - 00:40"}) | st.builds(
    lambda stamp: {"Description": "a man", "Timestamp": stamp},
    st.text(alphabet="0123456789:.-,; to", max_size=16) | json_values,
)
melon_records = st.builds(
    lambda base, events: {**base, "events": events}, near(melon_record()), st.lists(melon_events, max_size=3)
)


@FUZZ
@given(content=st.binary(max_size=300) | json_values.map(as_text).map(str.encode), policy=policies)
def test_melon_any_file(content, policy):
    with tempfile.TemporaryDirectory() as folder:
        path = written(folder, "melon.json", content)
        parses_or_refuses(lambda: MelonParser().load(path, None, RecordCollector(policy)), path)


@FUZZ
@given(
    records=st.lists(melon_records, max_size=4) | st.dictionaries(st.text(max_size=5), melon_records, max_size=3),
    policy=policies,
)
def test_melon_near_miss_records(records, policy):
    with tempfile.TemporaryDirectory() as folder:
        path = written(folder, "melon.json", as_text(records))
        parses_or_refuses(lambda: MelonParser().load(path, None, RecordCollector(policy)), path)


# -- ActivityNet -------------------------------------------------------------------------------------


@FUZZ
@given(
    content=st.binary(max_size=300)
    | json_values.map(as_text).map(str.encode)
    | st.dictionaries(st.text(max_size=6), near(activitynet_video()), max_size=4).map(as_text).map(str.encode),
    policy=policies,
    fix=st.booleans(),
)
def test_activitynet_any_file(content, policy, fix):
    with tempfile.TemporaryDirectory() as folder:
        path = written(folder, "train.json", content)
        parses_or_refuses(
            lambda: ActivityNetParser(folder, fix_timestamps=fix).load(path, "train", RecordCollector(policy)), path
        )


# -- DiDeMo --------------------------------------------------------------------------------------------


@FUZZ
@given(
    content=st.binary(max_size=300)
    | json_values.map(as_text).map(str.encode)
    | st.lists(near(didemo_moment()), max_size=5).map(as_text).map(str.encode),
    policy=policies,
)
def test_didemo_any_file(content, policy):
    with tempfile.TemporaryDirectory() as folder:
        path = written(folder, "train_data.json", content)
        parses_or_refuses(lambda: DiDeMoParser().load(path, "train", RecordCollector(policy)), path)


# -- Condensed Movies (CSV) -------------------------------------------------------------------------------

cells = st.text(max_size=6) | st.sampled_from(["c1", "tt1", "inf", "nan", "-3", "0", "2011.0", "train", ""])
csv_rows = st.lists(st.lists(cells, max_size=4), max_size=5)


def csv_text(rows: list[list[str]]) -> str:
    out = io.StringIO()
    csv.writer(out).writerows(rows)
    return out.getvalue()


@FUZZ
@given(
    table=st.sampled_from(sorted(CMD_TABLES)),
    content=st.binary(max_size=200)
    | csv_rows.map(csv_text).map(str.encode)
    | csv_rows.map(
        lambda rows: csv_text([["videoid", "upload_year", "imdbid", "duration", "split", "description"], *rows])
    ).map(str.encode),
    policy=policies,
)
def test_condensed_movies_any_table(table, content, policy):
    with tempfile.TemporaryDirectory() as folder:
        for name, rows in CMD_TABLES.items():
            written(folder, name, csv_text(rows))
        written(folder, table, content)
        parses_or_refuses(
            lambda: CondensedMoviesParser(folder, require_video=False).load(folder, RecordCollector(policy)),
            Path(folder),
        )


# -- MSR-VTT -------------------------------------------------------------------------------------------------

msrvtt_videos = st.lists(near({"video_id": "video0", "start time": 1.0, "end time": 11.0}), max_size=4)
msrvtt_sentences = st.lists(near({"video_id": "video0", "caption": "a cat"}), max_size=4)


@FUZZ
@given(
    data=json_values | st.builds(msrvtt_data, msrvtt_videos, msrvtt_sentences) | st.builds(msrvtt_data),
    test=st.binary(max_size=120)
    | csv_rows.map(lambda rows: csv_text([["key", "vid_key", "video_id", "sentence"], *rows])).map(str.encode),
    policy=policies,
)
def test_msrvtt_any_files(data, test, policy):
    with tempfile.TemporaryDirectory() as folder:
        written(folder, "MSRVTT_data.json", as_text(data))
        written(folder, "MSRVTT_train.9k.csv", csv_text([["video_id"], ["video0"], ["video1"]]))
        written(folder, "MSRVTT_JSFUSION_test.csv", test)
        parser = MSRVTTParser(val_fraction=0.0)
        files = ("MSRVTT_data.json", "MSRVTT_train.9k.csv", "MSRVTT_JSFUSION_test.csv")
        parses_or_refuses(partial(parser.load, folder, *files, RecordCollector(policy)), Path(folder))


# -- GVE task files (JSONL) ----------------------------------------------------------------------------------

task_items = json_values | near({"text": "a dog", "video": "a.mp4", "start": 1.0, "end": 2.0})
task_lines = st.lists(
    json_values
    | near({"id": "q", "query": "a dog", "positive": {"video": "a.mp4"}, "negatives": [{"video": "b.mp4"}]})
    | st.builds(lambda q, p: {"query": q, "positive": p}, task_items, task_items),
    max_size=4,
)


@FUZZ
@given(
    content=st.binary(max_size=300) | task_lines.map(lambda lines: "\n".join(as_text(x) for x in lines).encode()),
    policy=policies,
)
def test_gve_task_any_file(content, policy):
    with tempfile.TemporaryDirectory() as folder:
        path = written(folder, "task.jsonl", content)
        try:
            records = read_task(TaskSpec("t", str(path), "T->V"), on_bad_record=policy)
        except AnnotationError as err:
            assert str(err).startswith(str(path)), str(err)
            return
        assert records and all(
            isinstance(r, TaskRecord) and r.query.text is not None and r.positive.video is not None for r in records
        )
        assert all(isinstance(r.record_id, str) and r.record_id for r in records)


# -- UVRB retrieval tasks (corpus / queries / qrels JSONL) ---------------------------------------------------

uvrb_lines = st.lists(
    json_values
    | near({"id": "v1", "text": "a dog", "video": "v1.mp4"})
    | near({"query_id": "q1", "corpus_id": "v1", "score": 1}),
    max_size=4,
)


@FUZZ
@given(
    which=st.sampled_from(["corpus.jsonl", "queries.jsonl", "qrels.jsonl"]),
    content=st.binary(max_size=200) | uvrb_lines.map(lambda lines: "\n".join(as_text(x) for x in lines).encode()),
)
def test_uvrb_task_any_file(which, content):
    with tempfile.TemporaryDirectory() as folder:
        written(folder, "corpus.jsonl", as_text({"id": "v1", "video": "v1.mp4"}))
        written(folder, "queries.jsonl", as_text({"id": "q1", "text": "a dog"}))
        written(folder, "qrels.jsonl", as_text({"query_id": "q1", "corpus_id": "v1", "score": 1}))
        written(folder, which, content)
        try:
            data = load_retrieval_task(RetrievalTaskSpec("fuzz", folder))
        except AnnotationError as err:
            assert str(err).startswith(folder), str(err)
            return
        assert len(set(data.query_ids)) == len(data.query_ids) and len(set(data.corpus_ids)) == len(data.corpus_ids)
        assert all(rel and all(0 <= i < len(data.corpus) for i in rel) for rel in data.relevant)


# -- files read back: frame cache (cache.json, index lines) and index folders (meta.json, videos.json) -------


def refused_in_one_line(err: Exception, *folders: str) -> None:
    """`err` is what `lit-retrieval` prints as one line naming a file under one of `folders`."""
    line = input_error_line(err)
    assert isinstance(err, InputError) and line is not None, repr(err)
    assert "\n" not in line and line.startswith(folders), line


CACHE_PARAMS = {"consumer": "video-text", "num_frames": 2, "size": 4}
RAW_HEADER = {"version": 1, "format": "raw", "quality": None, "sampling": CACHE_PARAMS}
cache_headers = (
    near(RAW_HEADER)
    | near({**RAW_HEADER, "format": "jpeg", "quality": 90})
    | st.builds(lambda sampling: {**RAW_HEADER, "sampling": sampling}, near(CACHE_PARAMS))
)


@FUZZ
@given(
    content=st.binary(max_size=200)
    | json_values.map(as_text).map(str.encode)
    | cache_headers.map(as_text).map(str.encode)
)
def test_frame_cache_header_any_file(content):
    with tempfile.TemporaryDirectory() as folder:
        written(folder, "cache.json", content)
        try:
            header = read_header(Path(folder))
            check_params(Path(folder), header, CACHE_PARAMS)
        except Exception as err:  # noqa: BLE001 - anything but an InputError fails the property
            refused_in_one_line(err, folder)
            return
        assert header["version"] == 1 and header["sampling"] == CACHE_PARAMS
        assert (header["format"], header["quality"]) == ("raw", None) or (
            header["format"] == "jpeg" and 1 <= header["quality"] <= 100
        )


FRAME_BYTES = bytes(range(200))
CACHE_ENTRY = {
    "video": "/nowhere/v.mp4",
    "start": None,
    "end": 2.0,
    "size": 10,
    "mtime_ns": 5,
    "offset": 8,
    "lengths": [96],
    "shape": [2, 4, 4, 3],
    "times": [0.5, None],
    "mask": [True, False],
    "sampled_fps": 1.0,
}
cache_entries = (
    st.just(CACHE_ENTRY)
    | near(CACHE_ENTRY)
    | near({"video": "/nowhere/w.mp4", "start": 1.0, "end": None, "size": 3, "mtime_ns": 4, "error": "undecodable"})
)


@FUZZ
@given(
    frame_format=st.sampled_from(["raw", "jpeg"]),
    lines=st.lists(
        st.one_of(cache_entries, cache_entries, json_values).map(as_text) | st.text(max_size=20), max_size=3
    ),
)
def test_frame_cache_any_index_lines(frame_format, lines):
    with tempfile.TemporaryDirectory() as folder:
        quality = 90 if frame_format == "jpeg" else None
        header = {"version": 1, "format": frame_format, "quality": quality, "sampling": CACHE_PARAMS}
        written(folder, "cache.json", as_text(header))
        written(folder, "shard-00000-of-00001.index.jsonl", "".join(line.replace("\n", " ") + "\n" for line in lines))
        written(folder, "shard-00000-of-00001.frames", FRAME_BYTES)
        try:
            cache = FrameCache(folder, CACHE_PARAMS)
            entries = [json.loads(line) for line in lines]  # every line loaded is an entry
            for entry in entries:
                sample = cache.get(entry["video"], entry["start"], entry["end"])
                assert "error" not in entry and sample is not None
                frames = np.frombuffer(FRAME_BYTES[entry["offset"] : entry["offset"] + 96], np.uint8)
                assert np.array_equal(sample.frames.reshape(-1), frames) or frame_format == "jpeg"
                assert sample.frames.shape == tuple(entry["shape"]) and len(sample.times) == entry["shape"][0]
        except Exception as err:  # noqa: BLE001 - a cached decode error names its video (under /nowhere)
            refused_in_one_line(err, folder, "/nowhere/")


MODEL = {"model": "/models/m", "config": None, "ckpt": None, "device": "cpu", "sampling": "exact"}
META = {"fingerprint": "abc", "model": MODEL, "dim": 4, "count": 3, "settings": {"kind": "flat"}}
metas = near(META) | near(META) | st.builds(lambda model: {**META, "model": model}, near(MODEL))
THREE = ["/v/a.mp4", "/v/b.mp4", "/v/c.mp4"]
video_lists = st.sampled_from([THREE, THREE[:2], [*THREE, "/v/d.mp4"], [], ["", *THREE[1:]]]) | st.lists(
    st.sampled_from(THREE) | st.text(max_size=5), max_size=5
)


@FUZZ
@given(
    meta=st.one_of(metas, metas, json_values).map(as_text).map(str.encode) | st.binary(max_size=100),
    videos=st.one_of(video_lists, video_lists, json_values).map(as_text).map(str.encode) | st.binary(max_size=60),
)
def test_index_folder_any_meta_and_videos(meta, videos):
    with tempfile.TemporaryDirectory() as folder:
        index = faiss.IndexFlatIP(4)
        index.add(np.eye(4, dtype=np.float32)[:3])
        faiss.write_index(index, str(Path(folder) / "index.faiss"))
        written(folder, "meta.json", meta)
        written(folder, "videos.json", videos)
        try:
            loaded = VideoIndex.load(folder)
        except Exception as err:  # noqa: BLE001
            refused_in_one_line(err, folder)
            return
        assert len(loaded.videos) == loaded.index.ntotal == 3 and all(isinstance(v, str) and v for v in loaded.videos)
        assert isinstance(loaded.meta["fingerprint"], str) and loaded.meta["fingerprint"]
        assert loaded.index.d == loaded.meta["dim"] == 4
        ModelSpec(**loaded.meta["model"])
