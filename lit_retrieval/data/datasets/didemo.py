"""`DiDeMoDataModule`: DiDeMo for paragraph-to-video retrieval (Hendricks et al., arXiv:1708.01641).
The release's layout, the one-video-per-stem rule and the parser are in `lit_retrieval.data.formats.didemo`.
"""

from __future__ import annotations

from lit_retrieval.data.batching.datamodule import SplitFilesDataModule
from lit_retrieval.data.formats.didemo import DiDeMoParser, FileNames


class DiDeMoDataModule(SplitFilesDataModule):
    """DiDeMo, paragraph-to-video over the annotated window.

    Args:
        annotation_dir: folder of `train_data.json`, `val_data.json`, `test_data.json`.
        split_files: file of each split name.
        video_ext: appended to the `video` name (`.mp4`: the release downloader's `<video>.mp4`;
            `None`: the name as written).
        file_names: `full` (`<video><video_ext>`) or `stem` (`<stem><video_ext>`, the name less its
            extension, for files renamed by stem). Names of one stem are one video either way.
        window_seconds: frames are sampled in [0, window_seconds) of each file (clipped to its
            length): 32 by default, the seconds 0-31 CLIP4Clip's loader reads; `None`: the
            annotated window, 5 s x `num_segments` (see `lit_retrieval.data.formats.didemo`).
        trim_to_annotation: sample within that window (on by default here; off: the whole file).
        **kwargs: the common options of `VideoTextDataModule`.
    """

    def __init__(
        self,
        annotation_dir: str,
        split_files: dict[str, str] | None = None,
        video_ext: str | None = ".mp4",
        file_names: FileNames = "full",
        window_seconds: float | None = 32.0,
        trim_to_annotation: bool = True,
        **kwargs,
    ) -> None:
        split_files = split_files or {"train": "train_data.json", "val": "val_data.json", "test": "test_data.json"}
        super().__init__(annotation_dir, split_files, trim_to_annotation=trim_to_annotation, **kwargs)
        DiDeMoParser(video_ext, window_seconds, file_names)  # refuses bad options when the config is parsed
        self.video_ext = video_ext
        self.file_names = file_names
        self.window_seconds = window_seconds

    def parser(self) -> DiDeMoParser:
        root = self.video_root or self.default_video_root()
        return DiDeMoParser(self.video_ext, self.window_seconds, self.file_names, root)
