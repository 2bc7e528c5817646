"""MSVD (Chen & Dolan, ACL 2011) for text-video retrieval, in the layout CLIP4Clip (arXiv:2104.08860) and
Collaborative Experts release: parser and DataModule.

Files (CLIP4Clip's `msvd_data.zip`): `raw-captions.pkl`, a pickled dict `{clip name: [caption, ...]}` whose
captions are token lists (`["a", "man", "is", "cooking"]`, joined with spaces as CLIP4Clip's loader does; a
caption given as one string is taken as it is), and `train_list.txt` / `val_list.txt` / `test_list.txt`, one
clip name a line (1,200 / 100 / 670, the split of Venugopalan et al., ICCV 2015). A clip name is
`{YouTube id}_{start}_{end}` (whole seconds of the source video, e.g. `-4wsuPCjDBc_5_15`); the YouTube id
may itself hold `_`, so the two numbers are read from the right. The clip files (`YouTubeClips.tar`:
`{clip name}.avi`, or re-encoded `.mp4`) are already cut, so a record's duration is `end - start` and frames
are sampled over the whole file.

Records (CLIP4Clip's `dataloader_msvd_retrieval.py`): every caption of a clip is its own record in every
split, all sharing the clip's id and file, so training pairs each caption with its clip and an evaluation
split ranks one query per caption against a gallery of distinct clips (about 40 captions a clip;
`evaluation.v2t_rule: group_max` gives CLIP4Clip's video-to-text numbers).

Bad records (`AnnotationError` naming the file and the clip, or dropped and counted under
`on_bad_record: skip`): a clip listed twice in one split file (the later line), a clip name that is not
`id_start_end` with `start < end`, a clip without captions in the pickle, a caption list that is not a
non-empty list, a caption that is neither a non-empty string nor a list of strings. A missing split or
caption file, or a pickle of anything but plain dicts, lists and strings (nothing is executed while
reading it), stops with one line naming the file. A clip in two split files is refused by the data
module's split-overlap check.
"""

from __future__ import annotations

import io
import pickle
import re
from pathlib import Path
from typing import Any

from lit_retrieval.data.bad_records import RecordCollector, listed_once
from lit_retrieval.data.batching.datamodule import VideoTextDataModule
from lit_retrieval.data.records import AnnotationError, Event, VideoRecord
from lit_retrieval.errors import ConfigError

CLIP_NAME = re.compile(r"(?P<source>.+)_(?P<start>\d+)_(?P<end>\d+)")
SPLIT_FILES = {"train": "train_list.txt", "val": "val_list.txt", "test": "test_list.txt"}


# containers a caption pickle may be written with; nothing else is looked up, so nothing runs
PLAIN_GLOBALS = {
    ("collections", "OrderedDict"),
    ("collections", "defaultdict"),
    ("builtins", "list"),
    ("builtins", "dict"),
}


class _PlainUnpickler(pickle.Unpickler):
    """Reads pickles of built-in containers and strings only: any other class or function is refused."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in PLAIN_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"it names {module}.{name}; only dicts, lists and strings are read")


def read_plain_pickle(path: Path) -> Any:
    """The object pickled in `path` (built-in types only); a missing or unreadable file is an `AnnotationError`."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise AnnotationError(str(path), "-", "annotation file not found") from None
    except OSError as err:
        raise AnnotationError(str(path), "-", f"cannot read the file ({err.strerror or err})") from None
    try:
        return _PlainUnpickler(io.BytesIO(data), encoding="utf-8").load()
    except Exception as err:  # pickle raises many types on a damaged file
        raise AnnotationError(str(path), "-", f"not a pickle of plain Python objects ({err})") from None


def clip_duration(name: str, source: str) -> float:
    """Seconds of the clip `{id}_{start}_{end}` (`end - start`); any other name is an `AnnotationError`."""
    match = CLIP_NAME.fullmatch(name)
    if match is None or int(match["end"]) <= int(match["start"]):
        raise AnnotationError(source, name, "clip name must be {youtube id}_{start}_{end} (whole seconds, start < end)")
    return float(int(match["end"]) - int(match["start"]))


def caption_text(caption: Any, source: str, where: str) -> str:
    """One caption as text: a token list joined with spaces (CLIP4Clip), or a string; stripped, non-empty."""
    if isinstance(caption, list) and caption and all(isinstance(token, str) for token in caption):
        caption = " ".join(caption)
    if not isinstance(caption, str) or not caption.strip():
        raise AnnotationError(source, where, f"a caption must be a list of word strings or a string, got {caption!r}")
    return caption.strip()


class MSVDParser:
    """Turns `raw-captions.pkl` and the split files into one `VideoRecord` per caption."""

    def __init__(self, video_root: str | Path = ".", video_exts: tuple[str, ...] = (".avi", ".mp4")) -> None:
        if not video_exts:
            raise ConfigError("video_exts needs at least one extension")
        self.video_root = Path(video_root)
        self.video_exts = tuple(video_exts)

    def load(
        self,
        annotation_dir: str | Path,
        captions_file: str,
        split_files: dict[str, str],
        collector: RecordCollector | None = None,
    ) -> list[VideoRecord]:
        collector = collector or RecordCollector()
        root = Path(annotation_dir)
        captions_path = root / captions_file
        captions = read_plain_pickle(captions_path)
        if not isinstance(captions, dict):
            reason = f"expected a dict of clip name -> captions, got {type(captions).__name__}"
            raise AnnotationError(str(captions_path), "-", reason)
        records = []
        for split, name in split_files.items():
            for clip in listed_once(root / name, collector):
                found = collector.parse(self.clip_records, clip, captions, str(captions_path), split, str(root / name))
                records += found or []
        return records

    def clip_records(self, clip: str, captions: dict, source: str, split: str, split_source: str) -> list[VideoRecord]:
        """One record per caption of `clip`, all sharing its id, file and duration."""
        duration = clip_duration(clip, split_source)
        if clip not in captions:
            raise AnnotationError(source, clip, f"no captions for this clip (listed in {split_source})")
        raw = captions[clip]
        if not isinstance(raw, list) or not raw:
            raise AnnotationError(source, clip, f"the caption list must be a non-empty list, got {type(raw).__name__}")
        texts = [caption_text(caption, source, f"{clip} caption {k}") for k, caption in enumerate(raw)]
        path = self.video_path(clip)
        return [VideoRecord(clip, path, duration, split, (Event(text, ((0.0, duration),)),)) for text in texts]

    def video_path(self, clip: str) -> str:
        """`{clip}{ext}` for the first of `video_exts` present under the video root (else the first)."""
        for ext in self.video_exts:
            if (self.video_root / f"{clip}{ext}").exists():
                return f"{clip}{ext}"
        return f"{clip}{self.video_exts[0]}"


class MSVDDataModule(VideoTextDataModule):
    """MSVD, one record per caption (module docstring): CLIP4Clip's train / val / test of 1,200 / 100 / 670 clips.

    Args:
        annotation_dir: folder of `raw-captions.pkl` and the split files.
        captions_file: the caption pickle's name.
        split_files: file of each split name (default `train_list.txt`, `val_list.txt`, `test_list.txt`).
        video_exts: extensions tried in turn for `{clip name}` under the video root (`.avi` as released).
        val_split: the validation split's name (`val`, CLIP4Clip's 100 clips; `None`: no validation).
        **kwargs: the common options of `VideoTextDataModule` (CLIP4Clip: 12 frames).
    """

    def __init__(
        self,
        annotation_dir: str,
        captions_file: str = "raw-captions.pkl",
        split_files: dict[str, str] | None = None,
        video_exts: list[str] | None = None,
        val_split: str | None = "val",
        **kwargs,
    ) -> None:
        super().__init__(val_split=val_split, **kwargs)
        self.annotation_dir = Path(annotation_dir)
        self.captions_file = captions_file
        self.split_files = split_files or dict(SPLIT_FILES)
        self.video_exts = tuple(video_exts or (".avi", ".mp4"))
        MSVDParser(video_exts=self.video_exts)  # refuses bad options when the config is parsed

    @property
    def source(self) -> str:
        return str(self.annotation_dir)

    def default_video_root(self) -> Path:
        return self.annotation_dir / "MSVD_Videos"

    def load_records(self, collector: RecordCollector) -> list[VideoRecord]:
        parser = MSVDParser(self.video_root or self.default_video_root(), self.video_exts)
        return parser.load(self.annotation_dir, self.captions_file, self.split_files, collector)
