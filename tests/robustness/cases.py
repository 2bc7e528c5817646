"""The table of bad inputs, per entry point. Each case builds its files under a fresh folder and
returns the command line and what the one-line error must name: the path and the reason.

Entry points: `fit` with each data module (media, every annotation format, configs, checkpoints,
a frame cache), `cache-frames`, `metrics`, `uvrb report`, `index`, `search`, `serve` and `shots`.
The expected reasons are written from each format's layout (the parser modules' docstrings), not
read back from the error messages.
"""

from __future__ import annotations

import io
import json
import pickle
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import torch

from helpers.media import write_noise_video

from .files import (
    CHARADES_HEADER,
    DIDEMO_SPLITS,
    LSMDC_TEST_CLIP,
    MSVD_CAPTIONS,
    VATEX_LISTS,
    activitynet_dir,
    activitynet_video,
    cached_corpus,
    charades_dir,
    charades_row,
    canonical_file,
    canonical_video,
    cmd_dir,
    didemo_dir,
    dual_encoder,
    didemo_moment,
    fit_config,
    index_dir,
    lsmdc_dir,
    lsmdc_line,
    melon_record,
    msrvtt_data,
    msrvtt_dir,
    msvd_dir,
    vatex_clip,
    vatex_dir,
    youcook2_file,
    youcook2_video,
)


@dataclass(frozen=True)
class Expect:
    argv: list[str]
    path: str  # must appear in the error line
    reason: str  # must appear in the error line (case-insensitive)


@dataclass(frozen=True)
class Case:
    entry: str  # the entry point the case belongs to (report key)
    name: str
    build: Callable[[Path], Expect]
    subprocess: bool = False  # also run as a real `lit-retrieval` process

    @property
    def id(self) -> str:
        return f"{self.entry}:{self.name}"


def error_line(stderr: str, command: str) -> str:
    """The one contract line of `stderr`: the only line starting with `lit-retrieval`, and the last
    one (library log lines such as Lightning's "Seed set to 0" may come before it)."""
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.startswith("lit-retrieval")]
    assert len(lines) == 1, stderr[-3000:]
    assert stderr.rstrip("\n").splitlines()[-1] == lines[0], stderr[-3000:]
    assert lines[0].startswith(f"lit-retrieval {command}: "), lines[0]
    return lines[0]


def check(line: str, path: str, reason: str) -> None:
    assert path in line, f"{path!r} not named in: {line}"
    assert reason.lower() in line.lower(), f"{reason!r} not in: {line}"


CASES: list[Case] = []


def case(entry: str, name: str, subprocess: bool = False):
    def register(build: Callable[[Path], Expect]) -> Callable[[Path], Expect]:
        CASES.append(Case(entry, name, build, subprocess))
        return build

    return register


def fit(tmp: Path, data_class: str, init_args: dict, *extra: str, model: dict | None = None, **trainer) -> list[str]:
    return ["fit", "--config", str(fit_config(tmp / "fit.yaml", data_class, init_args, model, **trainer)), *extra]


_CLIP: list[str] = []


def shared_clip() -> str:
    """A tiny CLIP (random weights, 32 px frames, `save_pretrained`) shared by this process's cases."""
    if not _CLIP:
        from lit_retrieval.models.encoders.tiny import save_tiny_clip

        _CLIP.append(str(save_tiny_clip(Path(tempfile.mkdtemp(prefix="robustness-clip-")), seed=0)))
    return _CLIP[0]


def video_corpus(root: Path) -> dict:
    """Three real 2 s videos (v1, v2 for training, v3 for testing) and their annotation under
    `root`; the data module's init args for them (2 frames of 32 px, batches of 2)."""
    events = [{"description": "a dog runs", "start": 0, "end": 1}]
    splits = {"v1": "train", "v2": "train", "v3": "test"}
    videos = [canonical_video(name, split, duration=2.0, events=events) for name, split in splits.items()]
    for seed, name in enumerate(splits):
        write_noise_video(root / f"{name}.mp4", 2.0, seed=seed)
    annotation = canonical_file(root / "ann.json", videos=videos)
    return {"annotation": str(annotation), "num_frames": 2, "image_size": 32, "batch_size": 2}


# -- canonical multi-event annotations (MultiEventDataModule) ------------------------------------


def canonical_case(name: str, reason: str, subprocess: bool = False, **file_args):
    def build(tmp: Path) -> Expect:
        path = canonical_file(tmp / "ann.json", **file_args)
        return Expect(fit(tmp, "MultiEventDataModule", {"annotation": str(path)}), str(path), reason)

    CASES.append(Case("annotations/canonical", name, build, subprocess))


def raw_file_case(
    entry: str, name: str, content: bytes, reason: str, data_class: str, file_name: str, key: str, **init
):
    """A case whose whole annotation file is `content` (bytes as they are on disk)."""

    def build(tmp: Path) -> Expect:
        folder = tmp / "ann"
        folder.mkdir()
        path = folder / file_name
        path.write_bytes(content)
        target = str(path) if key == "annotation" else str(folder)
        return Expect(fit(tmp, data_class, {key: target, **init}), str(path), reason)

    CASES.append(Case(entry, name, build))


NOT_UTF8 = '{"videos": ["caf\u00e9"]}'.encode("latin-1")
GOOD_CANONICAL = json.dumps({"format": "lit-retrieval/multi-event", "version": 1, "videos": [canonical_video()]})

raw_file_case(
    "annotations/canonical", "not UTF-8", NOT_UTF8, "not UTF-8", "MultiEventDataModule", "ann.json", "annotation"
)
raw_file_case(
    "annotations/canonical",
    "truncated JSON",
    GOOD_CANONICAL[:40].encode(),
    "not valid JSON",
    "MultiEventDataModule",
    "ann.json",
    "annotation",
)
raw_file_case(
    "annotations/canonical",
    "duplicate key",
    GOOD_CANONICAL.replace('"version": 1', '"version": 1, "version": 1').encode(),
    "duplicate key 'version'",
    "MultiEventDataModule",
    "ann.json",
    "annotation",
)
raw_file_case(
    "annotations/canonical",
    "NaN literal",
    GOOD_CANONICAL.replace('"duration": 10.0', '"duration": NaN').encode(),
    "NaN",
    "MultiEventDataModule",
    "ann.json",
    "annotation",
)
raw_file_case(
    "annotations/canonical",
    "duration 1e400 (infinite)",
    GOOD_CANONICAL.replace('"duration": 10.0', '"duration": 1e400').encode(),
    "finite",
    "MultiEventDataModule",
    "ann.json",
    "annotation",
)


@case("annotations/canonical", "missing file")
def _(tmp: Path) -> Expect:
    return Expect(
        fit(tmp, "MultiEventDataModule", {"annotation": str(tmp / "absent.json")}),
        str(tmp / "absent.json"),
        "annotation file not found",
    )


canonical_case("not the format", "multi-event", format="something-else")
canonical_case("videos not a list", "'videos' must be a list", videos={"v1": canonical_video()})
canonical_case("video not an object", "must be a JSON object", videos=["v1"])
canonical_case(
    "missing field",
    "missing field 'duration'",
    videos=[{k: v for k, v in canonical_video().items() if k != "duration"}],
)
canonical_case("duration zero", "duration must be positive", videos=[canonical_video(duration=0)])
canonical_case("duration negative", "duration must be positive", videos=[canonical_video(duration=-3.0)])
canonical_case("duration a string", "duration must be a finite number", videos=[canonical_video(duration="10")])
canonical_case(
    "end before start",
    "0 <= start < end",
    videos=[canonical_video(events=[{"description": "x", "start": 5.0, "end": 2.0}])],
)
canonical_case(
    "end equals start",
    "0 <= start < end",
    videos=[canonical_video(events=[{"description": "x", "start": 5.0, "end": 5.0}])],
)
canonical_case(
    "interval past the end",
    "past the duration",
    videos=[canonical_video(events=[{"description": "x", "start": 0.0, "end": 11.0}])],
)
canonical_case("cuts a number", "'cuts' must be a list", videos=[canonical_video(cuts=3)])
canonical_case("cut outside the video", "cut times must lie in", videos=[canonical_video(cuts=[12.0])])
canonical_case(
    "duplicate video_id", "duplicate video_id", videos=[canonical_video("v1"), canonical_video("v1", "test")]
)
canonical_case(
    "empty description", "description", videos=[canonical_video(events=[{"description": " ", "start": 0, "end": 1}])]
)
canonical_case("path not a string", "'path' must be a non-empty string", videos=[canonical_video(path=["v1.mp4"])])
canonical_case("split not a string", "'split' must be a non-empty string", videos=[canonical_video(split=1)])
canonical_case("events empty", "'events' must be a non-empty list", videos=[canonical_video(events=[])])
canonical_case(
    "theme a list",
    "'theme' must be a string",
    videos=[canonical_video(events=[{"description": "x", "start": 0, "end": 1, "theme": ["a"]}])],
)
canonical_case(
    "intervals a number",
    "'intervals' must be a non-empty list",
    videos=[canonical_video(events=[{"description": "x", "intervals": 4}])],
)
canonical_case(
    "video in train and test",
    "also in the training split",
    videos=[canonical_video("v1"), canonical_video("v2", "test", path="v1.mp4")],
)

# -- media (MultiEventDataModule, on_bad_video: raise) -------------------------------------------


def media_case(name: str, write: Callable[[Path], None], reason: str, subprocess: bool = False, **init):
    def build(tmp: Path) -> Expect:
        write(tmp / "v1.mp4")
        events = [{"description": "x", "start": 0, "end": 1}]
        videos = [
            canonical_video("v1", duration=2.0, events=events),
            canonical_video("v2", "test", duration=2.0, events=events),
        ]
        path = canonical_file(tmp / "ann.json", videos=videos)
        init_args = {"annotation": str(path), "num_frames": 2, "image_size": 16, "batch_size": 1, **init}
        return Expect(fit(tmp, "MultiEventDataModule", init_args), str(tmp / "v1.mp4"), reason)

    CASES.append(Case("media", name, build, subprocess))


def truncated(path: Path) -> None:
    write_noise_video(path, 2.0)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


media_case("garbage bytes", lambda p: p.write_bytes(b"\x00not a video" * 64), "undecodable", subprocess=True)
media_case("empty file", lambda p: p.write_bytes(b""), "empty")
media_case("missing file", lambda p: None, "not found")
media_case("a text file", lambda p: p.write_text("hello\n" * 50), "undecodable")
media_case("truncated mp4", truncated, "v1.mp4")
media_case(
    "garbage bytes, in a DataLoader worker",
    lambda p: p.write_bytes(b"\x00not a video" * 64),
    "undecodable",
    num_workers=1,
)

# -- MELON ---------------------------------------------------------------------------------------


def melon_case(name: str, data, reason: str, **init):
    def build(tmp: Path) -> Expect:
        path = tmp / "melon.json"
        path.write_text(json.dumps(data))
        return Expect(
            fit(tmp, "MELONDataModule", {"annotation": str(path), "probe_durations": False, **init}), str(path), reason
        )

    CASES.append(Case("annotations/melon", name, build))


raw_file_case(
    "annotations/melon",
    "not UTF-8",
    NOT_UTF8,
    "not UTF-8",
    "MELONDataModule",
    "melon.json",
    "annotation",
    probe_durations=False,
)
melon_case("a JSON string", "videos", "expected a list of videos or an object")
melon_case("record not an object", [3], "must be an object or a list of events")
melon_case(
    "unreadable timestamp", [melon_record(events=[{"Description": "x", "Timestamp": "soon"}])], "bad 'timestamp'"
)
melon_case(
    "end before start", [melon_record(events=[{"Description": "x", "Timestamp": "01:00 - 00:30"}])], "0 <= start < end"
)
melon_case("infinite clock duration", [melon_record(duration="9" * 400)], "positive and finite")
melon_case(
    "no duration, no probing",
    [{k: v for k, v in melon_record().items() if k != "duration"}],
    "missing field 'duration'",
)
melon_case("duplicate video ids", [melon_record("a"), melon_record("a", "test")], "duplicate video_id")
melon_case("missing split", [{k: v for k, v in melon_record().items() if k != "split"}], "missing field 'split'")
melon_case("video id a list", [melon_record(video_id=["a"])], "must be a non-empty string")
melon_case("event not an object", [melon_record(events=["x"])], "an event must be an object")

# -- ActivityNet Captions ------------------------------------------------------------------------


def activitynet_case(name: str, reason: str, file: str = "train.json", **files):
    def build(tmp: Path) -> Expect:
        root = activitynet_dir(tmp / "anet", **files)
        return Expect(fit(tmp, "ActivityNetDataModule", {"annotation_dir": str(root)}), str(root / file), reason)

    CASES.append(Case("annotations/activitynet", name, build))


def activitynet_raw(name: str, content: bytes, reason: str):
    def build(tmp: Path) -> Expect:
        root = activitynet_dir(tmp / "anet")
        (root / "train.json").write_bytes(content)
        return Expect(
            fit(tmp, "ActivityNetDataModule", {"annotation_dir": str(root)}), str(root / "train.json"), reason
        )

    CASES.append(Case("annotations/activitynet", name, build))


activitynet_raw("not UTF-8", NOT_UTF8, "not UTF-8")
activitynet_raw(
    "duplicate video key",
    b'{"v_a": '
    + json.dumps(activitynet_video()).encode()
    + b', "v_a": '
    + json.dumps(activitynet_video()).encode()
    + b"}",
    "duplicate key 'v_a'",
)
activitynet_case("not an object", "expected an object keyed by video id", train=[activitynet_video()])
activitynet_case("record not an object", "must be an object", train={"v_a": 5})
activitynet_case(
    "more sentences than timestamps",
    "3 sentences but 2 timestamps",
    train={"v_a": activitynet_video(sentences=["a", "b", "c"])},
)
activitynet_case(
    "timestamp not a pair", "is not [start, end]", train={"v_a": activitynet_video(timestamps=[[0.0], [1.0, 2.0]])}
)
activitynet_case("duration zero", "duration must be positive", train={"v_a": activitynet_video(duration=0)})
activitynet_case("duration a string", "finite number", train={"v_a": activitynet_video(duration="30")})
activitynet_case(
    "end before start", "0 <= start < end", train={"v_a": activitynet_video(timestamps=[[5.0, 1.0], [10.0, 30.0]])}
)
activitynet_case("empty video id", "empty video id", train={"": activitynet_video()})
activitynet_case("video in train and test", "also in the training split", file="", test={"v_a": activitynet_video()})

# -- DiDeMo ----------------------------------------------------------------------------------------


def didemo_case(name: str, reason: str, file: str = "train_data.json", **files):
    def build(tmp: Path) -> Expect:
        root = didemo_dir(tmp / "didemo", **files)
        return Expect(
            fit(tmp, "DiDeMoDataModule", {"annotation_dir": str(root), "split_files": DIDEMO_SPLITS}),
            str(root / file),
            reason,
        )

    CASES.append(Case("annotations/didemo", name, build))


didemo_case("not a list", "expected a list of moment annotations", train={"a": didemo_moment()})
didemo_case("moment not an object", "an annotation must be an object", train=["x"])
didemo_case("chunks not integers", "(integers)", train=[didemo_moment(times=[[0.5, 1]])])
didemo_case("chunk past the video", "past the video's 6 segments", train=[didemo_moment(times=[[0, 6]])])
didemo_case("end chunk before start", "0 <= start <= end", train=[didemo_moment(times=[[3, 1]])])
didemo_case(
    "num_segments a boolean", "num_segments must be a positive integer", train=[didemo_moment(num_segments=True)]
)
didemo_case("duplicate annotation_id", "duplicate annotation_id", train=[didemo_moment(1), didemo_moment(1, "c.mp4")])
didemo_case("video in train and test", "also in the training split", file="", test=[didemo_moment(2, "a.mp4")])

# -- Condensed Movies --------------------------------------------------------------------------------


def cmd_case(name: str, file: str, reason: str, **tables):
    def build(tmp: Path) -> Expect:
        root = cmd_dir(tmp / "cmd", **tables)
        return Expect(
            fit(
                tmp, "CondensedMoviesDataModule", {"metadata_dir": str(root), "require_video": False, "val_split": None}
            ),
            str(root / file),
            reason,
        )

    CASES.append(Case("annotations/condensed_movies", name, build))


def cmd_raw(name: str, file: str, content: bytes, reason: str):
    def build(tmp: Path) -> Expect:
        root = cmd_dir(tmp / "cmd")
        (root / file).write_bytes(content)
        return Expect(
            fit(
                tmp, "CondensedMoviesDataModule", {"metadata_dir": str(root), "require_video": False, "val_split": None}
            ),
            str(root / file),
            reason,
        )

    CASES.append(Case("annotations/condensed_movies", name, build))


cmd_raw(
    "not UTF-8", "descriptions.csv", "imdbid,videoid,description\ntt1,c1,caf\u00e9\n".encode("latin-1"), "not UTF-8"
)
cmd_case("short row", "durations.csv", "fewer fields", durations=[["videoid", "duration"], ["c1"]])
cmd_case("long row", "split.csv", "more fields", split=[["imdbid", "split"], ["tt1", "train", "extra"]])
cmd_case(
    "missing column", "durations.csv", "missing column(s) ['duration']", durations=[["videoid", "length"], ["c1", "3"]]
)
cmd_case(
    "infinite duration",
    "descriptions.csv",
    "positive and finite",
    durations=[["videoid", "duration"], ["c1", "inf"], ["c2", "98"]],
)
cmd_case(
    "NaN duration",
    "descriptions.csv",
    "positive and finite",
    durations=[["videoid", "duration"], ["c1", "nan"], ["c2", "98"]],
)
cmd_case(
    "clip listed twice, differently",
    "clips.csv",
    "repeated videoid",
    clips=[
        ["videoid", "upload_year", "imdbid"],
        ["c1", "2011.0", "tt1"],
        ["c1", "2013.0", "tt1"],
        ["c2", "2012.0", "tt2"],
    ],
)

# -- MSR-VTT -------------------------------------------------------------------------------------------


def msrvtt_case(name: str, file: str, reason: str, **files):
    def build(tmp: Path) -> Expect:
        root = msrvtt_dir(tmp / "msrvtt", **files)
        return Expect(
            fit(tmp, "MSRVTTDataModule", {"annotation_dir": str(root), "val_fraction": 0.0, "val_split": None}),
            str(root / file),
            reason,
        )

    CASES.append(Case("annotations/msrvtt", name, build))


TEST_HEADER = ["key", "vid_key", "video_id", "sentence"]
msrvtt_case(
    "duplicate test rows",
    "MSRVTT_JSFUSION_test.csv",
    "listed again",
    test=[TEST_HEADER, ["ret0", "msr3", "video3", "a cat"], ["ret1", "msr3", "video3", "a cat"]],
)
msrvtt_case(
    "end time before start time",
    "MSRVTT_data.json",
    "need 0 <= start < end",
    data=msrvtt_data(videos=[{"video_id": "video0", "start time": 5.0, "end time": 2.0}]),
)
msrvtt_case(
    "video entry not an object",
    "MSRVTT_data.json",
    "a video entry must be an object",
    data=msrvtt_data(videos=["video0"]),
)
msrvtt_case(
    "sentence entry not an object",
    "MSRVTT_data.json",
    "a sentence entry must be an object",
    data=msrvtt_data(sentences=[7]),
)
msrvtt_case(
    "videos not a list", "MSRVTT_data.json", "'videos' and 'sentences' lists", data={"videos": {}, "sentences": []}
)
msrvtt_case("short test row", "MSRVTT_JSFUSION_test.csv", "fewer fields", test=[TEST_HEADER, ["ret0", "msr3"]])
msrvtt_case(
    "duplicate video_id in the data file",
    "MSRVTT_data.json",
    "duplicate video_id",
    data=msrvtt_data(videos=[{"video_id": "video0", "start time": 0.0, "end time": 2.0}] * 2),
)
msrvtt_case(
    "video in train and test", "", "also in the training split", test=[TEST_HEADER, ["ret0", "msr0", "video0", "a cat"]]
)

# -- folder-of-release-files datasets: MSVD, VATEX, LSMDC, Charades ----------------------------------


def folder_case(
    entry: str, name: str, data_class: str, write: Callable[[Path], Path], file: str, reason: str, **init
) -> None:
    """A case on the release folder `write(root)` leaves (a valid one, broken one way), read by
    `data_class` with `annotation_dir` and `init`; the error names `root / file` (`""`: the folder)."""

    def build(tmp: Path) -> Expect:
        root = write(tmp / "release")
        return Expect(fit(tmp, data_class, {"annotation_dir": str(root), **init}), str(root / file), reason)

    CASES.append(Case(entry, name, build))


def without(write: Callable[[Path], Path], file: str) -> Callable[[Path], Path]:
    """`write`, then the release file `file` removed."""

    def broken(root: Path) -> Path:
        write(root)
        (root / file).unlink()
        return root

    return broken


def replaced(write: Callable[[Path], Path], file: str, content: bytes) -> Callable[[Path], Path]:
    """`write`, then the bytes of release file `file` replaced by `content`."""

    def broken(root: Path) -> Path:
        write(root)
        (root / file).write_bytes(content)
        return root

    return broken


# -- MSVD: raw-captions.pkl {clip: [token lists]}, {split}_list.txt (one clip name a line) ----------


def msvd_case(name: str, file: str, reason: str, write: Callable[[Path], Path] | None = None, **files):
    folder_case(
        "annotations/msvd",
        name,
        "datasets.msvd.MSVDDataModule",
        write or (lambda root: msvd_dir(root, **files)),
        file,
        reason,
        val_split=None,
    )


MSVD_CLIP = "-4wsuPCjDBc_5_15"
msvd_case(
    "missing caption pickle", "raw-captions.pkl", "annotation file not found", without(msvd_dir, "raw-captions.pkl")
)
msvd_case(
    "truncated pickle",
    "raw-captions.pkl",
    "not a pickle",
    replaced(msvd_dir, "raw-captions.pkl", pickle.dumps(MSVD_CAPTIONS)[:30]),
)
msvd_case(
    "pickle naming a class (nothing is run)",
    "raw-captions.pkl",
    "only dicts, lists and strings",
    captions={MSVD_CLIP: [PurePosixPath("a man is cooking")]},
)
msvd_case("captions a list, not a dict", "raw-captions.pkl", "dict", captions=list(MSVD_CAPTIONS.values()))
msvd_case("clip twice in a split file", "train_list.txt", "listed again", train=[MSVD_CLIP, "ab_cd_0_10", MSVD_CLIP])
msvd_case("clip name without start and end", "train_list.txt", "{youtube id}_{start}_{end}", train=["-4wsuPCjDBc"])
msvd_case(
    "clip ends before it starts",
    "train_list.txt",
    "start < end",
    captions={**MSVD_CAPTIONS, "ab_cd_10_0": [["a", "dog"]]},
    train=["ab_cd_10_0"],
)
msvd_case("listed clip without captions", "raw-captions.pkl", "no captions", train=[MSVD_CLIP, "new_clip_0_5"])
msvd_case("empty caption list", "raw-captions.pkl", "non-empty list", captions={**MSVD_CAPTIONS, MSVD_CLIP: []})
msvd_case(
    "caption of numbers",
    "raw-captions.pkl",
    "list of word strings or a string",
    captions={**MSVD_CAPTIONS, MSVD_CLIP: [["a", "man"], [3, 4]]},
)
msvd_case("clip in train and test", "", "also in the training split", test=["ab_cd_0_10"])

# -- VATEX: caption files [{videoID, enCap, chCap}], {split}_list.txt --------------------------------


def vatex_case(name: str, file: str, reason: str, write: Callable[[Path], Path] | None = None, **files):
    folder_case(
        "annotations/vatex",
        name,
        "datasets.vatex.VATEXDataModule",
        write or (lambda root: vatex_dir(root, **files)),
        file,
        reason,
        val_split=None,
    )


VATEX_TRAIN = VATEX_LISTS["train"][0]
VATEX_TRAINING = "vatex_training_v1.0.json"
vatex_case("missing split list", "test_list.txt", "annotation file not found", without(vatex_dir, "test_list.txt"))
vatex_case(
    "truncated caption file",
    VATEX_TRAINING,
    "not valid JSON",
    replaced(vatex_dir, VATEX_TRAINING, json.dumps([vatex_clip(VATEX_TRAIN)]).encode()[:50]),
)
vatex_case("caption file a string", VATEX_TRAINING, "expected a list of clips", training="clips")
vatex_case(
    "clip without videoID",
    VATEX_TRAINING,
    "videoID",
    training=[{k: v for k, v in vatex_clip(VATEX_TRAIN).items() if k != "videoID"}],
)
vatex_case(
    "videoID with five-digit seconds",
    "train_list.txt",
    "{start:06d}_{end:06d}",
    training=[vatex_clip("Ptf_2VRj-V0_00122_00132")],
    train=["Ptf_2VRj-V0_00122_00132"],
)
vatex_case(
    "clip captioned in both files",
    "vatex_validation_v1.0.json",
    "captions given again",
    validation=[vatex_clip(v) for v in [VATEX_TRAIN, *VATEX_LISTS["val"], *VATEX_LISTS["test"]]],
)
vatex_case("listed clip without captions", "test_list.txt", "no caption", test=["zzzzzzzzzzz_000000_000010"])
vatex_case(
    "enCap a string",
    VATEX_TRAINING,
    "'enCap' must be a non-empty list",
    training=[vatex_clip(VATEX_TRAIN, enCap="A man.")],
)
vatex_case(
    "empty English caption",
    VATEX_TRAINING,
    "non-empty string",
    training=[vatex_clip(VATEX_TRAIN, enCap=["A man plays.", " "])],
)
vatex_case("clip twice in a split file", "val_list.txt", "listed again", val=VATEX_LISTS["val"] * 2)
vatex_case("clip in train and test", "", "also in the training split", test=[VATEX_TRAIN])

# -- LSMDC: tab-separated CLIP_ID, START/END_ALIGNED, START/END_EXTRACTED, SENTENCE --------------------


def lsmdc_case(name: str, file: str, reason: str, write: Callable[[Path], Path] | None = None, **files):
    folder_case(
        "annotations/lsmdc",
        name,
        "datasets.lsmdc.LSMDCDataModule",
        write or (lambda root: lsmdc_dir(root, **files)),
        file,
        reason,
    )


LSMDC_TRAIN, LSMDC_TEST = "LSMDC16_annos_training.csv", "LSMDC16_challenge_1000_publictect.csv"
lsmdc_case("missing test file", LSMDC_TEST, "annotation file not found", without(lsmdc_dir, LSMDC_TEST))
lsmdc_case(
    "not UTF-8",
    LSMDC_TRAIN,
    "not UTF-8",
    replaced(lsmdc_dir, LSMDC_TRAIN, lsmdc_line(sentence="Café.").encode("latin-1")),
)
lsmdc_case("five fields", LSMDC_TRAIN, "6 tab-separated fields", train=[lsmdc_line().rsplit("\t", 1)[0]])
lsmdc_case("clip id without its span", LSMDC_TRAIN, "clip id", train=[lsmdc_line("0001_American_Beauty")])
lsmdc_case(
    "extracted time not HH.MM.SS.mmm", LSMDC_TRAIN, "HH.MM.SS.mmm", train=[lsmdc_line(extracted=("51.926", "54.530"))]
)
lsmdc_case(
    "clip id's seconds past 59",
    LSMDC_TRAIN,
    "not HH.MM.SS.mmm",
    train=[lsmdc_line("0001_American_Beauty_00.00.75.000-00.00.78.000", ("00.00.51.926", "00.00.54.530"))],
)
lsmdc_case(
    "extracted span ends before it starts",
    LSMDC_TRAIN,
    "at or before it starts",
    train=[lsmdc_line(extracted=("00.00.54.530", "00.00.51.926"))],
)
lsmdc_case("empty sentence", LSMDC_TRAIN, "empty sentence", train=[lsmdc_line(sentence=" ")])
lsmdc_case(
    "test clip listed twice",
    LSMDC_TEST,
    "listed again",
    test=[lsmdc_line(LSMDC_TEST_CLIP, ("00.10.01.625", "00.10.03.625"), s) for s in ("He smiles.", "He waves.")],
)
lsmdc_case("clip in train and test", "", "also in the training split", test=[lsmdc_line()])

# -- Charades: charades_sta_{train,test}.txt (VIDEO START END##SENTENCE), Charades_v1_*.csv lengths -----


def charades_case(name: str, file: str, reason: str, write: Callable[[Path], Path] | None = None, **files):
    folder_case(
        "annotations/charades",
        name,
        "datasets.charades.CharadesDataModule",
        write or (lambda root: charades_dir(root, **files)),
        file,
        reason,
    )


STA_TRAIN, CHARADES_TRAIN_CSV = "charades_sta_train.txt", "Charades_v1_train.csv"
charades_case(
    "missing length file",
    "Charades_v1_test.csv",
    "annotation file not found",
    without(charades_dir, "Charades_v1_test.csv"),
)
charades_case(
    "no ## before the sentence", STA_TRAIN, "VIDEO START END##SENTENCE", train=["ZZXQF 0.0 8.2 a person walks."]
)
charades_case("start not a number", STA_TRAIN, "not a number", train=["ZZXQF zero 8.2##a person walks."])
charades_case("start nan", STA_TRAIN, "not a finite number", train=["ZZXQF nan 8.2##a person walks."])
charades_case("end nan", STA_TRAIN, "not a finite number", train=["ZZXQF 0.0 nan##a person walks."])
charades_case("empty sentence", STA_TRAIN, "empty sentence", train=["ZZXQF 0.0 8.2##  "])
charades_case("video without a length", STA_TRAIN, "no length", train=["NEW01 0.0 8.2##a person walks."])
charades_case("end far past the length", STA_TRAIN, "past the duration", train=["ZZXQF 0.0 40.0##a person walks."])
charades_case("start past the length", STA_TRAIN, "past the video's length", train=["ZZXQF 31.5 32.0##a person walks."])
charades_case("end before start", STA_TRAIN, "0 <= start < end", train=["ZZXQF 8.2 1.0##a person walks."])
charades_case(
    "video listed twice in a length file",
    CHARADES_TRAIN_CSV,
    "listed again",
    train_lengths=[CHARADES_HEADER, charades_row("ZZXQF", "30.96"), charades_row("ZZXQF", "31.00")],
)
charades_case(
    "length not a number",
    CHARADES_TRAIN_CSV,
    "not a number",
    train_lengths=[CHARADES_HEADER, charades_row("ZZXQF", "thirty")],
)
charades_case(
    "short length row",
    CHARADES_TRAIN_CSV,
    "fewer fields",
    train_lengths=[CHARADES_HEADER, charades_row("ZZXQF", "1")[:5]],
)
charades_case("video in train and test", "", "also in the training split", test=["ZZXQF 0.0 3.0##a person walks."])

# -- YouCook2: youcookii_annotations_trainval.json {"database": {VIDEO: record}} --------------------------


def youcook2_case(name: str, reason: str, database=None, raw: bytes | None = None, missing: bool = False):
    def build(tmp: Path) -> Expect:
        path = youcook2_file(tmp / "youcookii_annotations_trainval.json", database)
        if raw is not None:
            path.write_bytes(raw)
        if missing:
            path.unlink()
        argv = fit(tmp, "datasets.youcook2.YouCook2DataModule", {"annotation": str(path)})
        return Expect(argv, str(path), reason)

    CASES.append(Case("annotations/youcook2", name, build))


YC_VIDEO = "GLd3aX16zBg"


def youcook2_segments(*segments: dict) -> dict:
    """A database of one training video with these annotations (and one validation video)."""
    return {
        YC_VIDEO: youcook2_video(YC_VIDEO, annotations=list(segments)),
        "xHr8X2Wpmno": youcook2_video("xHr8X2Wpmno", "validation"),
    }


def yc_segment(segment: tuple = (90, 102), k: Any = 0, sentence: Any = "spread margarine on the bread") -> dict:
    """One entry of a video's `annotations`."""
    return {"segment": list(segment), "id": k, "sentence": sentence}


YC_RECORD = json.dumps(youcook2_video(YC_VIDEO))


youcook2_case("missing file", "annotation file not found", missing=True)
youcook2_case("no database object", "{'database'", raw=json.dumps({YC_VIDEO: youcook2_video(YC_VIDEO)}).encode())
youcook2_case(
    "video named twice",
    f"duplicate key '{YC_VIDEO}'",
    raw=f'{{"database": {{"{YC_VIDEO}": {YC_RECORD}, "{YC_VIDEO}": {YC_RECORD}}}}}'.encode(),
)
youcook2_case("record not an object", "list 'annotations'", database={YC_VIDEO: [youcook2_video(YC_VIDEO)]})
youcook2_case("segment not a pair", "'segment' must be [start, end]", database=youcook2_segments(yc_segment((90,))))
youcook2_case("segment past the video", "past the duration", database=youcook2_segments(yc_segment((200, 250))))
youcook2_case("segment ends before it starts", "0 <= start < end", database=youcook2_segments(yc_segment((102, 90))))
youcook2_case("segment time a string", "finite number", database=youcook2_segments(yc_segment(("90", 102))))
youcook2_case(
    "segment id repeated", "listed again", database=youcook2_segments(yc_segment(k=3), yc_segment((110, 120), k=3))
)
youcook2_case(
    "empty sentence", "'sentence' must be a non-empty string", database=youcook2_segments(yc_segment(sentence=""))
)
youcook2_case("duration zero", "duration must be positive", database={YC_VIDEO: youcook2_video(YC_VIDEO, duration=0)})
youcook2_case("subset not a string", "'subset' must be one of", database={YC_VIDEO: youcook2_video(YC_VIDEO, subset=1)})

# -- configs ---------------------------------------------------------------------------------------------


def config_case(name: str, init_changes: dict, reason: str, subprocess: bool = False):
    def build(tmp: Path) -> Expect:
        annotation = canonical_file(tmp / "ann.json")
        argv = fit(tmp, "MultiEventDataModule", {"annotation": str(annotation), **init_changes})
        return Expect(argv, str(tmp / "fit.yaml"), reason)

    CASES.append(Case("configs", name, build, subprocess))


config_case("batch_size 0", {"batch_size": 0}, "data.batch_size must be an integer >= 1", subprocess=True)
config_case("image_size 0", {"image_size": 0}, "data.image_size must be an integer >= 1")
config_case("num_frames 0", {"num_frames": 0}, "data.num_frames must be an integer >= 1")
config_case("eval_batch_size 0", {"eval_batch_size": 0}, "data.eval_batch_size must be an integer >= 1")
config_case("num_workers -1", {"num_workers": -1}, "data.num_workers must be an integer >= 0")
config_case("min_events 0", {"min_events": 0}, "data.min_events must be an integer >= 1")
config_case("holdout_val 1.5", {"holdout_val": 1.5}, "holdout_val must lie in [0, 1)")
config_case("misspelled key", {"batchsize": 4}, "valid: batch_size")
config_case("on_bad_video unknown", {"on_bad_video": "ignore"}, "on_bad_video")


def gve_config_case(name: str, task_changes: dict, init_changes: dict, reason: str):
    def build(tmp: Path) -> Expect:
        task = {"name": "t2v", "path": str(tmp / "t2v.jsonl"), "format": "T->V", **task_changes}
        argv = fit(tmp, "MultiTaskDataModule", {"tasks": [task], **init_changes})
        return Expect(argv, str(tmp / "fit.yaml"), reason)

    CASES.append(Case("configs", name, build))


gve_config_case("GVE task batch_size 0", {"batch_size": 0}, {}, "batch_size >= 1")
gve_config_case("GVE eval_batch_size 0", {}, {"eval_batch_size": 0}, "data.eval_batch_size must be an integer >= 1")
gve_config_case("GVE task format unknown", {"format": "T->X"}, {}, "T->X")


@case("configs", "--trainer.max_epochs -5", subprocess=True)
def _(tmp: Path) -> Expect:
    argv = fit(tmp, "MultiEventDataModule", {"annotation": str(canonical_file(tmp / "ann.json"))})
    return Expect(
        [*argv, "--trainer.max_epochs", "-5"], str(tmp / "fit.yaml"), "trainer: `max_epochs` must be a non-negative"
    )


@case("configs", "ModelCheckpoint save_top_k -5")
def _(tmp: Path) -> Expect:
    argv = fit(tmp, "MultiEventDataModule", {"annotation": str(canonical_file(tmp / "ann.json"))})
    return Expect(
        [*argv, "--trainer.callbacks+=ModelCheckpoint", "--trainer.callbacks.save_top_k=-5"],
        str(tmp / "fit.yaml"),
        "trainer.callbacks (ModelCheckpoint): Invalid value for save_top_k=-5",
    )


@case("configs", "frames of 64 px for a 32 px vision tower")
def _(tmp: Path) -> Expect:
    init = {**video_corpus(tmp), "image_size": 64}
    return Expect(
        fit(tmp, "MultiEventDataModule", init, model=dual_encoder(shared_clip())),
        str(tmp / "fit.yaml"),
        "data.image_size: frames of 64x64 px, but the vision tower (model.encoder) expects 32x32",
    )


@case("configs", "config file missing")
def _(tmp: Path) -> Expect:
    return Expect(["fit", "--config", str(tmp / "nowhere.yaml")], str(tmp / "nowhere.yaml"), "nowhere.yaml")


@case("configs", "config not YAML")
def _(tmp: Path) -> Expect:
    (tmp / "bad.yaml").write_text("model: [unclosed\n")
    return Expect(["fit", "--config", str(tmp / "bad.yaml")], str(tmp / "bad.yaml"), "bad.yaml")


# -- checkpoints (fit --ckpt_path; index --ckpt) -----------------------------------------------------


def torch_archive() -> bytes:
    buffer = io.BytesIO()
    torch.save({"state_dict": {"w": torch.zeros(64)}}, buffer)
    return buffer.getvalue()


def plain_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("readme.txt", "not a checkpoint")
    return buffer.getvalue()


CHECKPOINTS = {
    "garbage": (lambda: b"\x00garbage" * 100, "corrupt or partial checkpoint"),
    "truncated": (lambda: torch_archive()[: len(torch_archive()) // 2], "corrupt or partial checkpoint"),
    "plain zip": (plain_zip, "not a torch checkpoint"),
    "empty": (lambda: b"", "empty checkpoint file"),
}


def ckpt_case(kind: str):
    content, reason = CHECKPOINTS[kind]

    def build(tmp: Path) -> Expect:
        ckpt = tmp / "model.ckpt"
        ckpt.write_bytes(content())
        argv = fit(
            tmp, "MultiEventDataModule", {"annotation": str(canonical_file(tmp / "ann.json"))}, "--ckpt_path", str(ckpt)
        )
        return Expect(argv, str(ckpt), reason)

    CASES.append(Case("checkpoints", f"fit --ckpt_path {kind}", build))


def index_ckpt_case(kind: str):
    content, reason = CHECKPOINTS[kind]

    def build(tmp: Path) -> Expect:
        ckpt = tmp / "model.ckpt"
        ckpt.write_bytes(content())
        (tmp / "videos").mkdir()
        write_noise_video(tmp / "videos" / "a.mp4", 1.0)
        config = fit_config(
            tmp / "fit.yaml", "MultiEventDataModule", {"annotation": str(canonical_file(tmp / "ann.json"))}
        )
        argv = [
            "index",
            "--config",
            str(config),
            "--ckpt",
            str(ckpt),
            "--videos",
            str(tmp / "videos"),
            "--out",
            str(tmp / "idx"),
        ]
        return Expect(argv, str(ckpt), reason)

    CASES.append(Case("checkpoints", f"index --ckpt {kind}", build))


_SEQ_LSTM: list[Path] = []


def seq_lstm_checkpoint() -> Path:
    """A checkpoint of a seqLSTM dual encoder, written by one real `fit` step (shared by this process)."""
    if not _SEQ_LSTM:
        from lit_retrieval.cli import main

        root = Path(tempfile.mkdtemp(prefix="robustness-seqlstm-"))
        callback = {
            "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
            "init_args": {"dirpath": str(root / "ckpt"), "save_last": True, "save_top_k": 0},
        }
        model = dual_encoder(shared_clip(), "SeqLSTMHead")
        config = fit_config(
            root / "fit.yaml",
            "MultiEventDataModule",
            video_corpus(root),
            model,
            enable_checkpointing=True,
            callbacks=[callback],
        )
        main(["fit", "--config", str(config)])
        _SEQ_LSTM.append(root / "ckpt" / "last.ckpt")
    return _SEQ_LSTM[0]


@case("checkpoints", "test --ckpt_path of another head")
def _(tmp: Path) -> Expect:
    ckpt = seq_lstm_checkpoint()
    config = fit_config(tmp / "test.yaml", "MultiEventDataModule", video_corpus(tmp), dual_encoder(shared_clip()))
    return Expect(
        ["test", "--config", str(config), "--ckpt_path", str(ckpt)],
        str(ckpt),
        "the checkpoint's head is SeqLSTMHead, the config's model.head is MeanPHead",
    )


for _kind in CHECKPOINTS:
    ckpt_case(_kind)
for _kind in ("garbage", "plain zip"):
    index_ckpt_case(_kind)

# -- metrics --------------------------------------------------------------------------------------------


def metrics_case(
    name: str,
    reason: str,
    scores=None,
    targets=None,
    raw: bytes | None = None,
    file: str = "scores.npy",
    subprocess=False,
):
    def build(tmp: Path) -> Expect:
        path = tmp / file
        if raw is not None:
            path.write_bytes(raw)
        elif file.endswith(".npz"):
            np.savez(path, scores=np.eye(3))
        elif scores is not None:
            np.save(path, scores, allow_pickle=True)
        argv = ["metrics", str(path)]
        bad = path
        if targets is not None:
            np.save(tmp / "targets.npy", targets)
            argv += ["--text-video", str(tmp / "targets.npy")]
            bad = tmp / "targets.npy"
        return Expect(argv, str(bad), reason)

    CASES.append(Case("metrics", name, build, subprocess))


metrics_case("string array", "scores must be numbers", scores=np.array([["a", "b"], ["c", "d"]]), subprocess=True)
metrics_case(".npz archive", "an .npz archive", file="scores.npz")
metrics_case("float targets", "targets must be an integer array", scores=np.eye(3), targets=np.array([0.0, 1.7, 2.0]))
metrics_case("garbage file", "not a .npy array", raw=b"\x00garbage" * 10)
metrics_case("pickled object array", "not a .npy array", scores=np.array([{"a": 1}, None], dtype=object))
metrics_case("NaN scores", "scores are NaN", scores=np.array([[np.nan, 0.0], [0.0, 1.0]]))
metrics_case("one-dimensional scores", "scores must be [texts, videos]", scores=np.arange(3.0))
metrics_case("missing file", "No such file", file="absent.npy")
metrics_case("targets out of range", "targets", scores=np.eye(3), targets=np.array([0, 1, 7]))

# -- uvrb report ------------------------------------------------------------------------------------


def report_case(name: str, content: bytes, reason: str, subprocess: bool = False):
    def build(tmp: Path) -> Expect:
        path = tmp / "results.json"
        path.write_bytes(content)
        return Expect(["uvrb", "report", str(path)], str(path), reason)

    CASES.append(Case("uvrb report", name, build, subprocess))


report_case("malformed JSON", b'{"MSRVTT": 0.5,', "not valid JSON", subprocess=True)
report_case("a JSON string", b'"MSRVTT"', "expected a JSON object")
report_case("null", b"null", "expected a JSON object")
report_case("a list", b"[0.5, 0.6]", "expected a JSON object")
report_case("NaN score", b'{"MSRVTT": NaN}', "dataset 'MSRVTT': the score must be a finite number")
report_case("null score", b'{"MSRVTT": null}', "dataset 'MSRVTT': the score must be a finite number")
report_case(
    "string score", b'{"datasets": {"MSRVTT": {"score": "0.5"}}}', "dataset 'MSRVTT': the score must be a finite number"
)
report_case("datasets a list", b'{"datasets": [1, 2]}', "'datasets' must be an object")
report_case("dataset entry a list", b'{"datasets": {"MSRVTT": [0.5]}}', "dataset 'MSRVTT': expected an object")
report_case("datasets missing", b'{"MSRVTT": 0.5}', "need a score for each of the 16 UVRB datasets")
report_case("not UTF-8", '{"caf\u00e9": 1}'.encode("latin-1"), "not UTF-8")
report_case("duplicate key", b'{"MSRVTT": 0.5, "MSRVTT": 0.7}', "duplicate key 'MSRVTT'")

# -- uvrb (task list) ------------------------------------------------------------------------------


def uvrb_tasks_case(name: str, content: str, reason: str, *extra: str):
    def build(tmp: Path) -> Expect:
        path = tmp / "tasks.yaml"
        path.write_text(content)
        argv = ["uvrb", "--model", str(tmp / "no-model"), "--tasks", str(path), "--out", str(tmp / "out"), *extra]
        return Expect(argv, str(path), reason)

    CASES.append(Case("uvrb", name, build))


uvrb_tasks_case("task list not YAML", "tasks: [unclosed\n", "not valid YAML")
uvrb_tasks_case("task list a string", "just text\n", "expected a mapping with a 'tasks' list")
uvrb_tasks_case("task without a name", "tasks:\n  - dir: msrvtt\n", "expected a mapping with a 'name'")
uvrb_tasks_case("task with an unknown key", "tasks:\n  - name: MSRVTT\n    metrc: R@1\n", "task 'MSRVTT'")
uvrb_tasks_case("unknown metric", "tasks:\n  - name: mine\n    metric: R@3\n", "metric must be")
uvrb_tasks_case("--only an unknown task", "tasks:\n  - name: mine\n", "unknown task(s) ['other']", "--only", "other")
uvrb_tasks_case("no tasks", "tasks: []\n", "no tasks")


def uvrb_empty_file_case(empty: str):
    """A task folder whose `empty` file (corpus, queries or relevance) has no line (issue 56, item 5)."""

    def build(tmp: Path) -> Expect:
        task = tmp / "mine"
        task.mkdir()
        lines = {
            "corpus.jsonl": '{"id": "c1", "text": "a dog"}\n',
            "queries.jsonl": '{"id": "q1", "text": "a dog runs"}\n',
            "qrels.jsonl": '{"query-id": "q1", "corpus-id": "c1", "score": 1}\n',
        }
        for name, content in lines.items():
            (task / name).write_text("" if name == empty else content)
        (tmp / "tasks.yaml").write_text(f"root: {tmp}\ntasks:\n  - name: mine\n")
        argv = ["uvrb", "--model", str(tmp / "no-model"), "--tasks", str(tmp / "tasks.yaml"), "--out", str(tmp / "o")]
        return Expect(argv, str(task / empty), "empty file")

    CASES.append(Case("uvrb", f"empty {empty}", build))


for _empty in ("corpus.jsonl", "queries.jsonl", "qrels.jsonl"):
    uvrb_empty_file_case(_empty)

# -- index -------------------------------------------------------------------------------------------


def index_case(name: str, make_videos: Callable[[Path], Path], reason: str, subprocess: bool = False):
    def build(tmp: Path) -> Expect:
        videos = make_videos(tmp)
        return Expect(
            ["index", "--model", str(tmp / "no-model"), "--videos", str(videos), "--out", str(tmp / "idx")],
            str(videos),
            reason,
        )

    CASES.append(Case("index", name, build, subprocess))


def one_video(tmp: Path) -> Path:
    return write_noise_video(tmp / "clip.mp4", 1.0)


def text(tmp: Path, name: str, content: bytes) -> Path:
    (tmp / name).write_bytes(content)
    return tmp / name


index_case("--videos a video file", one_video, "a video file, where a folder of videos or a list file", subprocess=True)
index_case("--videos an empty list", lambda tmp: text(tmp, "list.txt", b"\n# nothing\n"), "no videos found")
index_case("--videos an empty folder", lambda tmp: (tmp / "empty").mkdir() or tmp / "empty", "no videos found")
index_case("--videos missing", lambda tmp: tmp / "absent.txt", "neither a folder of videos nor a list file")
index_case(
    "--videos list not UTF-8", lambda tmp: text(tmp, "list.txt", "caf\u00e9.mp4\n".encode("latin-1")), "not UTF-8"
)


def index_option_case(name: str, extra: list[str], path: str, reason: str, videos: int = 1):
    """An `index` option refused before the model loads (`--model` names no model)."""

    def build(tmp: Path) -> Expect:
        (tmp / "videos").mkdir()
        for number in range(videos):
            write_noise_video(tmp / "videos" / f"v{number}.mp4", 1.0, seed=number)
        argv = ["index", "--model", str(tmp / "no-model"), "--videos", str(tmp / "videos"), "--out", str(tmp / "idx")]
        return Expect([*argv, *extra], path, reason)

    CASES.append(Case("index", name, build))


index_option_case("--chunk 0", ["--chunk", "0"], "--chunk", "must be an integer >= 1, got 0")
index_option_case(
    "IVF with more lists than videos",
    ["--kind", "ivf", "--nlist", "8"],
    "--nlist",
    "8 IVF lists need at least 8 vectors to train (faiss warns below 312, 39 per list) but there are 3",
    videos=3,
)

# -- search ------------------------------------------------------------------------------------------


def search_case(name: str, make_index: Callable[[Path], Path], reason: str, file: str = "", subprocess: bool = False):
    def build(tmp: Path) -> Expect:
        index = make_index(tmp)
        return Expect(["search", str(index), "a dog"], str(index / file) if file else str(index), reason)

    CASES.append(Case("search", name, build, subprocess))


def index_folder(tmp: Path, meta: bytes, videos: bytes, faiss_bytes: bytes) -> Path:
    root = tmp / "idx"
    root.mkdir()
    (root / "meta.json").write_bytes(meta)
    (root / "videos.json").write_bytes(videos)
    (root / "index.faiss").write_bytes(faiss_bytes)
    return root


search_case("index folder missing", lambda tmp: tmp / "absent", "not a finished index", subprocess=True)
search_case(
    "meta.json garbage", lambda tmp: index_folder(tmp, b"{garbage", b"[]", b"x"), "not valid JSON", file="meta.json"
)


def garbage_faiss(tmp: Path) -> Path:
    index = index_dir(tmp / "idx")
    (index / "index.faiss").write_bytes(b"\x00garbage" * 20)
    return index


search_case("index.faiss garbage", garbage_faiss, "not a readable faiss index", file="index.faiss")
search_case(
    "videos.json an object",
    lambda tmp: index_dir(tmp / "idx", videos={"a": 1}),
    "is not what `lit-retrieval index` writes",
)


# -- index folders, as `search` and `serve` load them -------------------------------------------------

_MODEL: list[str] = []


def tiny_model() -> str:
    """A tiny Qwen2.5-VL (random weights, `save_pretrained`) shared by this process's cases."""
    if not _MODEL:
        from lit_retrieval.models.gve.tiny import save_tiny_qwen25vl

        _MODEL.append(str(save_tiny_qwen25vl(Path(tempfile.mkdtemp(prefix="robustness-model-")), seed=0)))
    return _MODEL[0]


INDEX_FOLDERS: dict[str, tuple[Callable[[Path], Path], str, str]] = {
    # name: (folder writer, file named in the line ("" for the folder), reason)
    "meta.json without model": (lambda tmp: index_dir(tmp / "idx", model=None), "meta.json", "no model description"),
    "meta.json model not a model": (
        lambda tmp: index_dir(tmp / "idx", model={"weights": "x"}),
        "meta.json",
        "no model description",
    ),
    "meta.json without fingerprint": (
        lambda tmp: index_dir(tmp / "idx", fingerprint=None),
        "meta.json",
        "no model fingerprint",
    ),
    "videos.json shorter than the index": (
        lambda tmp: index_dir(tmp / "idx", videos=["/v0.mp4", "/v1.mp4"]),
        "videos.json",
        "lists 2 videos but index.faiss holds 3",
    ),
    "videos.json longer by one": (
        lambda tmp: index_dir(tmp / "idx", videos=[f"/v{i}.mp4" for i in range(4)]),
        "videos.json",
        "lists 4 videos but index.faiss holds 3",
    ),
    "videos.json empty": (lambda tmp: index_dir(tmp / "idx", videos=[]), "videos.json", "lists 0 videos"),
    "index.faiss of another dimension": (
        lambda tmp: index_dir(tmp / "idx", dim=16, meta_dim=32),
        "index.faiss",
        "holds 16-dimensional vectors, meta.json says 32",
    ),
    "built by another model": (
        lambda tmp: index_dir(tmp / "idx", dim=32, model=tiny_model(), fingerprint="an-older-model"),
        "",
        "built by another model",
    ),
}


def index_folder_case(entry: str, name: str, subprocess: bool = False, *extra: str):
    write, file, reason = INDEX_FOLDERS[name]

    def build(tmp: Path) -> Expect:
        index = write(tmp)
        argv = ["search", str(index), "a dog"] if entry == "search" else ["serve", str(index), "--port", "0", *extra]
        return Expect(argv, str(index / file) if file else str(index), reason)

    CASES.append(Case(entry, " ".join((name, *extra)), build, subprocess))


for _name in INDEX_FOLDERS:
    index_folder_case("search", _name)
for _name in ("meta.json without fingerprint", "videos.json shorter than the index", "videos.json empty"):
    index_folder_case("serve", _name, subprocess=_name == "videos.json empty")
index_folder_case("serve", "built by another model")
index_folder_case("serve", "videos.json shorter than the index", False, "--workers", "2")


@case("search", "--text with --video on a dual encoder's index")
def _(tmp: Path) -> Expect:
    from lit_retrieval.commands import run_command

    config = fit_config(tmp / "fit.yaml", "MultiEventDataModule", video_corpus(tmp), dual_encoder(shared_clip()))
    (tmp / "list.txt").write_text("v1.mp4\nv2.mp4\n")
    run_command("index", ["--config", str(config), "--videos", str(tmp / "list.txt"), "--out", str(tmp / "idx")])
    return Expect(
        ["search", str(tmp / "idx"), "--text", "a dog", "--video", str(tmp / "v1.mp4")],
        "--text with --video",
        "the query is text+video, but the index's model embeds text or video items only",
    )


def query_case(name: str, extra: list[str], path: str, reason: str):
    """A query argument refused before the index or model loads (the folder is not even read)."""

    def build(tmp: Path) -> Expect:
        return Expect(["search", str(tmp / "never-read"), *extra], path, reason)

    CASES.append(Case("search", name, build))


query_case("-k 0", ["a dog", "-k", "0"], "-k", "must be at least 1, got 0")
query_case("-k -1", ["a dog", "-k", "-1"], "-k", "must be at least 1, got -1")
query_case("empty query", [""], "query 1", "empty or blank text")
query_case("whitespace query", ["a dog", " \t "], "query 2", "empty or blank text")
query_case("empty --event", ["--event", ""], "--event 1", "empty or blank text")
query_case("blank second --event", ["--event", "a man sits", "--event", "  "], "--event 2", "empty or blank text")

# -- frame cache: `fit` reading it (MultiEventDataModule, on_bad_video: raise) and `cache-frames` --------


def cache_case(entry: str, name: str, spoil: Callable[[Path], Path], reason: str):
    """A valid cache of two real videos, spoilt by `spoil(cache folder)`, which returns the path the
    line must name."""

    def build(tmp: Path) -> Expect:
        init = cached_corpus(tmp)
        named = spoil(Path(init["frame_cache"]))
        argv = fit(tmp, "MultiEventDataModule", init)
        return Expect(argv if entry == "frame cache" else ["cache-frames", *argv[1:]], str(named), reason)

    CASES.append(Case(entry, name, build))


def header(change: Callable[[dict], object]) -> Callable[[Path], Path]:
    def spoil(cache: Path) -> Path:
        path = cache / "cache.json"
        path.write_text(json.dumps(change(json.loads(path.read_text()))))
        return path

    return spoil


def index_lines(change: Callable[[list[bytes]], list[bytes]]) -> Callable[[Path], Path]:
    def spoil(cache: Path) -> Path:
        path = cache / "shard-00000-of-00001.index.jsonl"
        path.write_bytes(b"".join(change(path.read_bytes().splitlines(keepends=True))))
        return path

    return spoil


def without(entry: bytes, key: str) -> bytes:
    data = json.loads(entry)
    del data[key]
    return json.dumps(data).encode() + b"\n"


def cut_frames(cache: Path) -> Path:
    with open(cache / "shard-00000-of-00001.frames", "r+b") as handle:
        handle.truncate(10)  # v1's frames, the first, are cut short
    return cache.parent / "v1.mp4"


def reshaped(entry: bytes, shape: list[int]) -> bytes:
    data = json.loads(entry)
    data["shape"] = shape
    return json.dumps(data).encode() + b"\n"


for _entry in ("frame cache", "cache-frames"):
    cache_case(
        _entry,
        "cache.json without sampling",
        header(lambda h: {k: v for k, v in h.items() if k != "sampling"}),
        "'sampling' must be an object",
    )
    cache_case(_entry, "cache.json a list", header(lambda h: [h]), "expected a JSON object")
    cache_case(_entry, "cache.json null", header(lambda h: None), "expected a JSON object")
    cache_case(
        _entry, "cache.json sampling null", header(lambda h: {**h, "sampling": None}), "'sampling' must be an object"
    )
cache_case(
    "frame cache", "index line garbage", index_lines(lambda lines: [lines[0], b"{garbage\n"]), "line 2: not valid JSON"
)
cache_case(
    "frame cache",
    "index line without start",
    index_lines(lambda lines: [without(lines[0], "start"), lines[1]]),
    "line 1: 'start' must be",
)
cache_case(
    "frame cache",
    "index line a list",
    index_lines(lambda lines: [b"[1, 2]\n", lines[1]]),
    "line 1: expected a JSON object",
)
cache_case("frame cache", "frames cut short", cut_frames, "cut short")
cache_case(
    "frame cache",
    "index line whose shape disagrees with its bytes",
    index_lines(lambda lines: [reshaped(lines[0], [3, 16, 16, 3]), lines[1]]),
    "line 1: 'lengths' [1536] do not fit raw frames of shape [3, 16, 16, 3]",
)

# -- shots -------------------------------------------------------------------------------------------


def shots_case(name: str, build_argv: Callable[[Path], tuple[list[str], Path]], reason: str, subprocess: bool = False):
    def build(tmp: Path) -> Expect:
        argv, path = build_argv(tmp)
        return Expect(["shots", *argv, "--cache", str(tmp / "cache")], str(path), reason)

    CASES.append(Case("shots", name, build, subprocess))


QUICKSTART = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"


def shots_config(tmp: Path, content: str | None) -> tuple[list[str], Path]:
    """`shots --config` on the quick-start training config, with `content` as a second config file
    (None: the quick-start config alone, which has no `data.shots`)."""
    if content is None:
        return ["--config", str(QUICKSTART), str(one_video(tmp))], QUICKSTART
    (tmp / "train.yaml").write_text(content)
    return ["--config", str(QUICKSTART), "--config", str(tmp / "train.yaml"), str(one_video(tmp))], tmp / "train.yaml"


shots_case(
    "--list a video file",
    lambda tmp: (["--list", str(one_video(tmp))], tmp / "clip.mp4"),
    "a video file, where a list file",
    subprocess=True,
)
shots_case(
    "--list not UTF-8", lambda tmp: (["--list", str(text(tmp, "l.txt", b"\xff\xfe\n"))], tmp / "l.txt"), "not UTF-8"
)
shots_case(
    "--config missing",
    lambda tmp: (["--config", str(tmp / "absent.yaml"), str(one_video(tmp))], tmp / "absent.yaml"),
    "No such file",
)
shots_case("--config not YAML", lambda tmp: shots_config(tmp, "data: [unclosed\n"), "Problems parsing config")
shots_case("--config without data.shots", lambda tmp: shots_config(tmp, None), "no data.shots section")
shots_case(
    "--config unknown shots key",
    lambda tmp: shots_config(tmp, "data: {init_args: {shots: {detectr: {}}}}\n"),
    "'data.init_args.shots.detectr'",
)
shots_case(
    "--config unknown detector setting",
    lambda tmp: shots_config(tmp, "data: {init_args: {shots: {detector: {treshold: 3}}}}\n"),
    "treshold",
)
shots_case(
    "--on-error raise, garbage video",
    lambda tmp: (["--on-error", "raise", str(text(tmp, "bad.mp4", b"\x00garbage" * 64))], tmp / "bad.mp4"),
    "shot detection failed",
)


# -- a user's table (datasets.table.TableDataModule): CSV, TSV, JSON Lines, Parquet ----------------------

TABLE_HEADER = ["video", "caption", "duration", "split"]
TABLE_ROWS = [
    ["a.mp4", "a dog runs", "2.0", "train"],
    ["b.mp4", "a cat sleeps", "2.0", "train"],
    ["b.mp4", "a cat naps", "2.0", "train"],
    ["c.mp4", "a bird sings", "2.0", "test"],
]
TABLE_MODULE = "datasets.table.TableDataModule"


def table_folder(tmp: Path, videos: tuple[str, ...]) -> Path:
    """A folder with the (empty: never decoded before these errors) video files `videos`."""
    folder = tmp / "corpus"
    folder.mkdir()
    for name in videos:
        (folder / name).write_bytes(b"")
    return folder


def table_case(
    name: str,
    reason: str,
    rows: list[list[str]] | None = None,
    header: list[str] = TABLE_HEADER,
    separator: str = ",",
    file: str = "table.csv",
    videos: tuple[str, ...] = ("a.mp4", "b.mp4", "c.mp4"),
    **init: Any,
):
    """A case whose table is `header` and `rows` joined by `separator` (as a user's export writes it)."""

    def build(tmp: Path) -> Expect:
        path = table_folder(tmp, videos) / file
        lines = [header, *(TABLE_ROWS if rows is None else rows)]
        path.write_text("".join(separator.join(line) + "\n" for line in lines))
        args = {"table": str(path), "batch_size": 2, "num_frames": 2, "image_size": 32, **init}
        return Expect(fit(tmp, TABLE_MODULE, args), str(path), reason)

    CASES.append(Case("annotations/table", name, build))


def table_raw(name: str, file: str, content: bytes, reason: str):
    def build(tmp: Path) -> Expect:
        path = table_folder(tmp, ("a.mp4",)) / file
        path.write_bytes(content)
        return Expect(fit(tmp, TABLE_MODULE, {"table": str(path)}), str(path), reason)

    CASES.append(Case("annotations/table", name, build))


# open_clip's most reported trap: the separator of another format; the error lists the one column it found
table_case("a tab-separated table named .csv", "columns found: ['video\\tcaption\\tduration\\tsplit']", separator="\t")
table_case("a comma-separated table named .tsv", "columns found: ['video,caption,duration,split']", file="table.tsv")
table_case("the named caption column is absent", "missing column(s) caption: 'title'", caption_column="title")
table_case("no video column", "missing column(s) video: one of", header=["clip", "caption", "duration", "split"])
table_case("start without end", "missing column(s) end", header=["video", "caption", "duration", "start"])
table_case("no split column", "no split column", header=["video", "caption", "duration", "group"])
table_case(
    "empty caption",
    "record 'row 2': empty caption",
    rows=[TABLE_ROWS[0], ["b.mp4", " ", "2.0", "train"], TABLE_ROWS[3]],
)
table_case("missing video", "record 'row 2': video", videos=("a.mp4", "c.mp4"))
table_case("missing video (its name)", "b.mp4 not found", videos=("a.mp4", "c.mp4"))
table_case("repeated video and caption", "record 'row 5': repeats row 2", rows=[*TABLE_ROWS, TABLE_ROWS[1]])
table_case(
    "a split of no configured name",
    "record 'row 4': split 'tset' is not one of",
    rows=[*TABLE_ROWS[:3], ["c.mp4", "x", "2.0", "tset"]],
)
table_case(
    "video in train and test",
    "record 'row 5': 1 video(s) of split 'test' are also in the training split",
    rows=[*TABLE_ROWS, ["a.mp4", "a dog runs again", "2.0", "test"]],
)
table_case(
    "duration not a number", "record 'row 1': duration 'two' is not a number", rows=[["a.mp4", "x", "two", "train"]]
)
table_case(
    "one video, two durations",
    "record 'row 3': video 'b.mp4' has duration 3 here, 2 on row 2",
    rows=[*TABLE_ROWS[:2], ["b.mp4", "a cat naps", "3", "train"], TABLE_ROWS[3]],
)
table_case(
    "no full training batch",
    "has 3 records, fewer than one batch of data.batch_size 4",
    batch_size=4,
)
table_raw(
    "JSON Lines row not an object", "table.jsonl", b'{"video": "a.mp4"}\n[1, 2]\n', "record 'row 2': line 2 is not"
)
table_raw("Parquet file damaged", "table.parquet", b"PAR1 not really parquet", "not a readable Parquet file")
table_raw("not UTF-8", "table.csv", "video,caption\na.mp4,caf\u00e9\n".encode("latin-1"), "not UTF-8")
table_raw("no rows", "table.csv", b"video,caption,duration,split\n", "the table has no rows")
canonical_case(
    "no full training batch",
    "has 1 records, fewer than one batch of data.batch_size 16",
    videos=[canonical_video("v1"), canonical_video("v2", "test")],
)


def by_entry() -> dict[str, int]:
    """How many cases each entry point has."""
    counts: dict[str, int] = {}
    for c in CASES:
        counts[c.entry] = counts.get(c.entry, 0) + 1
    return counts


# -- shards: `fit` reading a shard folder (ShardedDataModule) ------------------------------------------


def written_shards(root: Path) -> Path:
    """Two real videos in the canonical format, written as shards by `lit-retrieval shard` into `root/shards`."""
    import yaml

    from lit_retrieval.commands import run_command

    events = [{"description": "x", "start": 0, "end": 1}]
    videos = [
        canonical_video("v1", duration=2.0, events=events),
        canonical_video("v2", "test", duration=2.0, events=events),
    ]
    for seed in (0, 1):
        write_noise_video(root / f"v{seed + 1}.mp4", 2.0, seed=seed)
    annotation = canonical_file(root / "ann.json", videos=videos)
    data = {"annotation": str(annotation), "num_frames": 2, "image_size": 16}
    config = {"data": {"class_path": "lit_retrieval.data.MultiEventDataModule", "init_args": data}}
    config["model"] = {"class_path": BORING}
    (root / "shard.yaml").write_text(yaml.safe_dump(config))
    out = root / "shards"
    assert run_command("shard", ["--config", str(root / "shard.yaml"), "--out", str(out)]) == 0
    return out


BORING = "lightning.pytorch.demos.boring_classes.BoringModel"


def shards_case(name: str, spoil: Callable[[Path], Path], reason: str, **init: Any):
    def build(tmp: Path) -> Expect:
        shards = written_shards(tmp)
        named = spoil(shards)
        return Expect(
            fit(tmp, "ShardedDataModule", {"shards": str(shards), "batch_size": 1, **init}), str(named), reason
        )

    CASES.append(Case("shards", name, build))


def truncated_chunk(shards: Path) -> Path:
    chunk = next((shards / "train").glob("chunk-*.bin"))
    chunk.write_bytes(chunk.read_bytes()[:-5])
    return chunk


def foreign_folder(shards: Path) -> Path:
    (shards / "shards.json").write_text(json.dumps({"format": "mosaicml-streaming", "version": 1}))
    return shards / "shards.json"


def without_index(shards: Path) -> Path:
    (shards / "train" / "index.json").unlink()
    return shards / "train"


shards_case("truncated chunk", truncated_chunk, "truncated or replaced")
shards_case("foreign manifest", foreign_folder, "not a manifest of lit-retrieval shard")
shards_case("no manifest", lambda s: (s / "shards.json").unlink() or s, "not a shard folder of lit-retrieval shard")
shards_case("split without index", without_index, "no index.json")
shards_case("other sampling settings", lambda s: s, "written with other sampling settings", num_frames=8)

# -- video2dataset tars (WebDatasetTarsDataModule) ------------------------------------------------------


def tar_case(name: str, members: Callable[[Path], dict[str, bytes]] | None, named: str, reason: str, raw: bytes = b""):
    """A tar `part.tar` of `members(tmp)` (name -> bytes), or the bytes `raw` as the tar (no tar: `members` None)."""

    def build(tmp: Path) -> Expect:
        import tarfile

        path = tmp / "part.tar"
        if raw:
            path.write_bytes(raw)
        elif members is not None:
            with tarfile.open(path, "w") as tar:
                for member, data in members(tmp).items():
                    info = tarfile.TarInfo(member)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        init = {"tars": {"train": str(tmp / "*.tar")}, "num_frames": 2, "image_size": 16, "batch_size": 1}
        return Expect(fit(tmp, "WebDatasetTarsDataModule", init), named.format(tmp=tmp), reason)

    CASES.append(Case("annotations/webdataset_tars", name, build))


def clip_bytes(tmp: Path) -> bytes:
    return write_noise_video(tmp / "src.mp4", 2.0, seed=0).read_bytes()


tar_case("caption missing", lambda t: {"000.mp4": clip_bytes(t), "000.json": b"{}"}, "{tmp}/part.tar", "no caption")
tar_case("mp4 missing", lambda t: {"000.txt": b"a dog"}, "{tmp}/part.tar", "no .mp4 in the tar")
tar_case("not a tar", lambda t: {}, "{tmp}/part.tar", "unreadable tar", raw=b"not a tar file at all" * 40)
tar_case(
    "duration as text",
    lambda t: {"000.mp4": clip_bytes(t), "000.txt": b"a dog", "000.json": b'{"duration": "long"}'},
    "{tmp}/part.tar",
    "duration must be a finite number",
)
tar_case("no tar matches", None, "{tmp}/*.tar", "no tar file matches")
