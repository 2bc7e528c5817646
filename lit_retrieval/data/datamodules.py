"""DataModules of the public datasets: MELON, ActivityNet Captions, DiDeMo (multi-event), and
Condensed Movies and MSR-VTT 1k-A (single captions; SALI).

Each reads its own annotation layout (see the parser modules) into the shared records; batching,
splits, frame sampling and the bad-record and bad-video policies come from `VideoTextDataModule`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

from lit_retrieval.data.activitynet import ActivityNetParser
from lit_retrieval.data.condensed_movies import CondensedMoviesParser
from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.datamodule import VideoTextDataModule
from lit_retrieval.data.didemo import DiDeMoParser, FileNames
from lit_retrieval.data.melon import MelonFields, MelonParser
from lit_retrieval.data.msrvtt import MSRVTTParser
from lit_retrieval.data.records import VideoRecord
from lit_retrieval.data.video import video_duration


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
        self.files = {None: Path(annotation)} if isinstance(annotation, str) else {k: Path(v) for k, v in annotation.items()}
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
        return collector.unique(records, self.source)


class SplitFilesDataModule(VideoTextDataModule, ABC):
    """A dataset released as one annotation file per split in one folder."""

    def __init__(self, annotation_dir: str, split_files: dict[str, str], **kwargs) -> None:
        super().__init__(**kwargs)
        self.annotation_dir = Path(annotation_dir)
        self.split_files = split_files

    @property
    def source(self) -> str:
        return str(self.annotation_dir)

    def default_video_root(self) -> Path:
        return self.annotation_dir

    @abstractmethod
    def parser(self) -> ActivityNetParser | DiDeMoParser:
        """The parser of this dataset's files."""

    def load_records(self, collector: RecordCollector) -> list[VideoRecord]:
        parser = self.parser()
        return [r for split, name in self.split_files.items() for r in parser.load(self.annotation_dir / name, split, collector)]


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
        return ActivityNetParser(self.video_root or self.default_video_root(), self.strip_prefix, self.video_exts, self.fix_timestamps)


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
            annotated window, 5 s x `num_segments` (see `lit_retrieval.data.didemo`).
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


class CondensedMoviesDataModule(VideoTextDataModule):
    """Condensed Movies: one caption per two-minute scene, split per movie (`split.csv`).

    Args:
        metadata_dir: folder of `clips.csv`, `descriptions.csv`, `durations.csv`, `split.csv`.
        video_exts: extensions tried for `{upload_year}/{videoid}`.
        require_video: leave out clips whose file is absent (most of the catalogue is offline).
        trim_to_annotation: frames are sampled in [0, duration of durations.csv], which drops the
            YouTube outro (see `VideoTextDataModule`; on by default here).
        split_file: a clip split file (CSV `videoid,split`; train / val / test / excluded) that
            replaces the per-movie `split.csv`, e.g. SALI's 7,073 / 724 / 2,262 (+562 excluded)
            protocol; clips it does not list are left out (see `lit_retrieval.data.condensed_movies`).
        **kwargs: the common options of `VideoTextDataModule` (SALI: 128 frames, `shots`).
    """

    def __init__(
        self,
        metadata_dir: str,
        video_exts: list[str] | None = None,
        require_video: bool = True,
        trim_to_annotation: bool = True,
        val_split: str | None = "val",
        split_file: str | None = None,
        **kwargs,
    ) -> None:
        super().__init__(trim_to_annotation=trim_to_annotation, val_split=val_split, **kwargs)
        self.metadata_dir = Path(metadata_dir)
        self.video_exts = tuple(video_exts or (".mkv", ".mp4", ".webm"))
        self.require_video = require_video
        self.split_file = split_file

    @property
    def source(self) -> str:
        return str(self.metadata_dir)

    def default_video_root(self) -> Path:
        return self.metadata_dir.parent / "videos"

    def load_records(self, collector: RecordCollector) -> list[VideoRecord]:
        parser = CondensedMoviesParser(self.video_root or self.default_video_root(), self.video_exts, self.require_video, self.split_file)
        return parser.load(self.metadata_dir, collector)


class MSRVTTDataModule(VideoTextDataModule):
    """MSR-VTT: training on every caption of the 9k training videos (10% held out as `val`),
    testing on the 1k-A split.

    Args:
        annotation_dir: folder of the three files below.
        data_file / train_csv / test_csv: the file names (CLIP4Clip's release by default).
        video_ext: extension of `{video_id}` under the video root.
        val_fraction / val_seed: share of training videos held out for validation, and its seed.
        **kwargs: the common options of `VideoTextDataModule` (SALI: 12 frames).
    """

    def __init__(
        self,
        annotation_dir: str,
        data_file: str = "MSRVTT_data.json",
        train_csv: str = "MSRVTT_train.9k.csv",
        test_csv: str = "MSRVTT_JSFUSION_test.csv",
        video_ext: str = ".mp4",
        val_fraction: float = 0.1,
        val_seed: int = 0,
        val_split: str | None = "val",
        **kwargs,
    ) -> None:
        super().__init__(val_split=val_split, **kwargs)
        self.annotation_dir = Path(annotation_dir)
        self.files = (data_file, train_csv, test_csv)
        self.parser = MSRVTTParser(video_ext, val_fraction, val_seed)

    @property
    def source(self) -> str:
        return str(self.annotation_dir / self.files[0])

    def default_video_root(self) -> Path:
        return self.annotation_dir / "videos"

    def load_records(self, collector: RecordCollector) -> list[VideoRecord]:
        return self.parser.load(self.annotation_dir, *self.files, collector=collector)
