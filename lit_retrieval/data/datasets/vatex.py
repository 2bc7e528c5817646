"""VATEX (Wang et al., ICCV 2019) for English text-video retrieval: parser and DataModule.

Caption files, in either of the two layouts they are published in:
- the VATEX release, `vatex_training_v1.0.json` and `vatex_validation_v1.0.json`: a list of
  `{"videoID": ..., "enCap": [10 English captions], "chCap": [10 Chinese captions]}`;
- CLIP2Video's `vatex_data.json`: one object `{videoID: {"enCap": [...], "chCap": [...]}}`.
Only `enCap` is read. A `videoID` is `{YouTube id}_{start:06d}_{end:06d}`, the 10 s of the source video the
clip covers (`Ptf_2VRj-V0_000122_000132`); the downloaded clips are already cut (`{videoID}.mp4`), so a
record's duration is `end - start` and frames are sampled over the whole file.

Splits: the official test captions were withheld, so retrieval papers follow HGR (Chen et al., CVPR 2020):
the 25,991 training clips for training and the 3,000 official validation clips split into 1,500 for
validation and 1,500 for test. Those split lists, `train_list.txt` / `val_list.txt` / `test_list.txt`
(one `videoID` a line), are the ones CLIP2Video publishes (`data/vatex_data/`) and reports its "HGR split"
numbers on; CLIP2Video's paper used a random 1,500 (`test1k5_sec_list.txt`) instead, a different test set.

Records: every English caption is its own record in every split, all sharing the clip's id and file, so an
evaluation split ranks one query per caption (10 per clip) against a gallery of distinct clips.

Bad records (`AnnotationError` naming the file and the clip, or dropped and counted under
`on_bad_record: skip`): a clip listed twice in a split file or given captions twice (in one file or two),
a `videoID` that is not `{id}_{start}_{end}` with six-digit seconds and `start < end`, a listed clip
without captions, an `enCap` that is not a non-empty list of non-empty strings. A missing split or
caption file stops with one line naming the file; a clip in two split files is refused by the data
module's split-overlap check.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lit_retrieval.data.bad_records import RecordCollector, listed_once
from lit_retrieval.data.batching.datamodule import VideoTextDataModule
from lit_retrieval.data.records import AnnotationError, Event, VideoRecord
from lit_retrieval.data.reading import read_json

VIDEO_ID = re.compile(r"(?P<source>.{11})_(?P<start>\d{6})_(?P<end>\d{6})")
CAPTION_FILES = ("vatex_training_v1.0.json", "vatex_validation_v1.0.json")
SPLIT_FILES = {"train": "train_list.txt", "val": "val_list.txt", "test": "test_list.txt"}


def clip_duration(video_id: str, source: str) -> float:
    """Seconds of the clip `{youtube id}_{start:06d}_{end:06d}`; any other id is an `AnnotationError`."""
    match = VIDEO_ID.fullmatch(video_id)
    if match is None or int(match["end"]) <= int(match["start"]):
        reason = "videoID must be {11-character youtube id}_{start:06d}_{end:06d} with start < end"
        raise AnnotationError(source, video_id, reason)
    return float(int(match["end"]) - int(match["start"]))


def english_captions(entry: Any, source: str, video_id: str) -> list[str]:
    """The stripped `enCap` captions of one clip's entry; anything but a non-empty list of strings is refused."""
    if not isinstance(entry, dict) or "enCap" not in entry:
        raise AnnotationError(source, video_id, "a clip entry must be an object with 'enCap'")
    captions = entry["enCap"]
    if not isinstance(captions, list) or not captions:
        raise AnnotationError(source, video_id, f"'enCap' must be a non-empty list, got {type(captions).__name__}")
    for k, caption in enumerate(captions):
        if not isinstance(caption, str) or not caption.strip():
            raise AnnotationError(
                source, f"{video_id} caption {k}", f"a caption must be a non-empty string, got {caption!r}"
            )
    return [caption.strip() for caption in captions]


def caption_entries(path: Path) -> Iterator[tuple[str, Any]]:
    """(videoID, entry) of a caption file in the release's list layout or CLIP2Video's mapping layout."""
    data = read_json(path)
    if isinstance(data, dict):
        yield from data.items()
    elif isinstance(data, list):
        for position, entry in enumerate(data):
            video_id = entry.get("videoID") if isinstance(entry, dict) else None
            if not isinstance(video_id, str) or not video_id:
                raise AnnotationError(str(path), f"entry #{position}", "needs a non-empty string 'videoID'")
            yield video_id, entry
    else:
        raise AnnotationError(str(path), "-", "expected a list of clips with 'videoID' or an object keyed by videoID")


class VATEXParser:
    """Turns VATEX caption files and split lists into one `VideoRecord` per English caption."""

    def __init__(self, video_ext: str = ".mp4") -> None:
        self.video_ext = video_ext

    def load(
        self,
        annotation_dir: str | Path,
        caption_files: tuple[str, ...],
        split_files: dict[str, str],
        collector: RecordCollector | None = None,
    ) -> list[VideoRecord]:
        collector = collector or RecordCollector()
        root = Path(annotation_dir)
        captions = self.captions(root, caption_files, collector)
        records = []
        for split, name in split_files.items():
            for video_id in listed_once(root / name, collector):
                found = collector.parse(self.clip_records, video_id, captions, split, str(root / name))
                records += found or []
        return records

    @staticmethod
    def captions(root: Path, caption_files: tuple[str, ...], collector: RecordCollector) -> dict[str, tuple[str, Any]]:
        """videoID -> (its caption file, its entry) over every caption file; a clip given twice is rejected."""
        found: dict[str, tuple[str, Any]] = {}
        for name in caption_files:
            source = str(root / name)
            for video_id, entry in caption_entries(root / name):
                if video_id in found:
                    collector.reject(
                        AnnotationError(source, video_id, f"captions given again (first in {found[video_id][0]})")
                    )
                    continue
                found[video_id] = (source, entry)
        return found

    def clip_records(
        self, video_id: str, captions: dict[str, tuple[str, Any]], split: str, split_source: str
    ) -> list[VideoRecord]:
        """One record per English caption of `video_id`, all sharing its id, file and duration."""
        duration = clip_duration(video_id, split_source)
        if video_id not in captions:
            raise AnnotationError(split_source, video_id, "listed, but no caption file has this clip")
        source, entry = captions[video_id]
        texts = english_captions(entry, source, video_id)
        path = f"{video_id}{self.video_ext}"
        return [VideoRecord(video_id, path, duration, split, (Event(text, ((0.0, duration),)),)) for text in texts]


class VATEXDataModule(VideoTextDataModule):
    """VATEX English captions, one record per caption, HGR's 25,991 / 1,500 / 1,500 split (module docstring).

    Args:
        annotation_dir: folder of the caption files and the split lists.
        caption_files: the caption files (the release's training and validation files by default;
            `[vatex_data.json]` for CLIP2Video's).
        split_files: file of each split name (default `train_list.txt`, `val_list.txt`, `test_list.txt`).
        video_ext: extension of `{videoID}` under the video root.
        val_split: the validation split's name (`val`: HGR's 1,500 clips; `None`: no validation).
        **kwargs: the common options of `VideoTextDataModule` (CLIP4Clip-style recipes: 12 frames).
    """

    def __init__(
        self,
        annotation_dir: str,
        caption_files: list[str] | None = None,
        split_files: dict[str, str] | None = None,
        video_ext: str = ".mp4",
        val_split: str | None = "val",
        **kwargs,
    ) -> None:
        super().__init__(val_split=val_split, **kwargs)
        self.annotation_dir = Path(annotation_dir)
        self.caption_files = tuple(caption_files or CAPTION_FILES)
        self.split_files = split_files or dict(SPLIT_FILES)
        self.parser = VATEXParser(video_ext)

    @property
    def source(self) -> str:
        return str(self.annotation_dir)

    def default_video_root(self) -> Path:
        return self.annotation_dir / "videos"

    def load_records(self, collector: RecordCollector) -> list[VideoRecord]:
        return self.parser.load(self.annotation_dir, self.caption_files, self.split_files, collector)
