"""`ActivityNetDataModule`: ActivityNet Captions for paragraph-to-video retrieval (Krishna et al.,
arXiv:1705.00754). The files' layout and the parser are in `lit_retrieval.data.formats.activitynet`.
"""

from __future__ import annotations

from lit_retrieval.data.batching.datamodule import SplitFilesDataModule
from lit_retrieval.data.formats.activitynet import ActivityNetParser


class ActivityNetDataModule(SplitFilesDataModule):
    """ActivityNet Captions, paragraph-to-video (test = `val_1`, as CLIP4Clip and SALI).

    Args:
        annotation_dir: folder of `train.json`, `val_1.json`, `val_2.json`.
        split_files: file of each split name.
        strip_prefix: look for `{id without "v_"}.ext` (CLIP4Clip) instead of `v_{id}.ext` (MeVTR).
        video_exts: extensions tried in turn for each video file.
        fix_timestamps: repair reversed, zero-length and past-the-end timestamps (CLIP4Clip's
            rule) instead of counting those videos as bad records.
        **kwargs: the common options of `VideoTextDataModule`.
    """

    def __init__(
        self,
        annotation_dir: str,
        split_files: dict[str, str] | None = None,
        strip_prefix: bool = True,
        video_exts: list[str] | None = None,
        fix_timestamps: bool = False,
        **kwargs,
    ) -> None:
        super().__init__(annotation_dir, split_files or {"train": "train.json", "test": "val_1.json"}, **kwargs)
        self.strip_prefix = strip_prefix
        self.video_exts = tuple(video_exts or (".mp4", ".mkv", ".webm"))
        self.fix_timestamps = fix_timestamps

    def parser(self) -> ActivityNetParser:
        return ActivityNetParser(
            self.video_root or self.default_video_root(), self.strip_prefix, self.video_exts, self.fix_timestamps
        )
