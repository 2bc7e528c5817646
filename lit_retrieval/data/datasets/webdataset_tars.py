"""video2dataset's WebDataset tars as a video-text dataset: `{key}.mp4` with `{key}.txt` (the caption) and
`{key}.json` (its metadata, read for `caption` where there is no `.txt`, and `duration`), the form WebVid-,
InternVid- or Panda-scale corpora usually arrive in on a cluster.

The clips are extracted once into `extract_dir` (one folder per tar, each file written to a temporary name
and renamed, so a rerun after a kill extracts only what is missing), and the records point at them; the usual
use is `lit-retrieval shard` with this module's config, which converts the corpus once into litdata shards
(docs/datasets.md gives the trade-off against streaming the tars as they are). Python's `tarfile` reads the
tars: the webdataset package adds nothing to a sequential pass and is not a dependency.
"""

from __future__ import annotations

import glob
import json
import os
import tarfile
from pathlib import Path

from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.batching.datamodule import VideoTextDataModule
from lit_retrieval.data.media.video import VideoDecodeError, video_duration
from lit_retrieval.data.records import AnnotationError, Event, VideoRecord, positive_duration


class WebDatasetTarsDataModule(VideoTextDataModule):
    """Video-caption pairs from video2dataset's tars.

    Args:
        tars: split name -> a glob of tar files (`{train: /data/webvid/train/*.tar, test: ...}`).
        extract_dir: where the clips are extracted (default: `extracted/` beside the first split's tars).
        **kwargs: the common options of `VideoTextDataModule`.
    """

    def __init__(self, tars: dict[str, str], extract_dir: str | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.tars = tars
        first = next(iter(tars.values()), "")
        self.extract_dir = Path(extract_dir) if extract_dir else Path(os.path.dirname(first) or ".") / "extracted"

    @property
    def source(self) -> str:
        return ", ".join(self.tars.values())

    def default_video_root(self) -> Path:
        return self.extract_dir

    def load_records(self, collector: RecordCollector) -> list[VideoRecord]:
        records = []
        for split, pattern in self.tars.items():
            paths = sorted(glob.glob(pattern))
            if not paths:
                raise AnnotationError(pattern, "-", f"no tar file matches (split {split!r})")
            for path in paths:
                records += self._tar_records(Path(path), split, collector)
        return records

    def _tar_records(self, path: Path, split: str, collector: RecordCollector) -> list[VideoRecord]:
        folder = self.extract_dir / path.stem
        folder.mkdir(parents=True, exist_ok=True)
        samples: dict[str, dict[str, bytes]] = {}
        try:
            with tarfile.open(path) as tar:
                for member in tar:
                    if not member.isfile():
                        continue
                    key, _, extension = member.name.rpartition(".")
                    if extension == "mp4" and (folder / f"{key}.mp4").is_file():
                        samples.setdefault(key, {})["mp4"] = b""  # extracted by an earlier run
                        continue
                    if extension in ("mp4", "txt", "json"):
                        samples.setdefault(key, {})[extension] = tar.extractfile(member).read()
        except (tarfile.TarError, OSError) as err:
            raise AnnotationError(str(path), "-", f"unreadable tar ({err})") from None
        records = []
        for key, files in sorted(samples.items()):
            try:
                records.append(self._record(path, folder, key, files, split))
            except AnnotationError as err:
                collector.reject(err)
        return records

    def _record(self, path: Path, folder: Path, key: str, files: dict[str, bytes], split: str) -> VideoRecord:
        source = str(path)
        if "mp4" not in files:
            raise AnnotationError(source, key, "no .mp4 in the tar")
        meta = json.loads(files["json"]) if "json" in files else {}
        caption = files["txt"].decode().strip() if "txt" in files else str(meta.get("caption") or "").strip()
        if not caption:
            raise AnnotationError(source, key, "no caption (.txt, or json 'caption')")
        video = folder / f"{key}.mp4"
        if files["mp4"]:
            tmp = folder / f".{key}.mp4.{os.getpid()}"
            tmp.write_bytes(files["mp4"])
            os.replace(tmp, video)
        duration = meta.get("duration")
        if duration is None:
            try:
                duration = video_duration(video)
            except VideoDecodeError as err:
                raise AnnotationError(source, key, err.reason) from None
        duration = positive_duration(duration, source, key)
        relative = str(video.relative_to(self.extract_dir))
        event = Event(caption, ((0.0, duration),))
        return VideoRecord(f"{path.stem}/{key}", relative, duration, split, (event,))
