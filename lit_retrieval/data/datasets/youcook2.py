"""`YouCook2DataModule`: YouCook2 (Zhou et al., AAAI 2018) for per-segment text-to-video retrieval.
The release's layout, the per-segment records and the parser are in `lit_retrieval.data.formats.youcook2`.
"""

from __future__ import annotations

from pathlib import Path

from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.batching.datamodule import VideoTextDataModule
from lit_retrieval.data.formats.youcook2 import FileLayout, YouCook2Parser
from lit_retrieval.data.records import VideoRecord


class YouCook2DataModule(VideoTextDataModule):
    """YouCook2 per-segment retrieval (train on `training`, test on `validation` by default).

    Args:
        annotation: the release's `youcookii_annotations_trainval.json`.
        subsets: release subset -> split name; other subsets are left out.
        file_layout: `release` (`{subset}/{recipe_type}/{VIDEO}{ext}`) or `flat` (`{VIDEO}{ext}`).
        video_exts: extensions tried in turn for each video.
        **kwargs: the common options of `VideoTextDataModule` (`holdout_val` for a val split:
            the segments of one video move together).
    """

    def __init__(
        self,
        annotation: str,
        subsets: dict[str, str] | None = None,
        file_layout: FileLayout = "release",
        video_exts: list[str] | None = None,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.annotation = Path(annotation)
        self.subsets = subsets
        self.file_layout = file_layout
        self.video_exts = tuple(video_exts or (".mp4", ".mkv", ".webm"))
        self.parser()  # refuses a bad file_layout when the config is parsed

    @property
    def source(self) -> str:
        return str(self.annotation)

    def default_video_root(self) -> Path:
        return self.annotation.parent / "raw_videos"

    def parser(self) -> YouCook2Parser:
        root = self.video_root or self.default_video_root()
        return YouCook2Parser(root, self.subsets, self.file_layout, self.video_exts)

    def load_records(self, collector: RecordCollector) -> list[VideoRecord]:
        return self.parser().load(self.annotation, collector)
