"""`MELONDataModule`: MELON (Hur et al.; MELON Sec. 3) for multi-event text-to-long-video retrieval.
The annotation's layout, its tolerant parser and the construction rules are in
`lit_retrieval.data.formats.melon`.
"""

from __future__ import annotations

from pathlib import Path

from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.batching.datamodule import VideoTextDataModule
from lit_retrieval.data.formats.melon import MelonFields, MelonParser
from lit_retrieval.data.media.video import video_duration
from lit_retrieval.data.records import VideoRecord


class MELONDataModule(VideoTextDataModule):
    """MELON (multi-event text-to-long-video; 8,400 train / 3,600 test videos).

    Args:
        annotation: one file whose records carry a split field, or `{split: file}`.
        fields: key names of the release (matched case-insensitively).
        video_ext: extension of `{video_id}{video_ext}` for records without a path.
        probe_durations: read a missing duration from the video file's header.
        **kwargs: the common options of `VideoTextDataModule` (MEA needs `min_events: 2`).
    """

    def __init__(
        self,
        annotation: str | dict[str, str],
        fields: MelonFields | None = None,
        video_ext: str = ".mp4",
        probe_durations: bool = True,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.files = (
            {None: Path(annotation)} if isinstance(annotation, str) else {k: Path(v) for k, v in annotation.items()}
        )
        self.fields = fields
        self.video_ext = video_ext
        self.probe_durations = probe_durations

    @property
    def source(self) -> str:
        return ", ".join(str(f) for f in self.files.values())

    def default_video_root(self) -> Path:
        return next(iter(self.files.values())).parent

    def load_records(self, collector: RecordCollector) -> list[VideoRecord]:
        root = self.video_root or self.default_video_root()
        prober = (lambda path: video_duration(root / path)) if self.probe_durations else None
        parser = MelonParser(self.fields, self.video_ext, prober)
        records = [r for split, path in self.files.items() for r in parser.load(path, split, collector)]
        return collector.unique(records, self.source, one_record_per_video=True)
