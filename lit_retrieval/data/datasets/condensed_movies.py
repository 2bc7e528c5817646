"""Condensed Movies (CMD; Bain et al., arXiv:2005.04208), SALI's primary testbed: two-minute movie scenes, one
caption each, split per movie.

Files of the original release's `metadata/` folder (CSV with headers):
`clips.csv` (videoid, upload_year, imdbid, ...), `descriptions.csv` (imdbid, videoid, description),
`durations.csv` (videoid, duration: the length with the YouTube outro removed) and `split.csv`
(imdbid, split). A clip's split is its movie's; its video is `{upload_year}/{videoid}{ext}`.
As in the reference loader, empty and repeated descriptions are dropped. Only about a third of the
catalogue can still be downloaded, so clips whose video file is absent are left out (counted and
logged) unless `require_video` is off.

A *clip split file* (`split_file`) overrides the per-movie split with one split per clip: a CSV
with the columns `videoid` and `split`, each split one of `SPLIT_NAMES`. This expresses SALI's
protocol (SALI Sec. 4: 7,073 train / 724 val / 2,262 test clips, 562 `excluded` train-movie clips
that share a movie with the training set) and the Sec. 2 diagnosis pool (every obtainable clip
in one split). The paper does not publish which clips form its splits (nor how its 140 extra test
clips and the 562 excluded ones were chosen beyond "selected by caption"), so the file is the
user's; clips it does not list are left out (counted in a warning).
"""

from __future__ import annotations

import csv
import logging
import math
from pathlib import Path

from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.records import AnnotationError, Event, VideoRecord
from lit_retrieval.data.reading import first_existing, read_csv
from lit_retrieval.data.batching.datamodule import VideoTextDataModule

log = logging.getLogger(__name__)

FILES = {
    "clips": ("clips.csv", ("videoid", "upload_year", "imdbid")),
    "descriptions": ("descriptions.csv", ("videoid", "description")),
    "durations": ("durations.csv", ("videoid", "duration")),
    "split": ("split.csv", ("imdbid", "split")),
}
SPLIT_NAMES = ("train", "val", "test", "excluded")


def read_clip_splits(path: Path) -> dict[str, str]:
    """`{videoid: split}` of a clip split file; a bad row is an `AnnotationError` naming `file:line`."""
    splits: dict[str, str] = {}
    lines: dict[str, int] = {}
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in ("videoid", "split") if c not in (reader.fieldnames or [])]
            if missing:
                raise AnnotationError(f"{path}:1", "-", f"missing column(s) {missing} (header: {reader.fieldnames})")
            for row in reader:
                where = f"{path}:{reader.line_num}"
                if None in row or None in row.values():
                    raise AnnotationError(
                        where, "-", f"expected {len(reader.fieldnames)} fields, got a row of another length"
                    )
                video_id, split = row["videoid"].strip(), row["split"].strip()
                if not video_id:
                    raise AnnotationError(where, "-", "empty videoid")
                if split not in SPLIT_NAMES:
                    raise AnnotationError(
                        where, "-", f"split {split!r} of clip {video_id!r} is not one of {list(SPLIT_NAMES)}"
                    )
                if video_id in splits:
                    raise AnnotationError(
                        where, "-", f"clip {video_id!r} is listed again (first at line {lines[video_id]})"
                    )
                splits[video_id], lines[video_id] = split, reader.line_num
    except FileNotFoundError:
        raise AnnotationError(str(path), "-", "clip split file not found") from None
    except UnicodeDecodeError as err:
        raise AnnotationError(str(path), "-", f"not UTF-8 text ({err})") from None
    return splits


def keyed_rows(
    rows: list[dict[str, str]], key: str, source: Path, collector: RecordCollector
) -> dict[str, dict[str, str]]:
    """Rows by their `key` column; a key repeated with different values is a bad record (the
    first row stays), an exact repeat is harmless."""
    out: dict[str, dict[str, str]] = {}
    for row in rows:
        name = row[key].strip()
        if name in out and out[name] != row:
            collector.reject(AnnotationError(str(source), name, f"repeated {key} with different values"))
            continue
        out.setdefault(name, row)
    return out


class CondensedMoviesParser:
    """Turns the CMD metadata CSVs into one `VideoRecord` per captioned clip (split per movie, or
    per clip from `split_file`)."""

    def __init__(
        self,
        video_root: str | Path,
        video_exts: tuple[str, ...] = (".mkv", ".mp4", ".webm"),
        require_video: bool = True,
        split_file: str | Path | None = None,
    ) -> None:
        self.video_root = Path(video_root)
        self.video_exts = tuple(video_exts)
        self.require_video = require_video
        self.split_file = Path(split_file) if split_file is not None else None

    def video_path(self, upload_year: str, video_id: str) -> str | None:
        stem = f"{upload_year}/{video_id}"
        found = first_existing(self.video_root, stem, self.video_exts)
        return found if found is not None or self.require_video else f"{stem}{self.video_exts[0]}"

    def load(self, metadata: str | Path, collector: RecordCollector | None = None) -> list[VideoRecord]:
        collector = collector or RecordCollector()
        metadata = Path(metadata)
        used = {name: spec for name, spec in FILES.items() if not (name == "split" and self.split_file)}
        tables = {name: read_csv(metadata / file, columns) for name, (file, columns) in used.items()}
        clips = keyed_rows(tables["clips"], "videoid", metadata / FILES["clips"][0], collector)
        durations = {
            k: row["duration"]
            for k, row in keyed_rows(
                tables["durations"], "videoid", metadata / FILES["durations"][0], collector
            ).items()
        }
        if self.split_file:
            clip_splits = read_clip_splits(self.split_file)
            movie_splits = {}
        else:
            clip_splits = None
            movie_splits = {
                k: row["split"].strip()
                for k, row in keyed_rows(tables["split"], "imdbid", metadata / FILES["split"][0], collector).items()
            }
        source = str(metadata / FILES["descriptions"][0])
        records, seen, unavailable, unlisted = [], set(), 0, 0
        for row in tables["descriptions"]:
            video_id, text = row["videoid"].strip(), (row["description"] or "").strip()
            if not text or text.lower() == "nan" or video_id in seen:
                continue
            seen.add(video_id)
            if clip_splits is not None and video_id not in clip_splits:
                unlisted += 1
                continue
            try:
                record = self._record(video_id, text, clips, durations, movie_splits, clip_splits, source)
            except AnnotationError as err:
                collector.reject(err)
                continue
            if record is None:
                unavailable += 1
            else:
                records.append(record)
        if unlisted:
            log.warning(
                "%s: %d captioned clips are not in the clip split file %s (left out)",
                metadata,
                unlisted,
                self.split_file,
            )
        if unavailable:
            log.info("%s: %d captioned clips have no video under %s (left out)", metadata, unavailable, self.video_root)
        return records

    def _record(
        self,
        video_id: str,
        text: str,
        clips: dict,
        durations: dict,
        movie_splits: dict,
        clip_splits: dict | None,
        source: str,
    ) -> VideoRecord | None:
        clip = clips.get(video_id)
        if clip is None:
            raise AnnotationError(source, video_id, "not in clips.csv")
        split = clip_splits[video_id] if clip_splits is not None else movie_splits.get(clip["imdbid"])
        if not split:
            raise AnnotationError(source, video_id, f"movie {clip['imdbid']!r} has no split in split.csv")
        try:
            duration = float(durations[video_id])
        except (KeyError, ValueError):
            raise AnnotationError(
                source, video_id, f"no valid duration in durations.csv (got {durations.get(video_id)!r})"
            ) from None
        if not 0 < duration < math.inf:
            raise AnnotationError(source, video_id, f"duration must be positive and finite, got {duration:g}")
        path = self.video_path(clip["upload_year"].split(".")[0], video_id)
        if path is None:
            return None
        return VideoRecord(
            video_id=video_id, path=path, duration=duration, split=split, events=(Event(text, ((0.0, duration),)),)
        )


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
            protocol; clips it does not list are left out (see `lit_retrieval.data.datasets.condensed_movies`).
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
        parser = CondensedMoviesParser(
            self.video_root or self.default_video_root(), self.video_exts, self.require_video, self.split_file
        )
        return parser.load(self.metadata_dir, collector)
